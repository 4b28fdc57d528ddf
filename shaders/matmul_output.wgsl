// What matmul.wgsl and matmul_tiled.wgsl share: their parameters and output binding, and how a
// thread's 4-row block of one token is written to Y (composed in front of both; kernels/weights.ts, which
// also composes SWIGLU, PAIR, SECOND, store_y / store_y2 and load_bias / load_bias2, and GELU_TANH
// with gelu_tanh.wgsl: SWIGLU's gate activation, silu or gelu_tanh).
//
// W may be one row range of a split matrix (see GpuMatrix.parts): rows are the part's, and its
// outputs go to columns row_offset .. of y, whose rows are y_stride (the whole matrix's rows) long.
struct Params {
  T: u32,
  rows: u32,
  cols: u32,
  row_offset: u32, // first row of the whole matrix in this part (bias and y are indexed by it)
  y_stride: u32,   // floats per token in y
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>; // [T, y_stride]

/** The bias of rows r0 .. r0+3 (rows past the end read the last one; they are never stored). */
fn rows_bias(r0: u32) -> vec4<f32> {
  let o = params.row_offset;
  let last_row = params.rows - 1u;
  return vec4<f32>(load_bias(o + min(r0, last_row)), load_bias(o + min(r0 + 1u, last_row)),
                   load_bias(o + min(r0 + 2u, last_row)), load_bias(o + min(r0 + 3u, last_row)));
}

/**
 * Y[t, r0 .. r0+3] from the block's sums: SWIGLU, silu(g) * up or with GELU_TANH gelu_tanh(g) * up
 * (g the gate's sums, up W_up's);
 * otherwise g + bias, and with PAIR also Y2[t, r0 .. r0+3] = up + b2 (up W2's sums). (store_y may
 * add it to y: the residual add.)
 */
fn store_output_row(t: u32, r0: u32, g: vec4<f32>, up: vec4<f32>, bias: vec4<f32>) {
  if (SWIGLU && GELU_TANH) {
    store_block_row(t, r0, gelu_tanh4(g) * up); // GeGLU (gelu_tanh.wgsl)
  } else if (SWIGLU) {
    // silu(g) = g / (1 + exp(-g)); for very negative g, exp(-g) = inf and g / inf = -0, the limit.
    store_block_row(t, r0, g / (1.0 + exp(-g)) * up);
  } else {
    store_block_row(t, r0, g + bias);
    if (PAIR) {
      let last_row = params.rows - 1u;
      let bias2 = vec4<f32>(load_bias2(min(r0, last_row)), load_bias2(min(r0 + 1u, last_row)),
                            load_bias2(min(r0 + 2u, last_row)), load_bias2(min(r0 + 3u, last_row)));
      store_block_row2(t, r0, up + bias2);
    }
  }
}

/** y[t, r0 .. r0+3] = v, leaving out the rows past the end. */
fn store_block_row(t: u32, r0: u32, v: vec4<f32>) {
  let base = t * params.y_stride + params.row_offset + r0;
  store_y(base, v.x);
  if (r0 + 1u < params.rows) { store_y(base + 1u, v.y); }
  if (r0 + 2u < params.rows) { store_y(base + 2u, v.z); }
  if (r0 + 3u < params.rows) { store_y(base + 3u, v.w); }
}

/** y2[t, r0 .. r0+3] = v (PAIR), as store_block_row. */
fn store_block_row2(t: u32, r0: u32, v: vec4<f32>) {
  let base = t * params.y_stride + params.row_offset + r0;
  store_y2(base, v.x);
  if (r0 + 1u < params.rows) { store_y2(base + 1u, v.y); }
  if (r0 + 2u < params.rows) { store_y2(base + 2u, v.z); }
  if (r0 + 3u < params.rows) { store_y2(base + 3u, v.w); }
}
