// Soft-capping, in place: x[i] = cap · tanh(x[i] / cap) for i < n (Gemma 2's final logits: the
// values are squashed smoothly into (-cap, cap)). Elementwise. The quotient is clamped to ±15,
// where tanh is ±1 in f32 already, as some backends' tanh overflows to NaN beyond.

struct Params {
  n: u32,
  cap: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;

const WORKGROUP_SIZE: u32 = 256u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
  if (i >= params.n) {
    return;
  }
  x[i] = params.cap * tanh(clamp(x[i] / params.cap, -15.0, 15.0));
}
