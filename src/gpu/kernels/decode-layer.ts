// A whole decode layer in one dispatch (decode_layer.wgsl), optionally several layers over an
// f32 arena of matrices with the token embedding, the logits and a greedy pick folded in: how
// layers group into dispatches, its variants, its composition and its dispatch. Its bindings and
// state layout are in decode-layer-layout.ts; its rows variant's parts in decode-layer-rows.ts.
import type { GpuContext } from '../device.ts';
import type { GpuMatrix, WeightDType } from '../tensor.ts';
import type { ShaderSpec } from '../pipelines.ts';
import { checkWeightShape, weightFormatWgsl } from '../weight-formats.ts';
import { ATTENTION_MAX_HEAD_DIM, checkRing, decodeAttentionHelpersWgsl, unrollAttentionLoops, type AttentionShape, type KvRing } from './attention.ts';
import { assertCount, assertDistinct, assertFits } from './checks.ts';
import { ropePairingCode, type KvDType } from './elementwise.ts';
import { blockDotWgsl } from './fused-matvec.ts';
import type { KernelTuning } from './tuning.ts';
import { paramStruct, type PlannedDispatch } from '../uniforms.ts';
import { renameWgsl, takeWgslFunctions, unrollConstLoops } from './wgsl.ts';
import {
  anyDecodeLayerFeature,
  decodeLayerAttentionFeaturesWgsl,
  decodeLayerBodyWgsl,
  decodeLayerFeaturesKey,
  embeddingScaleWgsl,
  logitCapWgsl,
  replaceWgslFunctions,
  type DecodeLayerFeatures,
} from './decode-layer-family.ts';
import {
  DECODE_LAYER_ARENA_BINDING,
  DECODE_LAYER_CACHE_BINDING,
  DECODE_LAYER_LOGITS_BINDING,
  DECODE_LAYER_MATRICES,
  DECODE_LAYER_MAX_SLOTS,
  DECODE_LAYER_STORAGE_BUFFERS,
  DECODE_LAYER_TOKENS_BINDING,
  DECODE_LAYER_WEIGHT_BINDING,
  DECODE_RECORD_SLOTS,
  decodeLayerLayout,
  type DecodeLayerDims,
} from './decode-layer-layout.ts';
import {
  DECODE_ROWS_TOKEN_STRIDE,
  decodeLayerRowsBodyWgsl,
  decodeLayerRowsLayout,
  decodeRowsEmbeddingWgsl,
  decodeRowsGreedyWgsl,
  decodeRowsLogitsStride,
  decodeRowsLogitsWgsl,
  renameRowRegions,
  rowsKvRowWgsl,
} from './decode-layer-rows.ts';
import decodeAttentionWgsl from '../../../shaders/decode_attention.wgsl?raw';
import decodeLayerWgsl from '../../../shaders/decode_layer.wgsl?raw';
import greedyPickWgsl from '../../../shaders/greedy_pick.wgsl?raw';

// ---- the decode layer in one dispatch (decode_layer.wgsl) ----

/**
 * Every matrix of a small model's decode step in one f32 buffer, so that one decode_layer.wgsl
 * dispatch can run several layers (a binding per matrix would take seven a layer): each matrix
 * starts at an element offset, a multiple of 4.
 */
export interface DecodeArena {
  buffer: GPUBuffer;
  /** Per model layer, the first elements of its seven matrices (DECODE_LAYER_MATRICES order). */
  layers: readonly (readonly number[])[];
  /** The token embedding and W_lm_head ([rows, dim] each), when the arena holds them. */
  embedding?: { offset: number; rows: number };
  lmHead?: { offset: number; rows: number };
}

/**
 * How decode_layer.wgsl's dispatches share out `numLayers` layers over an arena: [first layer,
 * count] each, in order. A dispatch binds st, the arena, two caches a layer, the token (`embed`:
 * the first dispatch reads it; `logits`: the last may write it, greedy) and the logits (`logits`:
 * the last), at most `maxStorageBuffers`.
 */
export function decodeLayerGroups(numLayers: number, maxStorageBuffers: number, embed: boolean, logits: boolean): [number, number][] {
  const io = (first: boolean, last: boolean) => ((first && embed) || (last && logits) ? 1 : 0) + (last && logits ? 1 : 0);
  const slots = (first: boolean, last: boolean) => Math.min(DECODE_LAYER_MAX_SLOTS, Math.floor((maxStorageBuffers - 2 - io(first, last)) / 2));
  const groups: [number, number][] = [];
  for (let first = 0; first < numLayers; ) {
    const left = numLayers - first;
    // Not the last: leave at least one layer for a last dispatch (it may have less room).
    const count = left <= slots(first === 0, true) ? left : Math.min(slots(first === 0, false), left - 1);
    if (count < 1) throw new Error(`decode_layer.wgsl cannot bind a layer's caches within ${maxStorageBuffers} storage buffers`);
    groups.push([first, count]);
    first += count;
  }
  return groups;
}

export type DecodeLayerVariant = {
  dims: DecodeLayerDims;
  heads: number;
  kvDType: KvDType;
  /** Per projection (DECODE_LAYER_MATRICES order): its storage, and whether it walks runs. Undefined: the f32 arena. */
  matrices: { dtype: WeightDType; runs: boolean }[] | undefined;
  hasBias: boolean;
  workgroup: number;
  quads: number;
  /** Layers in the dispatch (1 with a binding per matrix). */
  slots: number;
  /** Sets x to the token's embedding first (arena only). */
  embed: boolean;
  /** Ends with the logits of this many rows of W_lm_head (arena only); 0: none. */
  logitsRows: number;
  /** Then picks the next token from them (argmax): to the token binding and a record in st. */
  greedy: boolean;
  /** What the layers run beyond the Llama block (decode-layer-family.ts); absent or none on: Llama's. */
  features?: DecodeLayerFeatures;
  /**
   * A batch of up to this many sequences (decode_layer_rows.wgsl; arena only): the state laid out
   * as decodeLayerRowsLayout, row r's token at word r * DECODE_ROWS_TOKEN_STRIDE and logits at
   * float r * decodeRowsLogitsStride(logitsRows). Absent: one sequence.
   */
  rows?: number;
  /** With rows: workgroups the rows are shared out over (row r in workgroup r mod rowGroups); default 1. */
  rowGroups?: number;
};
export const decodeLayerKey = (v: DecodeLayerVariant) =>
  `decode_layer/d${v.dims.dim}/q${v.dims.qDim}/kv${v.dims.kvDim}/f${v.dims.ffn}/hd${v.dims.headDim}/n${v.dims.numLayers}/g${v.heads}/kv_${v.kvDType}/` +
  `${v.matrices ? v.matrices.map((m) => `${m.dtype}${m.runs ? '+runs' : ''}`).join(',') : 'arena'}/${v.hasBias ? 'bias' : 'nobias'}/w${v.workgroup}q${v.quads}` +
  `/s${v.slots}${v.embed ? '/embed' : ''}${v.logitsRows ? `/logits${v.logitsRows}` : ''}${v.greedy ? '/greedy' : ''}` +
  decodeLayerFeaturesKey(v.features) +
  (v.rows ? `/rows${v.rows}${(v.rowGroups ?? 1) > 1 ? `x${v.rowGroups}` : ''}` : '');

/**
 * Whether decode_layer.wgsl can run a layer of these sizes and projections (DECODE_LAYER_MATRICES
 * order): sizes in whole vec4s, whole matrices (no parts), and enough storage bindings.
 */
export function decodeLayerFits(d: DecodeLayerDims, matrices: readonly GpuMatrix[], maxStorageBuffers: number): boolean {
  return (
    decodeLayerSizesFit(d) &&
    matrices.length === DECODE_LAYER_MATRICES.length &&
    matrices.every((m) => !m.parts) &&
    maxStorageBuffers >= DECODE_LAYER_STORAGE_BUFFERS
  );
}

/**
 * The attention feature of `shape` that decode_layer.wgsl does not implement (its attention is
 * Llama's, with any score scale), or undefined when it takes them all.
 */
export function decodeLayerUnsupported(shape: AttentionShape, headDim: number, f: DecodeLayerFeatures = {}): string | undefined {
  if (shape.softcap !== undefined && !f.attentionSoftcap) return 'attention soft-capping';
  if ((shape.rotaryDims ?? headDim) !== headDim && !f.layerRope) return 'partial rotary embeddings';
  if ((shape.magnitude ?? 1) !== 1 && !f.layerRope) return 'a RoPE magnitude';
  return undefined;
}

/** Whether decode_layer.wgsl can take these sizes: whole vec4s, and a head the attention takes. */
export function decodeLayerSizesFit(d: DecodeLayerDims): boolean {
  return [d.dim, d.qDim, d.kvDim, d.ffn, d.headDim].every((n) => n > 0 && n % 4 === 0) && d.headDim <= ATTENTION_MAX_HEAD_DIM;
}

/** The functions of the decode attention that touch the K/V caches (attentionSliceWgsl, decodeAttentionHelpersWgsl, online_softmax.wgsl, decode_attention.wgsl). */
export const CACHE_FUNCTIONS = ['load_k', 'load_v', 'load_k1', 'load_v1', 'store_kv_row', 'attend_row', 'attend_item'];

/**
 * decode_layer.wgsl's attention over the caches of each of its `slots` layers, from the decode
 * attention's source: with one slot, k_cache / v_cache; with several, the functions that touch
 * the caches once per slot (suffix c<slot>, over its own pair of bindings), so that each layer's
 * loads name their buffer at compile time (a run-time choice between buffers costs CPU devices a
 * masked branch per load; docs/tuning.md#decode-layer). `fn attend_slot(slot, item)` runs
 * attend_item for the slot's layer.
 */
export function decodeLayerAttentionWgsl(source: string, slots: number): string {
  const caches = (s: number) =>
    (['k', 'v'] as const)
      .map((b, i) => `@group(0) @binding(${DECODE_LAYER_CACHE_BINDING + 2 * s + i}) var<storage, read_write> ${b}_cache: array<KV>;\n`)
      .join('');
  if (slots === 1) return `${source}\n${caches(0)}fn attend_slot(slot: u32, item: u32) { attend_item(item); }\n`;
  const { rest, taken } = takeWgslFunctions(source, CACHE_FUNCTIONS);
  let code = rest;
  let cases = '';
  for (let s = 0; s < slots; s++) {
    code += renameWgsl(caches(s) + taken, `c${s}`);
    cases += `    case ${s}u: { attend_item_c${s}(item); }\n`;
  }
  return `${code}fn attend_slot(slot: u32, item: u32) {\n  switch (slot) {\n${cases}    default: {}\n  }\n}\n`;
}

/** decode_layer.wgsl with its snippets (see the head of that file). */
export function decodeLayerSpec(v: DecodeLayerVariant): ShaderSpec {
  const d = v.dims;
  const f = anyDecodeLayerFeature(v.features) ? v.features : undefined;
  const layout = decodeLayerLayout(d, f);
  const batch = v.rows ? decodeLayerRowsLayout(d, f, v.rows) : undefined;
  // The rows variant: row 0's regions (decode_layer_rows.wgsl reads row r's at an offset from them).
  const at = batch ? { x: batch.x, qkv: batch.qkv, att: batch.att, h: batch.h, pos: batch.ctrl } : layout;
  let helpers = `${decodeAttentionHelpersWgsl(d.headDim, v.heads, v.kvDType, false)}\n`;
  if (f) helpers = decodeLayerAttentionFeaturesWgsl(helpers, f, layout.features!);
  if (batch) helpers = replaceWgslFunctions(helpers, rowsKvRowWgsl(!!f?.ring));
  let code =
    `const WG: u32 = ${v.workgroup}u;\nconst QUADS: u32 = ${v.quads}u;\nconst TEAM: u32 = 1u;\nconst LAYER_SLOTS: u32 = ${v.slots}u;\n` +
    `const DIM: u32 = ${d.dim}u;\nconst Q_DIM: u32 = ${d.qDim}u;\nconst KV_DIM: u32 = ${d.kvDim}u;\nconst FFN: u32 = ${d.ffn}u;\n` +
    `const X0: u32 = ${at.x}u;\nconst QKV0: u32 = ${at.qkv}u;\nconst ATT0: u32 = ${at.att}u;\nconst H0: u32 = ${at.h}u;\n` +
    `const POS0: u32 = ${at.pos}u;\nconst FREQ0: u32 = ${layout.freq}u;\nconst OUT0: u32 = ${layout.outNorm}u;\nconst HAS_BIAS: bool = ${v.hasBias};\n` +
    `const EMBED: bool = ${v.embed};\nconst LOGITS: bool = ${v.logitsRows > 0};\nconst GREEDY: bool = ${v.greedy};\n` +
    (f && layout.features!.model >= 0 ? `const MODEL0: u32 = ${layout.features!.model}u;\n` : '') +
    decodeLayerAttentionWgsl(`${helpers}${decodeAttentionWgsl}\n`, v.slots);
  // Each projection's K and the vector it multiplies (decode_layer.wgsl's loaders).
  const inputs: Record<(typeof DECODE_LAYER_MATRICES)[number], [string, string]> = {
    q: ['DIM', 'attn'], k: ['DIM', 'attn'], v: ['DIM', 'attn'], o: ['Q_DIM', 'att'], g: ['DIM', 'ffn'], u: ['DIM', 'ffn'], d: ['FFN', 'h'],
  };
  const unroll: Record<string, number> = { QUADS: v.quads };
  const matrices = v.matrices;
  if (matrices) {
    if (v.slots !== 1 || v.embed || v.logitsRows || batch) throw new Error('decode_layer.wgsl: several layers, the embedding and the logits need the arena');
    DECODE_LAYER_MATRICES.forEach((name, i) => {
      const m = matrices[i];
      const [cols, input] = inputs[name];
      code += renameWgsl(weightFormatWgsl(m.dtype, DECODE_LAYER_WEIGHT_BINDING + i, 0, true), `s${name}`);
      code += blockDotWgsl(name, m.dtype, m.runs, cols, `load_in4_${input}`, `load_in_${input}`, unroll);
    });
  } else {
    code += weightFormatWgsl('f32', DECODE_LAYER_ARENA_BINDING, 0, true);
    DECODE_LAYER_MATRICES.forEach((name) => {
      const [cols, input] = inputs[name];
      code += blockDotWgsl(name, 'f32', false, cols, `load_in4_${input}`, `load_in_${input}`, unroll, '');
    });
  }
  if (v.greedy && !v.logitsRows) throw new Error('decode_layer.wgsl: a greedy pick needs the logits');
  if (v.embed || v.greedy) {
    code += `@group(0) @binding(${DECODE_LAYER_TOKENS_BINDING}) var<storage, ${v.greedy ? 'read_write' : 'read'}> tokens: array<u32>;\n`;
  }
  code += v.embed ? (batch ? decodeRowsEmbeddingWgsl(f) : decodeEmbeddingWgsl(f)) : 'fn embed_token(lid: u32) {}\n';
  if (v.logitsRows > 0) {
    code +=
      blockDotWgsl('lm', 'f32', false, 'DIM', 'load_in4_out', 'load_in_out', unroll, '') +
      (batch ? decodeRowsLogitsWgsl(v.logitsRows, f) : decodeLogitsWgsl(v.logitsRows, f));
  } else {
    code += 'fn project_logits(lid: u32) {}\n';
  }
  if (v.greedy) code += batch ? decodeRowsGreedyWgsl(batch.records) : decodeGreedyWgsl(layout.records);
  else code += 'fn pick_greedy(lid: u32) {}\n';
  let body = f ? decodeLayerBodyWgsl(decodeLayerWgsl, f, layout.features!, batch ? batch.block : layout.block!) : decodeLayerWgsl;
  if (batch) body = decodeLayerRowsBodyWgsl(body, !!f, batch, v.rowGroups ?? 1);
  let source = unrollAttentionLoops(`${code}\n${body}`, d.headDim, v.heads);
  if (batch) source = renameRowRegions(source);
  return { code: unrollConstLoops(source, unroll), entryPoint: 'main' };
}


/** decode_layer.wgsl's EMBED phase: x = E[token] from the arena (0 past its rows), as embedding.wgsl does (times the scale of the embeddingScale feature). */
export function decodeEmbeddingWgsl(f?: DecodeLayerFeatures): string {
  return `fn embed_token(lid: u32) {
  let token = tokens[0];
  for (var k = lid * 4u; k < DIM; k += WG * 4u) {
    var e = vec4<f32>(0.0);
    if (token < params.emb_rows) { e = load_weight4(params.emb + token * DIM + k)${embeddingScaleWgsl(f)}; }
    st[(X0 + k) >> 2u] = e;
  }
}
`;
}

/** decode_layer.wgsl's LOGITS phase: logits = s·(x∘γ_out)·W_lm_headᵀ, W_lm_head [rows, DIM] in the arena (soft-capped with the logitSoftcap feature). */
export function decodeLogitsWgsl(rows: number, f?: DecodeLayerFeatures): string {
  return `@group(0) @binding(${DECODE_LAYER_LOGITS_BINDING}) var<storage, read_write> logits: array<f32>;
const LOGIT_ROWS: u32 = ${rows}u;
fn project_logits(lid: u32) {
  let s = rms_scale();
  for (var b = lid; b < (LOGIT_ROWS + ROWS_PER_BLOCK - 1u) / ROWS_PER_BLOCK; b += WG) {
    let r0 = b * ROWS_PER_BLOCK;
    let acc = block_dot_lm(params.lm, r0, LOGIT_ROWS - 1u, 0u);
    for (var q = 0u; q < QUADS; q++) {
      let r = r0 + 4u * q;
      let y = ${logitCapWgsl(f, 'acc[q] * s')};
      if (r < LOGIT_ROWS) { logits[r] = y.x; }
      if (r + 1u < LOGIT_ROWS) { logits[r + 1u] = y.y; }
      if (r + 2u < LOGIT_ROWS) { logits[r + 2u] = y.z; }
      if (r + 3u < LOGIT_ROWS) { logits[r + 3u] = y.w; }
    }
  }
}
`;
}

/**
 * decode_layer.wgsl's GREEDY phase, after LOGITS: greedy_pick.wgsl's pick of the next token from
 * the logits (each thread's part, then thread 0 merges them), written to the token binding (where
 * the next step embeds it) and its record (id, logprob) to the state.
 */
export function decodeGreedyWgsl(records: number): string {
  return `${greedyPickWgsl}
const GREEDY_PARTS: u32 = WG;
const RECORD0: u32 = ${records}u;
const RECORD_SLOTS: u32 = ${DECODE_RECORD_SLOTS}u;
fn pick_greedy(lid: u32) {
  greedy_parts[lid] = greedy_scan(0u, LOGIT_ROWS, lid);
  workgroupBarrier();
  if (lid == 0u) {
    let g = greedy_merge(0u);
    tokens[0] = g.id;
    st[RECORD0 / 4u + start_pos() % RECORD_SLOTS] = vec4<f32>(bitcast<f32>(g.id), -log(g.sum), 0.0, 0.0);
  }
}
`;
}

/** decode_layer.wgsl's Params: slots holds a Slot (8 words: consts, then the seven matrices' offsets) per layer. */
export const DECODE_LAYER_PARAMS = paramStruct({
  start_pos: 'u32',
  num_heads: 'u32',
  num_kv_heads: 'u32',
  head_dim: 'u32',
  scale: 'f32',
  window: 'u32',
  chunk_keys: 'u32',
  num_chunks: 'u32',
  pairing: 'u32',
  eps: 'f32',
  advance: 'u32',
  emb: 'u32',
  emb_rows: 'u32',
  lm: 'u32',
  pad0: 'u32',
  pad1: 'u32',
  slots: 'u32[]',
});

/** What planDecodeLayers reads of the device's kernels (KernelRegistry has it). */
export interface DecodeLayerKernels {
  readonly ctx: GpuContext;
  readonly tuning: KernelTuning;
  usesWeightRuns(dtype: WeightDType): boolean;
  decodeLayerPipeline(variant: DecodeLayerVariant): GPUComputePipeline;
}

/**
 * The matrices a decode_layer.wgsl dispatch reads (see KernelRecorder.decodeLayers): one layer's,
 * each bound on its own, or every layer's in an arena (with the embedding and logits it may add);
 * hasBias: whether its layers add q, k and v biases (from the state).
 */
export type DecodeLayerWeights = (
  | { matrices: readonly GpuMatrix[] }
  | { arena: DecodeArena; embedFrom?: GPUBuffer; logits?: GPUBuffer; greedyTo?: GPUBuffer }
) & { hasBias: boolean };

/** The sizes a decode_layer.wgsl dispatch runs with: the compiled ones, the attention's heads and RMSNorm's ε. */
export interface DecodeLayerShape {
  dims: DecodeLayerDims;
  attention: AttentionShape;
  eps: number;
  /** The family features the layers run (their constants in the state: decodeLayerLayout(dims, features)). */
  features?: DecodeLayerFeatures;
  /**
   * A batch of up to this many sequences, each in its own slot of the caches (the rows variant:
   * the state laid out as decodeLayerRowsLayout; arena only). Absent: one sequence.
   */
  rows?: number;
  /** With rows: the workgroups they are shared out over (DecodeLayerVariant.rowGroups; default 1). */
  rowGroups?: number;
}

/** The dispatch of decode layers first .. first + count - 1 (see KernelRecorder.decodeLayers), checked. */
export function planDecodeLayers(
  kernels: DecodeLayerKernels,
  state: GPUBuffer,
  weights: DecodeLayerWeights,
  layers: { first: number; count: number },
  shape: DecodeLayerShape,
  caches: { keys: readonly GPUBuffer[]; values: readonly GPUBuffer[]; kvDType: KvDType; rings?: readonly (KvRing | undefined)[]; slots?: number },
): PlannedDispatch {
  const { first, count } = layers;
  const { dims, eps } = shape;
  const { heads: numHeads, kvHeads: numKvHeads, pairing, slidingWindow } = shape.attention;
  const { kvDType } = caches;
  const { hasBias } = weights;
  const maxStorage = kernels.ctx.limits.maxStorageBuffersPerShaderStage;
  assertCount(first, 'decodeLayers first', 0);
  assertCount(count, 'decodeLayers count');
  if (first + count > dims.numLayers) throw new Error(`decodeLayers: layers ${first} .. ${first + count - 1} of ${dims.numLayers}`);
  if (numHeads * dims.headDim !== dims.qDim || numKvHeads * dims.headDim !== dims.kvDim || numHeads % numKvHeads !== 0) {
    throw new Error(`decodeLayers: ${numHeads} heads on ${numKvHeads} KV heads of ${dims.headDim} do not make q ${dims.qDim}, kv ${dims.kvDim}`);
  }
  if (pairing !== 'adjacent' && pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(pairing)}`);
  if (slidingWindow !== undefined) assertCount(slidingWindow, 'decodeLayers slidingWindow');
  const features = anyDecodeLayerFeature(shape.features) ? shape.features : undefined;
  const unsupported = decodeLayerUnsupported(shape.attention, dims.headDim, features);
  if (unsupported) throw new Error(`decodeLayers: decode_layer.wgsl does not take ${unsupported}; use the fused-matvec step`);
  if (!decodeLayerSizesFit(dims)) throw new Error('decodeLayers: these sizes do not fit decode_layer.wgsl (see decodeLayerFits)');
  const shapes: [number, number][] = [
    [dims.qDim, dims.dim], [dims.kvDim, dims.dim], [dims.kvDim, dims.dim], [dims.dim, dims.qDim],
    [dims.ffn, dims.dim], [dims.ffn, dims.dim], [dims.dim, dims.ffn],
  ];
  const layout = decodeLayerLayout(dims, features);
  const batch = shape.rows ? decodeLayerRowsLayout(dims, features, shape.rows) : undefined;
  assertFits(state, (batch ?? layout).floats * 4, 'decodeLayers state');
  // The rows variant's caches hold `slots` sequences, each slot a one-sequence cache's rows.
  const cacheSlots = batch ? (caches.slots ?? 1) : 1;
  const rowGroups = shape.rowGroups ?? 1;
  if (!(Number.isInteger(rowGroups) && rowGroups >= 1 && rowGroups <= (shape.rows ?? 1))) {
    throw new Error(`decodeLayers: rowGroups ${rowGroups} must be an integer in 1 .. rows (${shape.rows ?? 1})`);
  }
  const buffers: Record<number, GPUBuffer> = { 1: state };
  const rowBytes = dims.kvDim * (kvDType === 'f16' ? 2 : 4);
  let rows = Infinity;
  for (let s = 0; s < count; s++) {
    const [k, v] = [caches.keys[first + s], caches.values[first + s]];
    if (!k || !v) throw new Error(`decodeLayers: no KV cache for layer ${first + s}`);
    assertDistinct(k, [v, state], 'decodeLayers');
    assertDistinct(v, [state], 'decodeLayers');
    const bufferRows = Math.floor(Math.min(k.size, v.size) / rowBytes / cacheSlots);
    // A ring (the ring feature: its rows in the layer's constants) holds positions up to ring.positions.
    const ring = caches.rings?.[first + s];
    if (ring) {
      if (!features?.ring) throw new Error(`decodeLayers: layer ${first + s}'s cache is a ring; the dispatch needs the ring feature`);
      checkRing(ring, 1, undefined, `decodeLayers layer ${first + s}`);
      if (ring.rows > bufferRows) throw new Error(`decodeLayers: layer ${first + s}'s ring of ${ring.rows} rows passes its cache of ${bufferRows}`);
    }
    rows = Math.min(rows, ring ? ring.positions : bufferRows);
    buffers[DECODE_LAYER_CACHE_BINDING + 2 * s] = k;
    buffers[DECODE_LAYER_CACHE_BINDING + 2 * s + 1] = v;
  }
  assertCount(rows, 'decodeLayers cache rows');
  // Per slot: its constants in the state and its matrices' first elements in the arena.
  const slots: number[] = [];
  let variantWeights: DecodeLayerVariant['matrices'];
  let embed = false;
  let logitsRows = 0;
  let greedy = false;
  const io = [0, 0, 0]; // emb, emb_rows, lm
  if ('matrices' in weights) {
    const { matrices } = weights;
    if (count !== 1) throw new Error('decodeLayers: a binding per matrix takes one layer a dispatch');
    if (batch) throw new Error('decodeLayers: a batch of rows needs the arena');
    if (!decodeLayerFits(dims, matrices, maxStorage)) {
      throw new Error('decodeLayers: these sizes or matrices do not fit decode_layer.wgsl (see decodeLayerFits)');
    }
    matrices.forEach((W, i) => {
      const [r, c] = shapes[i];
      const what = `decodeLayers W_${DECODE_LAYER_MATRICES[i]}`;
      if (W.rows !== r || W.cols !== c) throw new Error(`${what} is [${W.rows}, ${W.cols}], expected [${r}, ${c}]`);
      checkWeightShape(W.dtype, W.rows, W.cols, what);
      buffers[DECODE_LAYER_WEIGHT_BINDING + i] = W.buffer;
    });
    assertDistinct(state, matrices.map((m) => m.buffer), 'decodeLayers');
    variantWeights = matrices.map((m) => ({ dtype: m.dtype, runs: kernels.usesWeightRuns(m.dtype) }));
    slots.push(layout.consts + first * layout.constsStride, 0, 0, 0, 0, 0, 0, 0);
  } else {
    const { arena, embedFrom, logits, greedyTo } = weights;
    if (embedFrom && greedyTo && embedFrom !== greedyTo) throw new Error('decodeLayers: embedFrom and greedyTo must be one buffer (one binding)');
    const tokens = embedFrom ?? greedyTo;
    if (count > DECODE_LAYER_MAX_SLOTS) throw new Error(`decodeLayers: at most ${DECODE_LAYER_MAX_SLOTS} layers a dispatch, got ${count}`);
    const floats = arena.buffer.size / 4;
    const inArena = (offset: number, elements: number, what: string) => {
      if (!Number.isInteger(offset) || offset < 0 || offset % 4 !== 0 || offset + elements > floats) {
        throw new Error(`decodeLayers: ${what} at element ${offset} (${elements} elements) is not in the arena of ${floats}`);
      }
    };
    for (let s = 0; s < count; s++) {
      const offsets = arena.layers[first + s];
      if (!offsets || offsets.length !== DECODE_LAYER_MATRICES.length) throw new Error(`decodeLayers: the arena has no matrices for layer ${first + s}`);
      offsets.forEach((o, i) => inArena(o, shapes[i][0] * shapes[i][1], `layer ${first + s} W_${DECODE_LAYER_MATRICES[i]}`));
      slots.push(layout.consts + (first + s) * layout.constsStride, ...offsets);
    }
    buffers[DECODE_LAYER_ARENA_BINDING] = arena.buffer;
    assertDistinct(state, [arena.buffer], 'decodeLayers');
    if (tokens) {
      assertFits(tokens, batch ? batch.maxRows * DECODE_ROWS_TOKEN_STRIDE * 4 : 4, 'decodeLayers tokens');
      buffers[DECODE_LAYER_TOKENS_BINDING] = tokens;
    }
    if (embedFrom) {
      if (!arena.embedding) throw new Error('decodeLayers: the arena holds no token embedding');
      assertCount(arena.embedding.rows, 'decodeLayers embedding rows');
      inArena(arena.embedding.offset, arena.embedding.rows * dims.dim, 'the token embedding');
      embed = true;
      io[0] = arena.embedding.offset;
      io[1] = arena.embedding.rows;
    }
    if (logits) {
      if (!arena.lmHead) throw new Error('decodeLayers: the arena holds no W_lm_head');
      assertCount(arena.lmHead.rows, 'decodeLayers lm_head rows');
      inArena(arena.lmHead.offset, arena.lmHead.rows * dims.dim, 'W_lm_head');
      const logitFloats = batch ? (batch.maxRows - 1) * decodeRowsLogitsStride(arena.lmHead.rows) + arena.lmHead.rows : arena.lmHead.rows;
      assertFits(logits, logitFloats * 4, 'decodeLayers logits');
      assertDistinct(logits, [state, arena.buffer, tokens], 'decodeLayers');
      buffers[DECODE_LAYER_LOGITS_BINDING] = logits;
      logitsRows = arena.lmHead.rows;
      io[2] = arena.lmHead.offset;
    }
    if (greedyTo) {
      if (!logits) throw new Error('decodeLayers: a greedy pick needs the logits');
      if (first + count !== dims.numLayers) throw new Error('decodeLayers: only the last layer\'s dispatch picks the next token');
      greedy = true;
    }
    const bound = Object.keys(buffers).length;
    if (bound > maxStorage) throw new Error(`decodeLayers: ${bound} storage buffers, the device binds ${maxStorage} (see decodeLayerGroups)`);
  }
  const heads = kernels.tuning.attentionHeads(numHeads / numKvHeads, dims.headDim);
  const variant: DecodeLayerVariant = {
    dims,
    heads,
    kvDType,
    matrices: variantWeights,
    hasBias,
    workgroup: kernels.tuning.decodeLayerWorkgroup,
    quads: kernels.tuning.decodeLayerQuads,
    slots: count,
    embed,
    logitsRows,
    greedy,
    ...(features ? { features } : {}),
    ...(batch ? { rows: batch.maxRows, rowGroups } : {}),
  };
  const advance = first + count === dims.numLayers ? 1 : 0;
  return {
    pipeline: kernels.decodeLayerPipeline(variant),
    params: DECODE_LAYER_PARAMS.pack({
      start_pos: 0,
      num_heads: numHeads,
      num_kv_heads: numKvHeads,
      head_dim: dims.headDim,
      scale: shape.attention.scale ?? 1 / Math.sqrt(dims.headDim),
      window: slidingWindow ?? 0,
      chunk_keys: rows,
      num_chunks: 1,
      pairing: ropePairingCode(pairing),
      eps,
      advance,
      emb: io[0],
      emb_rows: io[1],
      lm: io[2],
      pad0: 0,
      pad1: 0,
      slots,
    }),
    buffers,
    workgroups: rowGroups,
  };
}
