// The greedy pick of every row of a batched decode step: one workgroup a row (those past
// batch_count() do nothing) takes the argmax of the row's logits (the lowest id on ties) and the
// log-softmax there, as decode_layer.wgsl's pick_greedy does for one sequence: writes the id to
// the row's token (where its next step embeds it) and its record (u32 id, f32 logprob, zeros) to
// slot position % params.slots of the row's records. A row's sums are in an order fixed by the
// vocabulary and the workgroup, whatever the other rows.
//
// Composed in front (kernels/batch-rows.ts): batchRowsWgsl at binding 4.

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
var<workgroup> greedy_max: array<f32, WG>;
var<workgroup> greedy_sum: array<f32, WG>;
var<workgroup> greedy_id: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let row = wg.x;
  if (row >= batch_count()) {
    return; // the whole workgroup: its barrier below is still reached by all or none
  }
  let base = row * params.stride;
  var m = -3.0e38; // not -inf: exp(l - m) stays 0 for l = -inf
  var sum = 0.0;
  var id = 0u;
  for (var r = lid; r < params.vocab; r += WG) {
    let l = logits[base + r];
    if (l > m) {
      sum = sum * exp(m - l) + 1.0;
      m = l;
      id = r;
    } else {
      sum += exp(l - m);
    }
  }
  greedy_max[lid] = m;
  greedy_sum[lid] = sum;
  greedy_id[lid] = id;
  workgroupBarrier();
  if (lid == 0u) {
    for (var t = 1u; t < WG; t++) {
      let mt = greedy_max[t];
      if (mt > m) {
        sum = sum * exp(m - mt) + greedy_sum[t];
        m = mt;
        id = greedy_id[t];
      } else {
        sum += greedy_sum[t] * exp(mt - m);
        if (mt == m) { id = min(id, greedy_id[t]); }
      }
    }
    tokens[row * params.token_stride] = id;
    records[row * params.slots + batch_position(row) % params.slots] = vec4<f32>(bitcast<f32>(id), -log(sum), 0.0, 0.0);
  }
}
