// Matrix-matrix product for prefill (T tokens): y[t, r] = sum_k x[t, k] * W[r, k] (+ b[r]),
// i.e. Y = X·Wᵀ with X [T, cols] and W row-major [rows, cols] (out_features, in_features).
//
// Composed in front of this file: the weight-format snippet (`load_weight(i)`, `load_weight4(i)`,
// binding 3), the activation snippet (`load_x(i)`, `load_x4(i)`, binding 2), the bias snippet
// (`load_bias(r)`, binding 4, or a constant 0) and `fn store_y(i, v)`: y[i] = v, or y[i] += v
// (the residual add folded in: x += Wo·a, x += W_down·h). With `const SECOND: bool` true, a second
// weight snippet renamed `_up` (binding 6) is a second matrix W2 of the same shape, and each X load
// serves both: with SWIGLU, W is W_gate and W2 W_up, y = silu(X·W_gateᵀ) * (X·W_upᵀ) (the
// feed-forward's input in one pass); with PAIR, y = X·Wᵀ + b and y2 = X·W2ᵀ + b2 (the prefill's K
// and V). Without SECOND, `load_weight4_up` / `load_weight_up` are stubs the compiler drops. With a multiple of
// 4 columns the host picks the aligned snippets, whose 4-element loads are single vector loads;
// otherwise they are 4 scalar loads. Then matmul_output.wgsl: the parameters, y, and
// store_output_row (bias, or SwiGLU, per token of a thread's block).
//
// Register blocking, no workgroup memory and no barriers: every thread computes a TOKENS-token x
// 4 ROW_QUADS-row block of Y in TOKENS x ROW_QUADS vec4 accumulators, walking K four elements at a
// time. Each step loads ROW_QUADS 4x4 blocks of W (each a mat4x4 whose column j is row r0 + 4q + j)
// and TOKENS slices of X, and does 4 TOKENS ROW_QUADS dot products: each loaded W element is used
// TOKENS times from registers, each X one 4 ROW_QUADS times. (A bigger block: fewer loads per
// product, more registers and fewer threads.) Threads at the ragged edges clamp their load indices
// to the last row/token (always in bounds, no branches in the loop) and skip the stores that fall
// outside Y.
//
// This is the matmul of CPU adapters, and of GPUs for fewer than 32 tokens; GPUs take the
// shared-memory tiles of matmul_tiled.wgsl from there (kernels/tuning.ts, matmulShape). Why not tiles
// everywhere: on SwiftShader (the CPU Vulkan the tests run on) a workgroupBarrier is extremely
// expensive and global loads are cheap (CPU caches), so tiles with barriers are many times slower
// there (measurements: docs/tuning.md#matmul).

// MATMUL_WX x MATMUL_WY threads, each ROWS = 4 ROW_QUADS rows x TOKENS tokens (composed: kernels/weights.ts,
// matmulShape); the `TOKENS`, `ROW_QUADS` and `ROWS` loops are unrolled there.
@compute @workgroup_size(MATMUL_WX, MATMUL_WY)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r0 = gid.x * ROWS;   // first output row (feature) of this thread's block
  let t0 = gid.y * TOKENS; // first token
  if (r0 >= params.rows || t0 >= params.T) {
    return; // no barriers in this kernel, so threads past the edge may leave early
  }
  let cols = params.cols;
  let last_row = params.rows - 1u;
  let last_t = params.T - 1u;
  // Start of each row of W / each token of X used by this block, clamped into the matrices.
  var w: array<u32, ROWS>;
  for (var j = 0u; j < ROWS; j++) {
    w[j] = min(r0 + j, last_row) * cols;
  }
  var x: array<u32, TOKENS>;
  for (var u = 0u; u < TOKENS; u++) {
    x[u] = min(t0 + u, last_t) * cols;
  }

  // acc[u * ROW_QUADS + q][j] = y[t0 + u, r0 + 4q + j] (SECOND: W's; acc_up W2's)
  var acc: array<vec4<f32>, TOKENS * ROW_QUADS>;
  var acc_up: array<vec4<f32>, TOKENS * ROW_QUADS>;
  var k = 0u;
  for (; k + 4u <= cols; k += 4u) {
    // Column j of m[q] holds W[r0 + 4q + j, k .. k+3], so x4 * m[q] = (dot(x4, W[r0 + 4q + j, k..]))_j.
    var m: array<mat4x4<f32>, ROW_QUADS>;
    var m_up: array<mat4x4<f32>, ROW_QUADS>;
    for (var q = 0u; q < ROW_QUADS; q++) {
      m[q] = mat4x4<f32>(load_weight4(w[4u * q] + k), load_weight4(w[4u * q + 1u] + k),
                         load_weight4(w[4u * q + 2u] + k), load_weight4(w[4u * q + 3u] + k));
      if (SECOND) {
        m_up[q] = mat4x4<f32>(load_weight4_up(w[4u * q] + k), load_weight4_up(w[4u * q + 1u] + k),
                              load_weight4_up(w[4u * q + 2u] + k), load_weight4_up(w[4u * q + 3u] + k));
      }
    }
    for (var u = 0u; u < TOKENS; u++) {
      let x4 = load_x4(x[u] + k);
      for (var q = 0u; q < ROW_QUADS; q++) {
        acc[u * ROW_QUADS + q] += x4 * m[q];
        if (SECOND) {
          acc_up[u * ROW_QUADS + q] += x4 * m_up[q];
        }
      }
    }
  }
  // The last cols % 4 columns (only when cols is not a multiple of 4).
  for (; k < cols; k++) {
    var wk: array<vec4<f32>, ROW_QUADS>;
    var wk_up: array<vec4<f32>, ROW_QUADS>;
    for (var q = 0u; q < ROW_QUADS; q++) {
      wk[q] = vec4<f32>(load_weight(w[4u * q] + k), load_weight(w[4u * q + 1u] + k), load_weight(w[4u * q + 2u] + k), load_weight(w[4u * q + 3u] + k));
      if (SECOND) {
        wk_up[q] = vec4<f32>(load_weight_up(w[4u * q] + k), load_weight_up(w[4u * q + 1u] + k), load_weight_up(w[4u * q + 2u] + k), load_weight_up(w[4u * q + 3u] + k));
      }
    }
    for (var u = 0u; u < TOKENS; u++) {
      let xk = load_x(x[u] + k);
      for (var q = 0u; q < ROW_QUADS; q++) {
        acc[u * ROW_QUADS + q] += xk * wk[q];
        if (SECOND) {
          acc_up[u * ROW_QUADS + q] += xk * wk_up[q];
        }
      }
    }
  }

  for (var q = 0u; q < ROW_QUADS; q++) {
    let rq = r0 + 4u * q;
    if (rq <= last_row) {
      let bias = rows_bias(rq);
      for (var u = 0u; u < TOKENS; u++) {
        if (t0 + u <= last_t) {
          store_output_row(t0 + u, rq, acc[u * ROW_QUADS + q], acc_up[u * ROW_QUADS + q], bias);
        }
      }
    }
  }
}
