// fused_matvec.wgsl over the rows of a batched decode step: each workgroup computes its blocks of
// weight rows for every batch row in turn, the same code as one row's (fused_matvec.wgsl's main
// with x and y at the row's offset), so a row's sums never depend on the others and the weights
// of rows 2.. come from cache. The row count is read at run time (batch_count(), uniform: the
// loop may hold reduce_team's barriers); row b reads x from element b * X_STRIDE and writes y
// from element b * Y_STRIDE.
//
// Composed in front (kernels/fused-matvec.ts, fusedMatvecSpec with a batch): what fused_matvec.wgsl
// takes, with the activation snippet reading x at x_base; X_STRIDE, Y_STRIDE; batchRowsWgsl; and
// fused_matvec.wgsl without its main and emit.

var<private> x_base: u32;
var<private> y_base: u32;

/** fused_matvec.wgsl's emit at the row's y_base. */
fn emit(seg: u32, r: u32, dot: f32, dot_up: f32, s: f32) {
  let info = params.seg[seg];
  let o = y_base + info.z + r;
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

  let rows = batch_count();
  for (var b = 0u; b < rows; b++) {
    x_base = b * X_STRIDE;
    y_base = b * Y_STRIDE;
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
}
