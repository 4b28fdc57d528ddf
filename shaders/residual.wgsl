// Elementwise add, for the residual connections: out[i] = a[i] + b[i].
//
// The residual stream is usually updated in place (x += f(x)). WebGPU forbids binding one buffer
// both writable and read-only in a dispatch, so in-place addition has its own entry point whose
// accumulator is a single read_write binding. Each entry point uses only its own bindings
// (pipelines use layout 'auto', which keeps just those an entry point uses).

struct Params {
  n: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // add: out = a + b
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> acc: array<f32>; // add_in_place: acc += b

const WORKGROUP_SIZE: u32 = 256u;

fn flat_index(wg: vec3<u32>, grid: vec3<u32>, lid: u32) -> u32 {
  return (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wg, grid, lid);
  if (i < params.n) {
    out[i] = a[i] + b[i];
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn add_in_place(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wg, grid, lid);
  if (i < params.n) {
    acc[i] = acc[i] + b[i];
  }
}
