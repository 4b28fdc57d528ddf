// Gating of the feed-forward block (Shazeer, 2020), elementwise: SwiGLU (Llama), entry `main`:
//   out[i] = silu(gate[i]) * up[i],  silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
// or GeGLU with the tanh-approximated GELU (Gemma), entry `gelu_tanh_main`:
//   out[i] = gelu_tanh(gate[i]) * up[i]   (gelu_tanh.wgsl, composed in front)
// gate = xb·W_gateᵀ and up = xb·W_upᵀ are computed by matmul beforehand.

struct Params {
  n: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;
@group(0) @binding(3) var<storage, read> up: array<f32>;

const WORKGROUP_SIZE: u32 = 256u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (i >= params.n) {
    return;
  }
  let g = gate[i];
  // For very negative g, exp(-g) overflows to +inf and g / inf = -0: the correct limit.
  out[i] = g / (1.0 + exp(-g)) * up[i];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn gelu_tanh_main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (i >= params.n) {
    return;
  }
  out[i] = gelu_tanh(gate[i]) * up[i];
}
