// decode_layer.wgsl for a batch of rows (continuous batching; kernels/decode-layer.ts, the `rows`
// variant): each row is one sequence, decoding one token at its own position in its own K/V slot.
// Composed after decode_layer.wgsl (and decode_layer_family.wgsl), this file's run_layer and main
// replace theirs; every other function is theirs, unchanged, and runs one row at a time.
//
// Each row's activations (x, qkv, a, h, a post-norm's block output) lie in a region of its own,
// ROW_STRIDE floats after the row before's; the region constants X0, QKV0, ATT0, H0 and BLOCK0 are
// row 0's, and the code reads them as (row_x + X0) etc. (renamed when the shader is composed),
// row_x the current row's distance from row 0. Each row's control vec4 at POS0 + row_ctrl holds its
// position, slot and the slot's first cache row (u32 bits; row_ctrl = 4 * row); the number of rows
// this step runs is at COUNT0 (a u32, at most MAX_ROWS): a run-time value, so every batch size runs
// this one pipeline.
//
// Batch invariance: a row's arithmetic is the same code whatever its index, the number of rows or
// the other rows: phases loop over the rows around the per-row code, never mixing rows in a sum.
// Each thread takes a block of a projection's weight rows and computes it for every batch row in
// turn, so the block comes from cache, not memory, for rows 2..B.
//
// Composed in front: MAX_ROWS, ROW_STRIDE, COUNT0, and (when POST_NORMS is not otherwise defined)
// the post-norm constants and a no-op add_post_normed.

/** The current row's distance from row 0: of its activations (floats), and of its control vec4. */
var<private> row_x: u32;
var<private> row_ctrl: u32;
/** The current row's slot, and the first cache row of its slot in a layer that keeps every position. */
var<private> row_slot: u32;
var<private> row_first: u32;
/** Each row's RMSNorm scale of x, for the phase that runs. */
var<private> row_scale: array<f32, MAX_ROWS>;

/** Rows this step runs. */
fn row_count() -> u32 {
  return min(bitcast<u32>(st[COUNT0 / 4u].x), MAX_ROWS);
}

/** Makes row r the one the per-row code reads and writes. */
fn set_row(r: u32) {
  row_x = r * ROW_STRIDE;
  row_ctrl = r * 4u;
  let ctrl = st[POS0 / 4u];
  row_slot = bitcast<u32>(ctrl.y);
  row_first = bitcast<u32>(ctrl.z);
}

fn set_scales(n: u32) {
  for (var r = 0u; r < n; r++) {
    set_row(r);
    row_scale[r] = rms_scale();
  }
}

/** Layer `slot` of this dispatch for every row: decode_layer.wgsl's run_layer, a loop over the rows inside each phase's block loop. */
fn run_layer(lid: u32, slot: u32) {
  cur = params.slots[slot];
  let n = row_count();
  set_scales(n);
  for (var b = lid; b < (Q_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var r = 0u; r < n; r++) { set_row(r); project_q(b, row_scale[r]); }
  }
  for (var b = lid; b < (KV_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var r = 0u; r < n; r++) { set_row(r); project_k(b, row_scale[r]); }
  }
  for (var b = lid; b < (KV_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var r = 0u; r < n; r++) { set_row(r); project_v(b, row_scale[r]); }
  }
  phase();
  // The attention shares no weights between rows: its (row, item) pairs are spread over the threads.
  let items = params.num_heads / HEADS;
  for (var w = lid; w < items * n; w += WG) {
    set_row(w / items);
    attend_slot(slot, w % items);
  }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var r = 0u; r < n; r++) { set_row(r); project_o(b); }
  }
  if (POST_NORMS) {
    phase();
    for (var r = 0u; r < n; r++) { set_row(r); add_post_normed(lid, POST_ATTN); }
  }
  phase();
  set_scales(n);
  for (var b = lid; b < (FFN + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var r = 0u; r < n; r++) { set_row(r); project_gate_up(b, row_scale[r]); }
  }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var r = 0u; r < n; r++) { set_row(r); project_down(b); }
  }
  if (POST_NORMS) {
    phase();
    for (var r = 0u; r < n; r++) { set_row(r); add_post_normed(lid, POST_FFN); }
  }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
  if (EMBED) {
    embed_token(lid);
    phase();
  }
  for (var slot = 0u; slot < LAYER_SLOTS; slot++) {
    if (slot > 0u) { phase(); }
    run_layer(lid, slot);
  }
  if (LOGITS) {
    phase();
    project_logits(lid);
  }
  if (GREEDY) {
    phase();
    pick_greedy(lid);
  }
  // Every row's next position, p + 1, once every thread has read p (BatchDecodeStep.encodeInPass).
  if (params.advance != 0u) {
    phase();
    for (var r = lid; r < row_count(); r += WG) {
      set_row(r);
      st[POS0 / 4u].x = bitcast<f32>(bitcast<u32>(st[POS0 / 4u].x) + 1u);
    }
  }
}
