// Matrix-vector product for decode (one token): y[r] = sum_k x[k] * W[r, k] (+ b[r]).
//
// W is row-major [rows, cols] (out_features, in_features), read through `load_weight(i)` from the
// weight-format snippet (binding 3); `load_bias(r)` comes from the bias snippet (binding 4, or a
// constant 0 when the layer has none). Both are composed in front of this file, with
// `const TEAM: u32` — how many threads share one row, a power of two up to the workgroup size.
//
// A workgroup of 64 threads handles 64 / TEAM rows. The host picks TEAM from the row length: a
// short row (a vocabulary of 32k rows over a hidden size of 8) is best done by one thread, a long
// one by many threads that split K (strided, so neighbouring threads read neighbouring weights)
// and reduce their partial dot products in workgroup memory. With many rows the grid is folded
// into 2-D and the row is recovered from the flat workgroup index.

struct Params {
  rows: u32,
  cols: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>; // [rows]
@group(0) @binding(2) var<storage, read> x: array<f32>;       // [cols]

const WORKGROUP_SIZE: u32 = 64u;
const ROWS_PER_WORKGROUP: u32 = WORKGROUP_SIZE / TEAM;

var<workgroup> partial_dots: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let r = (wg.y * grid.x + wg.x) * ROWS_PER_WORKGROUP + lid / TEAM; // this thread's output row
  let lane = lid % TEAM;
  // No early return: every thread must reach the barriers below.
  let row_exists = r < params.rows;

  var dot = 0.0;
  if (row_exists) {
    let w_row = r * params.cols;
    for (var k = lane; k < params.cols; k += TEAM) {
      dot += x[k] * load_weight(w_row + k);
    }
  }
  if (TEAM > 1u) {
    partial_dots[lid] = dot;
    workgroupBarrier();
    for (var stride = TEAM / 2u; stride > 0u; stride >>= 1u) {
      if (lane < stride) {
        partial_dots[lid] += partial_dots[lid + stride];
      }
      workgroupBarrier();
    }
    dot = partial_dots[lid];
  }
  if (row_exists && lane == 0u) {
    y[r] = dot + load_bias(r);
  }
}
