// RMSNorm (Zhang & Sennrich, 2019), as Llama uses it:
//   out[t, i] = x[t, i] / sqrt(mean_j(x[t, j]^2) + eps) * gamma[i]
//
// Composed in front of this file (kernels/elementwise.ts, rmsNormWidthWgsl): `alias V` (vec4<f32> when dim is a
// multiple of 4, else f32), `const WIDTH: u32` (floats per V) and `fn hsum(v: V) -> f32` (the sum
// of its components); and (rmsNormIoWgsl) `fn load_x(i: u32) -> V` and `fn store_out(i: u32, v: V)`
// over x and out at bindings 1 and 2, or in place over one read_write buffer at binding 1 (WebGPU
// binds a buffer once where one binding writes it; in place is safe: a thread writes only the
// elements it read itself, after its row's sum). Every buffer is read as an array of V, so aligned
// rows take vector loads. Accumulation is in f32.
//
// Two entry points; the host picks by dim (kernels/tuning.ts, rmsNormPlan):
// - `per_row`: one thread per token row, which sums the squares of the whole row and then scales
//   it. No workgroup memory and no barriers: on SwiftShader (the tests' CPU Vulkan) a barrier costs
//   far more than walking a short row, so this is the kernel for dims up to RMSNORM_ROW_MAX_DIM.
// - `per_workgroup`: one workgroup per row; the threads sum squares over a strided slice, reduce
//   the partial sums in workgroup memory (barriers), then each scales its slice. For long rows,
//   where one thread per row would leave a GPU mostly idle.

struct Params {
  T: u32,
  dim: u32,
  eps: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
// (out [T, dim] and x [T, dim]: rmsNormIoWgsl)
@group(0) @binding(3) var<storage, read> gamma: array<V>;     // [dim]

const ROW_WORKGROUP_SIZE: u32 = 64u; // per_row: rows per workgroup (host: RMSNORM_ROWS_PER_WORKGROUP)
const WORKGROUP_SIZE: u32 = 256u;    // per_workgroup: threads per row

@compute @workgroup_size(ROW_WORKGROUP_SIZE)
fn per_row(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let t = (wg.y * grid.x + wg.x) * ROW_WORKGROUP_SIZE + lid;
  if (t >= params.T) {
    return; // no barriers in this kernel, so threads past the last row may leave early
  }
  let n = params.dim / WIDTH; // V elements per row (WIDTH divides dim)
  let row = t * n;
  var sum_sq = 0.0;
  for (var i = 0u; i < n; i++) {
    let v = load_x(row + i);
    sum_sq += hsum(v * v);
  }
  let inv_rms = inverseSqrt(sum_sq / f32(params.dim) + params.eps);
  for (var i = 0u; i < n; i++) {
    store_out(row + i, load_x(row + i) * inv_rms * gamma[i]);
  }
}

var<workgroup> partial_sums: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn per_workgroup(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let t = wg.y * grid.x + wg.x; // token row of this workgroup (uniform across it)
  if (t >= params.T) {
    return;
  }
  let n = params.dim / WIDTH;
  let row = t * n;

  var sum_sq = 0.0;
  for (var i = lid; i < n; i += WORKGROUP_SIZE) {
    let v = load_x(row + i);
    sum_sq += hsum(v * v);
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

  for (var i = lid; i < n; i += WORKGROUP_SIZE) {
    store_out(row + i, load_x(row + i) * inv_rms * gamma[i]);
  }
}
