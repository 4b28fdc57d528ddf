// Matrix-matrix product for prefill (T tokens): y[t, r] = sum_k x[t, k] * W[r, k] (+ b[r]),
// i.e. Y = X·Wᵀ with X [T, cols] and W row-major [rows, cols] (out_features, in_features).
//
// W is read through `load_weight(i)` (weight-format snippet, binding 3) and the bias through
// `load_bias(r)` (bias snippet, binding 4, or a constant 0); both are composed in front of this file.
//
// Classic shared-memory tiling: a 16x16 workgroup computes a 16-token x 16-row tile of Y. It walks
// K in steps of 16; at each step every thread loads one element of the X tile and one of the W
// tile into workgroup memory, so each element fetched from global memory is used 16 times.
// Threads outside the matrix still load (zeros) and hit every barrier, as barriers require.

struct Params {
  T: u32,
  rows: u32,
  cols: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>; // [T, rows]
@group(0) @binding(2) var<storage, read> x: array<f32>;       // [T, cols]

const TILE: u32 = 16u;

var<workgroup> x_tile: array<array<f32, TILE>, TILE>; // [token][k]
var<workgroup> w_tile: array<array<f32, TILE>, TILE>; // [row][k]

@compute @workgroup_size(TILE, TILE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let row0 = wg.x * TILE; // first output row (feature) of this tile
  let t0 = wg.y * TILE;   // first token of this tile
  let r = row0 + lid.x;   // this thread's output element: y[t, r]
  let t = t0 + lid.y;

  var acc = 0.0;
  for (var k0 = 0u; k0 < params.cols; k0 += TILE) {
    // Thread (lid.x, lid.y) loads X[t0 + lid.y, k0 + lid.x] and W[row0 + lid.y, k0 + lid.x]:
    // consecutive threads read consecutive k.
    let k = k0 + lid.x;
    let x_t = t0 + lid.y;
    if (x_t < params.T && k < params.cols) {
      x_tile[lid.y][lid.x] = x[x_t * params.cols + k];
    } else {
      x_tile[lid.y][lid.x] = 0.0;
    }
    let w_r = row0 + lid.y;
    if (w_r < params.rows && k < params.cols) {
      w_tile[lid.y][lid.x] = load_weight(w_r * params.cols + k);
    } else {
      w_tile[lid.y][lid.x] = 0.0;
    }
    workgroupBarrier();

    for (var kk = 0u; kk < TILE; kk++) {
      acc += x_tile[lid.y][kk] * w_tile[lid.x][kk];
    }
    // Everyone must be done reading the tiles before the next step overwrites them.
    workgroupBarrier();
  }

  if (t < params.T && r < params.rows) {
    y[t * params.rows + r] = acc + load_bias(r);
  }
}
