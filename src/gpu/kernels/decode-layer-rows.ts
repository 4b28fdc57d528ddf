// The decode layer's rows variant (decode_layer_rows.wgsl: a batch of sequences, continuous
// batching): where its state buffer keeps each row, and the WGSL that decodeLayerSpec composes in
// place of the one-sequence phases.
import { assertCount } from './checks.ts';
import { embeddingScaleWgsl, logitCapWgsl, replaceWgslFunctions, type DecodeLayerFeatures } from './decode-layer-family.ts';
import { DECODE_LAYER_LOGITS_BINDING, DECODE_RECORD_BYTES, DECODE_RECORD_SLOTS, decodeLayerLayout, up4, type DecodeLayerDims } from './decode-layer-layout.ts';
import decodeLayerRowsWgsl from '../../../shaders/decode_layer_rows.wgsl?raw';
import greedyPickWgsl from '../../../shaders/greedy_pick.wgsl?raw';

/** Bytes between rows' tokens (a u32 each) in the rows variant's token binding (BATCH_TOKEN_STRIDE_BYTES). */
export const DECODE_ROWS_TOKEN_STRIDE = 64;
/** Floats between rows' logits in the rows variant: the vocabulary rounded up to 64 floats, so each row starts 256-byte aligned. */
export const decodeRowsLogitsStride = (rows: number) => Math.ceil(rows / 64) * 64;

/**
 * Where the rows variant of decode_layer.wgsl (decode_layer_rows.wgsl: a batch of sequences, up to
 * maxRows) keeps what, after decodeLayerLayout's layout of the same model (its constants, read by
 * every row; its x .. pos and block unused): float indices, each a multiple of 4.
 */
export interface DecodeLayerRowsLayout {
  maxRows: number;
  /** u32: the rows a step runs (the first `count` of the rows below). */
  count: number;
  /** Row r's control vec4 at ctrl + 4r: u32 position, slot, the slot's first cache row in a layer of every position, 0. */
  ctrl: number;
  /** Row r's greedy records: DECODE_RECORD_SLOTS of 4 words from records + r * DECODE_RECORD_SLOTS * 4. */
  records: number;
  /** Row 0's activations (x, qkv, a, h, with post-norms a block's output); row r's at + r * rowStride. */
  x: number;
  qkv: number;
  att: number;
  h: number;
  /** -1 without post-norms. */
  block: number;
  rowStride: number;
  floats: number;
}

export function decodeLayerRowsLayout(d: DecodeLayerDims, f: DecodeLayerFeatures | undefined, maxRows: number): DecodeLayerRowsLayout {
  assertCount(maxRows, 'decode layer rows');
  const single = decodeLayerLayout(d, f);
  const count = single.floats;
  const ctrl = count + 4;
  const records = ctrl + 4 * maxRows;
  const rows0 = records + maxRows * ((DECODE_RECORD_SLOTS * DECODE_RECORD_BYTES) / 4);
  const post = !!f?.postNorms;
  const rowStride = single.pos + (post ? up4(d.dim) : 0);
  return {
    maxRows, count, ctrl, records,
    x: rows0 + single.x, qkv: rows0 + single.qkv, att: rows0 + single.att, h: rows0 + single.h,
    block: post ? rows0 + single.pos : -1,
    rowStride,
    floats: rows0 + maxRows * rowStride,
  };
}

/**
 * The rows variant's body: decode_layer.wgsl's (with its features) with decode_layer_rows.wgsl's
 * run_layer and main in place of its own, and its constants.
 */
export function decodeLayerRowsBodyWgsl(body: string, family: boolean, batch: DecodeLayerRowsLayout, groups: number): string {
  const entry = '@compute @workgroup_size(WG)\n';
  if (!body.includes(entry)) throw new Error('decode_layer.wgsl: its entry point no longer reads "@compute @workgroup_size(WG)"');
  const consts =
    `const MAX_ROWS: u32 = ${batch.maxRows}u;\nconst ROW_GROUPS: u32 = ${groups}u;\nconst ROW_STRIDE: u32 = ${batch.rowStride}u;\nconst COUNT0: u32 = ${batch.count}u;\n` +
    // The plain block has no post-norms (the family body declares them): decode_layer_rows.wgsl's branches on them fold away.
    (family ? '' : 'const POST_NORMS: bool = false;\nconst POST_ATTN: u32 = 0u;\nconst POST_FFN: u32 = 0u;\nfn add_post_normed(lid: u32, at: u32) {}\n');
  return consts + replaceWgslFunctions(body.replace(entry, ''), decodeLayerRowsWgsl);
}

/** Reads of a row's regions made relative to the current row (decode_layer_rows.wgsl's row_x, row_ctrl); their declarations stay. */
export function renameRowRegions(code: string): string {
  return code.replace(/(?<!const )\b(X0|QKV0|ATT0|H0|BLOCK0)\b/g, '(row_x + $1)').replace(/(?<!const )\bPOS0\b/g, '(row_ctrl + POS0)');
}

/** The rows variant's cache row of position j: in the row's slot (a ring's, with the ring feature, where the layer keeps one). */
export function rowsKvRowWgsl(ring: boolean): string {
  const ringRow = ring
    ? '  let rows = bitcast<u32>(st[(cur.consts + LAYER_EXT) >> 2u].w);\n  if (rows != 0u) {\n    return row_slot * rows + j % rows;\n  }\n'
    : '';
  return `fn kv_row(j: u32) -> u32 {\n${ringRow}  return row_first + j;\n}\n`;
}

/** The rows variant's EMBED phase: each row's x = E[its token] (decodeEmbeddingWgsl's, a row at a time). */
export function decodeRowsEmbeddingWgsl(f?: DecodeLayerFeatures): string {
  return `fn embed_token(lid: u32) {
  let m = group_rows(row_count());
  for (var j = 0u; j < m; j++) {
    let r = group_row(j);
    set_row(r);
    let token = tokens[r * ${DECODE_ROWS_TOKEN_STRIDE}u];
    for (var k = lid * 4u; k < DIM; k += WG * 4u) {
      var e = vec4<f32>(0.0);
      if (token < params.emb_rows) { e = load_weight4(params.emb + token * DIM + k)${embeddingScaleWgsl(f)}; }
      st[(X0 + k) >> 2u] = e;
    }
  }
}
`;
}

/** The rows variant's LOGITS phase: decodeLogitsWgsl's per row, each block of W_lm_head for every row in turn, row r's logits from float r * LOGIT_STRIDE. */
export function decodeRowsLogitsWgsl(rows: number, f?: DecodeLayerFeatures): string {
  return `@group(0) @binding(${DECODE_LAYER_LOGITS_BINDING}) var<storage, read_write> logits: array<f32>;
const LOGIT_ROWS: u32 = ${rows}u;
const LOGIT_STRIDE: u32 = ${decodeRowsLogitsStride(rows)}u;
fn project_logits(lid: u32) {
  let m = group_rows(row_count());
  set_scales(m);
  for (var b = lid; b < (LOGIT_ROWS + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    let r0 = b * ROWS_PER_BLOCK;
    for (var j = 0u; j < m; j++) {
      let row = group_row(j);
      set_row(row);
      let s = row_scale[j];
      let base = row * LOGIT_STRIDE;
      let acc = block_dot_lm(params.lm, r0, LOGIT_ROWS - 1u, 0u);
      for (var q = 0u; q < QUADS; q++) {
        let r = r0 + 4u * q;
        let y = ${logitCapWgsl(f, 'acc[q] * s')};
        if (r < LOGIT_ROWS) { logits[base + r] = y.x; }
        if (r + 1u < LOGIT_ROWS) { logits[base + r + 1u] = y.y; }
        if (r + 2u < LOGIT_ROWS) { logits[base + r + 2u] = y.z; }
        if (r + 3u < LOGIT_ROWS) { logits[base + r + 3u] = y.w; }
      }
    }
  }
}
`;
}

/**
 * The rows variant's GREEDY phase: decodeGreedyWgsl's pick (greedy_pick.wgsl) for each row: every
 * thread's part of every row's pick, then thread r % WG merges row r's and writes its token and its
 * record (row r's records from RECORD0 + r * RECORD_SLOTS * 4).
 */
export function decodeRowsGreedyWgsl(records: number): string {
  return `${greedyPickWgsl}
const GREEDY_PARTS: u32 = MAX_ROWS * WG;
const RECORD0: u32 = ${records}u;
const RECORD_SLOTS: u32 = ${DECODE_RECORD_SLOTS}u;
fn pick_greedy(lid: u32) {
  let rows = group_rows(row_count());
  for (var j = 0u; j < rows; j++) {
    greedy_parts[j * WG + lid] = greedy_scan(group_row(j) * LOGIT_STRIDE, LOGIT_ROWS, lid);
  }
  workgroupBarrier();
  for (var j = lid; j < rows; j += WG) {
    let row = group_row(j);
    set_row(row);
    let g = greedy_merge(j * WG);
    tokens[row * ${DECODE_ROWS_TOKEN_STRIDE}u] = g.id;
    st[RECORD0 / 4u + row * RECORD_SLOTS + start_pos() % RECORD_SLOTS] = vec4<f32>(bitcast<f32>(g.id), -log(g.sum), 0.0, 0.0);
  }
}
`;
}
