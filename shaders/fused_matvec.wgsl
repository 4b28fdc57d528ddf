// Decode (one token) projections with their neighbours folded in, one dispatch each:
//
//   MODE_STORE:      y[o_s + r] = s · (x∘γ)·W_s[r]ᵀ + b_s[r]             (Q/K/V as one pass; lm_head)
//   MODE_ACCUMULATE: y[o_s + r] += s · (x∘γ)·W_s[r]ᵀ + b_s[r]            (x += Wo·a, x += W_down·h)
//   MODE_SWIGLU:     y[r] = act(s · (x∘γ)·W_gate[r]ᵀ) · s · (x∘γ)·W_up[r]ᵀ    (gate/up with SwiGLU or GeGLU)
//
// where, with NORM (RMSNorm folded in), s = 1 / sqrt(mean(x²) + eps) and γ the norm's weight;
// without, s = 1 and γ = 1. The norm needs only sum(x²), which each thread sums itself over the
// columns it reads anyway (its lane's share; the team adds them up), and x∘γ is formed on load: the
// normalized vector is never written.
//
// The rows are those of SEGMENTS weight matrices (or row ranges of split ones, GpuMatrix.parts),
// stacked, and handed out in blocks of QUADS quads (4 QUADS rows): segment s covers blocks
// params.seg[s].x .. of the grid, has params.seg[s].y rows, writes y from row params.seg[s].z, and
// reads its bias from params.seg[s].w. In MODE_SWIGLU, segment 0 is W_gate and segment 1 W_up,
// with the same rows; the grid covers segment 0's blocks and each thread computes the block in both.
// A block is TEAM threads' (lanes split K as in matvec.wgsl). A thread's loads of x, γ (and, with
// NORM, the second pass over x) are shared by the 4 QUADS rows it computes: more rows a thread
// means fewer loads per weight, fewer threads. CPU devices, where every load costs, take more; GPUs
// one quad.
//
// act is silu, or with GELU_TANH gelu_tanh (gelu_tanh.wgsl).
//
// Composed in front of this file (kernels/fused-matvec.ts, fusedMatvecSpec): `const MODE`, `NORM`, `SEGMENTS`,
// `QUADS`, `WORKGROUP_SIZE`; `GELU_TANH` with gelu_tanh.wgsl; the activation snippet (`load_x`, `load_x4`, binding 2);
// `load_gamma`/`load_gamma4` (binding 5, or 1 without NORM); TEAM and reduce_team (as for
// matvec.wgsl); and per segment s a renamed weight-format snippet and bias (bindings 10 + 2s and
// 11 + 2s) behind `fn block_dot(s, r0, last_row, lane) -> array<vec4<f32>, QUADS>` (lane's part of
// the dot products with x∘γ of rows r0 + 4q .. r0 + 4q + 3, rows past last_row reading last_row)
// and `fn seg_bias(s, r) -> f32`. The `QUADS` loops are unrolled by kernels/fused-matvec.ts.

const MODE_STORE: u32 = 0u;
const MODE_ACCUMULATE: u32 = 1u;
const MODE_SWIGLU: u32 = 2u;
const MAX_SEGMENTS: u32 = 8u;

struct Params {
  cols: u32,
  total_blocks: u32,
  eps: f32,
  seg: array<vec4<u32>, MAX_SEGMENTS>, // (first block, rows, first output row, first bias row)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

const BLOCKS_PER_WORKGROUP: u32 = WORKGROUP_SIZE / TEAM;

/** x∘γ at k .. k+3 (k a multiple of 4 below cols & ~3). */
fn load_xn4(k: u32) -> vec4<f32> {
  return load_x4(k) * load_gamma4(k);
}

fn load_xn(k: u32) -> f32 {
  return load_x(k) * load_gamma(k);
}

/** Row r of the output from its dot product(s), scaled by s. */
fn emit(seg: u32, r: u32, dot: f32, dot_up: f32, s: f32) {
  let info = params.seg[seg];
  let o = info.z + r;
  let v = dot * s + seg_bias(seg, info.w + r);
  if (MODE == MODE_STORE) {
    y[o] = v;
  } else if (MODE == MODE_ACCUMULATE) {
    y[o] = y[o] + v;
  } else if (GELU_TANH) {
    y[o] = gelu_tanh(v) * (dot_up * s); // GeGLU (gelu_tanh.wgsl)
  } else {
    // silu(g) = g / (1 + exp(-g)); for very negative g, exp(-g) = inf and g / inf = -0, the limit.
    y[o] = v / (1.0 + exp(-v)) * (dot_up * s);
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let block = (wg.y * grid.x + wg.x) * BLOCKS_PER_WORKGROUP + lid / TEAM;
  let lane = lid % TEAM;
  let cols = params.cols;
  // No early return: reduce_team may hold barriers or subgroup operations that every thread reaches.
  let block_exists = block < params.total_blocks;
  var seg = 0u;
  for (var s = 1u; s < SEGMENTS; s++) {
    if (block >= params.seg[s].x) {
      seg = s;
    }
  }
  let r0 = (block - params.seg[seg].x) * 4u * QUADS; // first row of the block within its segment
  let last_row = params.seg[seg].y - 1u;

  var acc: array<vec4<f32>, QUADS>;
  var acc_up: array<vec4<f32>, QUADS>;
  var sum_sq = 0.0;
  if (block_exists) {
    if (NORM) {
      let k_vec_end = cols & ~3u;
      for (var k = lane * 4u; k < k_vec_end; k += TEAM * 4u) {
        let v = load_x4(k);
        sum_sq += dot(v, v);
      }
      for (var k = k_vec_end + lane; k < cols; k += TEAM) {
        let v = load_x(k);
        sum_sq += v * v;
      }
    }
    acc = block_dot(seg, r0, last_row, lane);
    if (MODE == MODE_SWIGLU) {
      acc_up = block_dot(1u, r0, last_row, lane);
    }
  }
  for (var q = 0u; q < QUADS; q++) {
    acc[q] = reduce_team(acc[q], lid);
    if (MODE == MODE_SWIGLU) {
      acc_up[q] = reduce_team(acc_up[q], lid);
    }
  }
  var s = 1.0;
  if (NORM) {
    s = inverseSqrt(reduce_team(vec4<f32>(sum_sq, 0.0, 0.0, 0.0), lid).x / f32(cols) + params.eps);
  }

  if (block_exists && lane == 0u) {
    for (var q = 0u; q < QUADS; q++) {
      let r = r0 + 4u * q;
      if (r <= last_row) { emit(seg, r, acc[q].x, acc_up[q].x, s); }
      if (r + 1u <= last_row) { emit(seg, r + 1u, acc[q].y, acc_up[q].y, s); }
      if (r + 2u <= last_row) { emit(seg, r + 2u, acc[q].z, acc_up[q].z, s); }
      if (r + 3u <= last_row) { emit(seg, r + 3u, acc[q].w, acc_up[q].w, s); }
    }
  }
}
