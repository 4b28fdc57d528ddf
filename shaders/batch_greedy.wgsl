// The greedy pick of every row of a batched decode step: one workgroup a row (those past
// batch_count() do nothing) takes greedy_pick.wgsl's pick of the row's logits (the argmax, the
// lowest id on ties, and its log-softmax), the code decode_layer.wgsl's pick_greedy runs for one
// sequence: writes the id to the row's token (where its next step embeds it) and its record
// (u32 id, f32 logprob, zeros) to slot position % params.slots of the row's records. A row's sums
// are in an order fixed by the vocabulary and the workgroup, whatever the other rows.
//
// Composed in front (kernels/batch-rows.ts): batchRowsWgsl at binding 4, greedy_pick.wgsl.

struct Params {
  vocab: u32,        // logits a row
  stride: u32,       // floats between rows' logits
  token_stride: u32, // u32s between rows' tokens
  slots: u32,        // records a row
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(3) var<storage, read_write> records: array<vec4<f32>>;

const WG: u32 = 64u;
const GREEDY_PARTS: u32 = WG;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let row = wg.x;
  if (row >= batch_count()) {
    return; // the whole workgroup: its barrier below is still reached by all or none
  }
  greedy_parts[lid] = greedy_scan(row * params.stride, params.vocab, lid);
  workgroupBarrier();
  if (lid == 0u) {
    let g = greedy_merge(0u);
    tokens[row * params.token_stride] = g.id;
    records[row * params.slots + batch_position(row) % params.slots] = vec4<f32>(bitcast<f32>(g.id), -log(g.sum), 0.0, 0.0);
  }
}
