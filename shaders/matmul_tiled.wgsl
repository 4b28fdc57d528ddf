// Matrix-matrix product for prefill on GPUs, with shared-memory tiles: y[t, r] = sum_k x[t, k] *
// W[r, k] (+ b[r]), Y = X·Wᵀ, X [T, cols], W row-major [rows, cols]. The same composed snippets and
// variants as matmul.wgsl (load_weight4 at binding 3, load_x4 at binding 2, load_bias, store_y;
// SECOND (SWIGLU or PAIR) with load_weight4_up at binding 6), in their aligned forms: cols is a multiple of 4, and
// matmul_output.wgsl (the parameters, y, store_output_row).
//
// A workgroup of 16 x 16 threads computes a 64-row x 64-token tile of Y. It walks K in steps of
// TILE_K = 16: the 256 threads first copy the step's 64 x 16 slice of W and of X into workgroup
// memory (one vec4 of each per thread: 256 vec4 = 64 x 16 floats), transposed so that for each k
// a thread reads its 4 rows and its 4 tokens as consecutive floats; after a barrier, every thread
// accumulates its 4 x 4 block (register blocking) over the 16 k, then a barrier before the next
// copy. So each element of W and X comes from memory once per tile instead of once per 4 x 4
// block, and the arithmetic reads workgroup memory. (On CPU adapters barriers are dear and
// memory is cached anyway: they use matmul.wgsl; kernels/tuning.ts, matmulShape.)
//
// Rows past the end of W and tokens past T load clamped (in-bounds) data and are never stored;
// K past cols loads zeros.

const TILE: u32 = 64u;   // rows and tokens per workgroup
const TILE_K: u32 = 16u; // K per step

// w_tile[k * TILE + i] holds W[tile row i, k]; x_tile[k * TILE + j] X[tile token j, k]. Arrays of
// f32, not of vec4: in the transposed copy four threads write the four floats of one vec4, and
// WGSL (with HLSL and MSL below it) may store a whole vector for a write of one component, which
// races between those threads.
var<workgroup> w_tile: array<f32, TILE_K * TILE>;
var<workgroup> w_up_tile: array<f32, TILE_K * TILE>;
var<workgroup> x_tile: array<f32, TILE_K * TILE>;

// Four consecutive floats of a tile (one function per tile: pointers to workgroup memory as
// parameters need a WGSL extension that not every browser has).
fn w_tile4(at: u32) -> vec4<f32> {
  return vec4<f32>(w_tile[at], w_tile[at + 1u], w_tile[at + 2u], w_tile[at + 3u]);
}
fn w_up_tile4(at: u32) -> vec4<f32> {
  return vec4<f32>(w_up_tile[at], w_up_tile[at + 1u], w_up_tile[at + 2u], w_up_tile[at + 3u]);
}
fn x_tile4(at: u32) -> vec4<f32> {
  return vec4<f32>(x_tile[at], x_tile[at + 1u], x_tile[at + 2u], x_tile[at + 3u]);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let tile_r = wg.x * TILE;
  let tile_t = wg.y * TILE;
  let cols = params.cols;
  let last_row = params.rows - 1u;
  let last_t = params.T - 1u;

  // What this thread copies each step: row / token `lid / 4` of the tile, K elements 4 (lid % 4) ..
  let copy_i = lid / 4u;
  let copy_k = (lid % 4u) * 4u;
  let w_start = min(tile_r + copy_i, last_row) * cols;
  let x_start = min(tile_t + copy_i, last_t) * cols;

  // acc[u][j] = Y[token 4 ty + u, row 4 tx + j] of the tile (SECOND: W's; acc_up W2's)
  var acc: array<vec4<f32>, 4>;
  var acc_up: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < cols; k0 += TILE_K) {
    let k = k0 + copy_k;
    var w = vec4<f32>();
    var w_up = vec4<f32>();
    var x = vec4<f32>();
    if (k < cols) {
      w = load_weight4(w_start + k);
      if (SECOND) {
        w_up = load_weight4_up(w_start + k);
      }
      x = load_x4(x_start + k);
    }
    // Transposed: element c of the copied vec4 is K index copy_k + c.
    for (var c = 0u; c < 4u; c++) {
      let at = (copy_k + c) * TILE + copy_i;
      w_tile[at] = w[c];
      x_tile[at] = x[c];
      if (SECOND) {
        w_up_tile[at] = w_up[c];
      }
    }
    workgroupBarrier();
    for (var kk = 0u; kk < TILE_K; kk++) {
      let wv = w_tile4(kk * TILE + 4u * local.x);
      let xv = x_tile4(kk * TILE + 4u * local.y);
      acc[0] += xv.x * wv;
      acc[1] += xv.y * wv;
      acc[2] += xv.z * wv;
      acc[3] += xv.w * wv;
      if (SECOND) {
        let wu = w_up_tile4(kk * TILE + 4u * local.x);
        acc_up[0] += xv.x * wu;
        acc_up[1] += xv.y * wu;
        acc_up[2] += xv.z * wu;
        acc_up[3] += xv.w * wu;
      }
    }
    workgroupBarrier();
  }

  let r0 = tile_r + 4u * local.x;
  let t0 = tile_t + 4u * local.y;
  if (r0 > last_row) {
    return; // after the last barrier: leaving is safe
  }
  let bias = rows_bias(r0);
  for (var u = 0u; u < 4u; u++) {
    if (t0 + u <= last_t) {
      store_output_row(t0 + u, r0, acc[u], acc_up[u], bias);
    }
  }
}
