// RMSNorm (Zhang & Sennrich, 2019), as Llama uses it:
//   out[t, i] = x[t, i] / sqrt(mean_j(x[t, j]^2) + eps) * gamma[i]
//
// One workgroup per token row: the threads sum squares over a strided slice of the row, reduce
// the partial sums in workgroup memory, then each scales its slice. Accumulation is in f32.

struct Params {
  T: u32,
  dim: u32,
  eps: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // [T, dim]
@group(0) @binding(2) var<storage, read> x: array<f32>;         // [T, dim]
@group(0) @binding(3) var<storage, read> gamma: array<f32>;     // [dim]

const WORKGROUP_SIZE: u32 = 256u;

var<workgroup> partial_sums: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let t = wg.y * grid.x + wg.x; // token row of this workgroup (uniform across it)
  if (t >= params.T) {
    return;
  }
  let row = t * params.dim;

  var sum_sq = 0.0;
  for (var i = lid; i < params.dim; i += WORKGROUP_SIZE) {
    let v = x[row + i];
    sum_sq += v * v;
  }
  partial_sums[lid] = sum_sq;
  workgroupBarrier();
  // Tree reduction: after the loop partial_sums[0] holds the row's sum of squares.
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      partial_sums[lid] += partial_sums[lid + stride];
    }
    workgroupBarrier();
  }
  let inv_rms = inverseSqrt(partial_sums[0] / f32(params.dim) + params.eps);

  for (var i = lid; i < params.dim; i += WORKGROUP_SIZE) {
    out[row + i] = x[row + i] * inv_rms * gamma[i];
  }
}
