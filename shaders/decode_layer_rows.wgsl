// decode_layer.wgsl for a batch of rows (continuous batching; kernels/decode-layer-rows.ts, the `rows`
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
// The dispatch has ROW_GROUPS workgroups: workgroup g runs rows g, g + ROW_GROUPS, ... (no row is
// shared between workgroups, so they need not see each other's writes), so that a CPU adapter runs
// groups of rows on several cores; with one, every row shares each weight block.
//
// Composed in front: MAX_ROWS, ROW_GROUPS, ROW_STRIDE, COUNT0, and (when POST_NORMS is not
// otherwise defined) the post-norm constants and a no-op add_post_normed.

/** The current row's distance from row 0: of its activations (floats), and of its control vec4. */
var<private> row_x: u32;
var<private> row_ctrl: u32;
/** The current row's slot, and the first cache row of its slot in a layer that keeps every position. */
var<private> row_slot: u32;
var<private> row_first: u32;
/** Each row's RMSNorm scale of x, for the phase that runs. */
var<private> row_scale: array<f32, MAX_ROWS>;

/** This workgroup's group of rows. */
var<private> group: u32;

/** Rows this step runs. */
fn row_count() -> u32 {
  return min(bitcast<u32>(st[COUNT0 / 4u].x), MAX_ROWS);
}

/** Rows of this workgroup's group of the n rows the step runs. */
fn group_rows(n: u32) -> u32 {
  return (n + ROW_GROUPS - 1u - group) / ROW_GROUPS;
}

/** The group's row j: the batch's row group + j * ROW_GROUPS. */
fn group_row(j: u32) -> u32 {
  return group + j * ROW_GROUPS;
}

/** Makes row r the one the per-row code reads and writes. */
fn set_row(r: u32) {
  row_x = r * ROW_STRIDE;
  row_ctrl = r * 4u;
  let ctrl = st[POS0 / 4u];
  row_slot = bitcast<u32>(ctrl.y);
  row_first = bitcast<u32>(ctrl.z);
}

/** row_scale of the group's m rows (row_scale[j]: of group_row(j)). */
fn set_scales(m: u32) {
  for (var j = 0u; j < m; j++) {
    set_row(group_row(j));
    row_scale[j] = rms_scale();
  }
}

/** Layer `slot` of this dispatch for every row: decode_layer.wgsl's run_layer, a loop over the rows inside each phase's block loop. */
fn run_layer(lid: u32, slot: u32) {
  cur = params.slots[slot];
  let m = group_rows(row_count());
  set_scales(m);
  for (var b = lid; b < (Q_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); project_q(b, row_scale[j]); }
  }
  for (var b = lid; b < (KV_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); project_k(b, row_scale[j]); }
  }
  for (var b = lid; b < (KV_DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); project_v(b, row_scale[j]); }
  }
  phase();
  // The attention shares no weights between rows: its (row, item) pairs are spread over the threads.
  let items = params.num_heads / HEADS;
  for (var w = lid; w < items * m; w += WG) {
    set_row(group_row(w / items));
    attend_slot(slot, w % items);
  }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); project_o(b); }
  }
  if (POST_NORMS) {
    phase();
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); add_post_normed(lid, POST_ATTN); }
  }
  phase();
  set_scales(m);
  for (var b = lid; b < (FFN + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); project_gate_up(b, row_scale[j]); }
  }
  phase();
  for (var b = lid; b < (DIM + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); project_down(b); }
  }
  if (POST_NORMS) {
    phase();
    for (var j = 0u; j < m; j++) { set_row(group_row(j)); add_post_normed(lid, POST_FFN); }
  }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  group = wid.x;
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
    let m = group_rows(row_count());
    for (var j = lid; j < m; j += WG) {
      set_row(group_row(j));
      st[POS0 / 4u].x = bitcast<f32>(bitcast<u32>(st[POS0 / 4u].x) + 1u);
    }
  }
}
