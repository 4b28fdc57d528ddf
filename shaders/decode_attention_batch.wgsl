// Decode attention over the rows of a batched decode step (continuous batching): decode_attention.wgsl's
// work items for every row, row r's items after row r - 1's in one flat grid sized for the most
// rows; the threads of rows past batch_count() do nothing. A row runs exactly one row's code
// (attend_item) at its own position, its qkv and out at its offsets, its K/V in its slot: kv_row
// adds the slot's first cache row, kv_slot_base (kvRowWgsl with a slot base). Split over the
// sequence, each row has its own partials (decode_attention_batch_combine.wgsl combines them).
//
// Composed in front (kernels/attention-batch.ts, batchDecodeAttentionSpec): THREADS, decodeAttentionHelpersWgsl
// (without store_out), store_out / store_partial / store_ml at the row's offsets, batchRowsWgsl at
// binding 8, and decode_attention.wgsl.

struct Params {
  start_pos: u32,  // unused (each row's position is in the rows buffer)
  num_heads: u32,
  num_kv_heads: u32,
  head_dim: u32,
  scale: f32,
  window: u32,
  chunk_keys: u32,
  num_chunks: u32,
  pairing: u32,
  softcap: f32,
  rotary_dims: u32,
  magnitude: f32,
  qk_eps: f32,
  slot_rows: u32,  // cache rows a slot: slot s starts at row s * slot_rows
  qkv_stride: u32, // floats between rows' qkv
  out_stride: u32, // floats between rows' out
  positions: u32,  // positions a slot holds: a row past them does nothing (its K/V row would be the next slot's)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;       // [rows, out_stride]
@group(0) @binding(2) var<storage, read> qkv: array<f32>;             // [rows, qkv_stride]
@group(0) @binding(3) var<storage, read_write> k_cache: array<KV>;    // [slots * slot_rows, num_kv_heads, head_dim]
@group(0) @binding(4) var<storage, read_write> v_cache: array<KV>;
@group(0) @binding(6) var<storage, read> inv_freq: array<f32>;        // [rotary_dims / 2]

var<private> row_pos: u32;
var<private> kv_slot_base: u32;
var<private> qkv_base: u32;
var<private> out_base: u32;
var<private> partial_base: u32;

fn start_pos() -> u32 { return row_pos; }
fn load_qkv(i: u32) -> f32 { return qkv[qkv_base + i]; }
fn load_inv_freq(d: u32) -> f32 { return inv_freq[d]; }

/** Row r's position, slot and offsets for the functions above. */
fn set_row(r: u32) {
  row_pos = batch_position(r);
  kv_slot_base = batch_slot(r) * params.slot_rows;
  qkv_base = r * params.qkv_stride;
  out_base = r * params.out_stride;
  partial_base = r * params.num_heads * params.num_chunks * (HEAD_DIM + 2u);
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let item = (wg.y * grid.x + wg.x) * THREADS + lid; // flat (row, block of heads, chunk)
  let per_row = (params.num_heads / HEADS) * params.num_chunks;
  let row = item / per_row;
  if (row < batch_count() && batch_position(row) < params.positions) {
    set_row(row);
    attend_item(item % per_row); // no barriers in this kernel
  }
}
