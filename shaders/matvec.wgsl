// Matrix-vector product for decode (one token): y[r] = sum_k x[k] * W[r, k] (+ b[r]).
//
// W is row-major [rows, cols] (out_features, in_features). Composed in front of this file: the
// weight-format snippet (`load_weight(i)`, `load_weight4(i)`, `dot_run(i, xs)` with RUN_VEC4S,
// binding 3) and `const USE_RUNS: bool` (walk K a run at a time, see below), the activation snippet
// (`load_x(i)`, `load_x4(i)`, binding 2; the aligned vec4 form when cols is a multiple of 4), the
// bias snippet (`load_bias(r)`, binding 4, or a constant 0), `fn store_y(i, v)` (y[i] = v, or
// y[i] += v: the residual add folded in), `const TEAM: u32` and
// `fn reduce_team(v: vec4<f32>, lid: u32) -> vec4<f32>`, which sums v over the TEAM threads
// lid - lid % TEAM .. (all of them must call it) and returns the sum at least to the first one.
//
// Every thread owns a quad of 4 consecutive rows, and TEAM threads share a quad by splitting K: lane
// l takes columns 4l .. 4l+3, then 4(l + TEAM) .., so neighbouring lanes read neighbouring
// weights. Each K step loads a 4x4 block of W and one vec4 of x (reused for the 4 rows). The host
// picks TEAM and the reduction (kernels/tuning.ts, matvecPlan): TEAM = 1 needs no reduction at all, and
// otherwise the lanes' partial sums are combined with subgroup shuffles (no barriers) when the
// device has subgroups, or in workgroup memory with barriers when it does not.
// A workgroup of 64 threads covers 64 / TEAM quads; with many rows the grid is folded into 2-D and
// the quad is recovered from the flat workgroup index.
//
// With USE_RUNS (quantized types on CPU adapters: kernels/registry.ts, usesWeightRuns) the lanes split K by
// runs of 4 * RUN_VEC4S weights (a block, or a K-quant's sub-block) instead, each row's run taken
// by one dot_run, which decodes the run's scales once; the run's x is loaded once for the 4 rows.
// (cols is then a multiple of the run: rows of quantized weights are whole blocks.)

// W may be one row range of a split matrix (see GpuMatrix.parts): rows are the part's, and row r
// of it is y[row_offset + r] (and bias[row_offset + r]).
struct Params {
  rows: u32,
  cols: u32,
  row_offset: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>; // [row_offset + rows ..]

const WORKGROUP_SIZE: u32 = 64u;
const QUADS_PER_WORKGROUP: u32 = WORKGROUP_SIZE / TEAM;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let r0 = ((wg.y * grid.x + wg.x) * QUADS_PER_WORKGROUP + lid / TEAM) * 4u; // first row of the quad
  let lane = lid % TEAM;
  let cols = params.cols;
  let last_row = params.rows - 1u;
  // No early return: reduce_team may hold barriers or subgroup operations that every thread reaches.
  let quad_exists = r0 < params.rows;

  var acc = vec4<f32>(); // acc[j]: this lane's part of the dot product of row r0 + j
  if (quad_exists) {
    // Rows past the end (a ragged last quad) re-read the last row; their sums are not stored.
    let w0 = min(r0, last_row) * cols;
    let w1 = min(r0 + 1u, last_row) * cols;
    let w2 = min(r0 + 2u, last_row) * cols;
    let w3 = min(r0 + 3u, last_row) * cols;
    if (USE_RUNS) {
      let run = 4u * RUN_VEC4S;
      for (var k = lane * run; k < cols; k += TEAM * run) {
        var xs: array<vec4<f32>, RUN_VEC4S>;
        for (var u = 0u; u < RUN_VEC4S; u++) {
          xs[u] = load_x4(k + 4u * u);
        }
        acc += vec4<f32>(dot_run(w0 + k, xs), dot_run(w1 + k, xs), dot_run(w2 + k, xs), dot_run(w3 + k, xs));
      }
    } else {
      let k_vec_end = cols & ~3u;
      for (var k = lane * 4u; k < k_vec_end; k += TEAM * 4u) {
        // Column j of w holds W[r0 + j, k .. k+3], so x4 * w = (dot(x4, W[r0 + j, k..]))_j.
        let w = mat4x4<f32>(load_weight4(w0 + k), load_weight4(w1 + k), load_weight4(w2 + k), load_weight4(w3 + k));
        acc += load_x4(k) * w;
      }
      // The last cols % 4 columns (only when cols is not a multiple of 4).
      for (var k = k_vec_end + lane; k < cols; k += TEAM) {
        acc += load_x(k) * vec4<f32>(load_weight(w0 + k), load_weight(w1 + k), load_weight(w2 + k), load_weight(w3 + k));
      }
    }
  }
  acc = reduce_team(acc, lid);

  if (quad_exists && lane == 0u) {
    let o = params.row_offset + r0;
    store_y(o, acc.x + load_bias(o));
    if (r0 + 1u <= last_row) { store_y(o + 1u, acc.y + load_bias(o + 1u)); }
    if (r0 + 2u <= last_row) { store_y(o + 2u, acc.z + load_bias(o + 2u)); }
    if (r0 + 3u <= last_row) { store_y(o + 3u, acc.w + load_bias(o + 3u)); }
  }
}
