// Token embedding gather: out[t, c] = E[tokens[t], c].
//
// The table E is a row-major [vocab, cols] weight matrix read through `load_weight(i)` (defined by
// the weight-format snippet composed in front of this file at binding 3), so one source serves
// f32, f16, bf16 and block-quantized (Q8_0, Q4_K, ...) tables. One invocation per output element; the grid may be folded into 2-D
// when there are more than 65535 workgroups.

struct Params {
  T: u32,     // tokens
  cols: u32,  // embedding width (d_model)
  vocab: u32, // rows of E
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // [T, cols]
@group(0) @binding(2) var<storage, read> tokens: array<u32>;    // [T]

const WORKGROUP_SIZE: u32 = 256u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * grid.x + wg.x) * WORKGROUP_SIZE + lid; // flat index into out
  if (i >= params.T * params.cols) {
    return;
  }
  let t = i / params.cols;
  let c = i % params.cols;
  let token = tokens[t];
  // An id outside the vocabulary would read another row (or be clamped): give zeros instead.
  if (token >= params.vocab) {
    out[i] = 0.0;
    return;
  }
  out[i] = load_weight(token * params.cols + c);
}
