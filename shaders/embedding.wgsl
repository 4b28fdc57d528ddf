// Token embedding gather: out[t, c] = E[tokens[t], c] · scale (scale 1, or Gemma's sqrt(d_model)).
//
// The table E is a row-major [vocab, cols] weight matrix read through `load_weight(i)` (defined by
// the weight-format snippet composed in front of this file at binding 3), so one source serves
// f32, f16, bf16 and block-quantized (Q8_0, Q4_K, ...) tables. One invocation per output element; the grid may be folded into 2-D
// when there are more than 65535 workgroups.
//
// A table split into row ranges (buffers over the device's limits) takes one dispatch per part: the
// bound part holds rows first_row .. first_row + part_rows - 1, and only the tokens whose ids fall in
// it are written (the last part also writes the zero rows of ids past the vocabulary).

struct Params {
  T: u32,     // tokens
  cols: u32,  // embedding width (d_model)
  vocab: u32, // rows of E
  first_row: u32, // first row of E in the bound part
  part_rows: u32, // rows of E in the bound part
  scale: f32,     // every row times this
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
    if (params.first_row + params.part_rows == params.vocab) { out[i] = 0.0; }
    return;
  }
  if (token < params.first_row || token - params.first_row >= params.part_rows) {
    return; // another part's row
  }
  out[i] = load_weight((token - params.first_row) * params.cols + c) * params.scale;
}
