// The batched decode step of the fused path (BatchDecodeStep over the fused kernels): decode-step.ts's
// recordDecodeStep for up to maxRows rows at once, recorded once. Every dispatch reads the row
// count from a small rows buffer (setRows writes it; the step's last dispatch moves every row to
// its next position), so one program serves every batch size: the projections
// (fused_matvec_batch.wgsl) compute each workgroup's block of weight rows for every row in turn,
// the attention (decode_attention_batch.wgsl) runs every row's work items at its own position in
// its own slot, and the elementwise kernels (post-block norms, residual adds, the logit soft-cap)
// run over all maxRows rows, each row on its own. A row's arithmetic is one row's code whatever
// the other rows are: its logits are the same in any batch.
import { BATCH_RECORD_BYTES, batchRowsBytes, packBatchRows } from '../gpu/kernels/batch-rows.ts';
import type { KernelProgram } from '../gpu/kernels/index.ts';
import { BATCH_TOKEN_STRIDE_BYTES, type BatchDecodeStep, type BatchRow, type RowRegion } from './batch-step.ts';
import { fusedStepRefusal } from './decode-step.ts';
import type { LlamaParts } from './forward.ts';
import type { KvCache } from './kv-cache.ts';

/** Floats between rows' logits: the vocabulary rounded up to 64 floats (256-byte aligned rows). */
export const logitsStride = (vocab: number) => Math.ceil(vocab / 64) * 64;

export interface FusedBatchStepOptions {
  /** Most rows a step runs. */
  maxRows: number;
  /**
   * Ids tokens may be chosen among: the first vocabRows logits (default all). The step's greedy
   * pick (BatchDecodeStep.greedy) chooses among all of them, so with fewer it is left out.
   */
  vocabRows?: number;
}

/** Greedy records a row keeps (BatchDecodeStep.greedy.records.slots): a run of steps may take this many before its first is overwritten. */
export const BATCH_RECORD_SLOTS = 32;

/** Why createFusedBatchStep cannot run `model` over `cache`, or undefined. */
export function fusedBatchStepRefusal(model: LlamaParts, cache: KvCache): string | undefined {
  const s = model.shape;
  const w = model.weights;
  const single = fusedStepRefusal(s);
  if (single) return single;
  if (w.tokenEmbedding.parts) return 'the batched step takes a whole embedding table (not split in parts)';
  if (w.layers.some((l) => l.wGate.parts || l.wUp.parts)) return 'the batched step takes whole W_gate and W_up matrices (not split in parts)';
  for (let l = 0; l < s.layers; l++) {
    const ring = cache.rings[l];
    if (ring && ring.rows !== cache.rows[l]) return `layer ${l}'s ring does not fill its slot`;
  }
  return undefined;
}

/**
 * A BatchDecodeStep over the fused kernels for up to options.maxRows rows, over the slots of
 * `cache`; or, where it cannot run the model, why (the engine then steps each sequence alone).
 */
export function createFusedBatchStep(model: LlamaParts, cache: KvCache, options: FusedBatchStepOptions): BatchDecodeStep | string {
  const maxRows = options.maxRows;
  if (!(Number.isInteger(maxRows) && maxRows >= 1)) throw new Error(`maxRows must be an integer >= 1, got ${maxRows}`);
  const refusal = fusedBatchStepRefusal(model, cache);
  if (refusal) return refusal;
  const { shape: s, kernels } = model;
  const device = model.ctx.device;
  const a = s.attention;
  const qkvDim = (a.heads + 2 * a.kvHeads) * a.headDim;
  const stride = logitsStride(s.vocab);
  const tokenStride = BATCH_TOKEN_STRIDE_BYTES / 4;
  const own: GPUBuffer[] = [];
  const buffer = (label: string, bytes: number, usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC) => {
    const b = device.createBuffer({ label, size: Math.max(4, bytes), usage });
    own.push(b);
    return b;
  };
  const f32 = (label: string, floats: number) => buffer(label, maxRows * floats * 4);
  const tokenIn = buffer('batch_tokens', maxRows * BATCH_TOKEN_STRIDE_BYTES, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC);
  const rowsBuffer = buffer('batch_rows', batchRowsBytes(maxRows), GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC);
  const x = f32('batch_x', s.dim);
  const qkv = f32('batch_qkv', qkvDim);
  const attnOut = f32('batch_attn_out', s.qDim);
  const ffnHidden = f32('batch_ffn_hidden', s.ffn);
  const family = s.family;
  const blockOut = family.postAttentionNorm || family.postFeedForwardNorm ? f32('batch_block_out', s.dim) : undefined;
  const logits = buffer('batch_logits', maxRows * stride * 4, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
  // Long caches split each row's attention over the sequence (flash-decoding), as the single step.
  const chunkKeys = kernels.decodeAttentionChunkKeys();
  const chunks = Math.ceil(cache.capacity / chunkKeys);
  const partials = chunks > 1 ? f32('batch_attention_partials', a.heads * chunks * (a.headDim + 2)) : undefined;
  const greedy = (options.vocabRows ?? s.vocab) >= s.vocab;
  const records = greedy ? buffer('batch_greedy_records', maxRows * BATCH_RECORD_SLOTS * BATCH_RECORD_BYTES) : undefined;

  const program = kernels.program('batch decode step');
  const io = { maxRows, rows: rowsBuffer, tokenIn, x, qkv, attnOut, ffnHidden, blockOut, logits, stride, partials, chunkKeys, records };
  recordBatchStep(program, model, cache, io);
  program.seal();
  const rowLogits = (r: number): RowRegion => ({ buffer: logits, offset: checkRow(r, maxRows) * stride * 4 });
  const rowToken = (r: number): RowRegion => ({ buffer: tokenIn, offset: checkRow(r, maxRows) * tokenStride * 4 });
  return {
    maxRows,
    slots: cache.slots,
    slotKv: (l, slot) => ({ keys: cache.keys[l], values: cache.values[l], offset: cache.slotOffset(l, slot) }),
    setRows(rows: readonly BatchRow[]): void {
      checkRows(rows, maxRows, cache);
      device.queue.writeBuffer(rowsBuffer, 0, packBatchRows(rows));
    },
    encode: (encoder) => program.encode(encoder),
    encodeInPass: (pass) => program.encodeInPass(pass),
    rowLogits,
    rowToken,
    greedy: records && { records: { buffer: records, offset: 0, bytes: BATCH_RECORD_BYTES, slots: BATCH_RECORD_SLOTS } },
    dispatchCount: program.dispatchCount,
    destroy(): void {
      program.destroy();
      for (const b of own) b.destroy();
    },
  };
}

function checkRow(r: number, maxRows: number): number {
  if (!(Number.isInteger(r) && r >= 0 && r < maxRows)) throw new RangeError(`row ${r} is outside 0..${maxRows - 1}`);
  return r;
}

/** Throws unless `rows` fit the step: at most maxRows, slots in range and distinct, positions in the cache. */
function checkRows(rows: readonly BatchRow[], maxRows: number, cache: KvCache): void {
  if (rows.length > maxRows) throw new Error(`${rows.length} rows passes the step's ${maxRows}`);
  const seen = new Set<number>();
  for (const { slot, position } of rows) {
    if (!(Number.isInteger(slot) && slot >= 0 && slot < cache.slots)) throw new RangeError(`slot ${slot} is outside 0..${cache.slots - 1}`);
    if (seen.has(slot)) throw new Error(`slot ${slot} is in two rows`);
    seen.add(slot);
    if (!(Number.isInteger(position) && position >= 0 && position < cache.capacity)) {
      throw new RangeError(`position ${position} is outside the KV cache (0 .. ${cache.capacity - 1})`);
    }
  }
}

/** The batched step's buffers, each [maxRows, ...] (see createFusedBatchStep). */
interface BatchStepBuffers {
  maxRows: number;
  /** The row count and each row's (position, slot): batch-rows.ts. */
  rows: GPUBuffer;
  /** u32 tokens BATCH_TOKEN_STRIDE_BYTES apart. */
  tokenIn: GPUBuffer;
  x: GPUBuffer;
  qkv: GPUBuffer;
  attnOut: GPUBuffer;
  ffnHidden: GPUBuffer;
  blockOut: GPUBuffer | undefined;
  /** [maxRows, stride] */
  logits: GPUBuffer;
  stride: number;
  partials: GPUBuffer | undefined;
  chunkKeys: number;
  /** The greedy records ([maxRows, BATCH_RECORD_SLOTS] of BATCH_RECORD_BYTES), where the step picks greedily. */
  records: GPUBuffer | undefined;
}

/**
 * recordDecodeStep's dispatches for every row (see there for the math): the batched variants
 * of the embedding, fused_matvec and decode_attention; the post-block norms, residual adds and
 * logit soft-cap over all maxRows rows; the greedy pick of every row (with records); then
 * advance_rows.
 */
function recordBatchStep(rec: KernelProgram, model: LlamaParts, cache: KvCache, b: BatchStepBuffers): void {
  const { shape: s, weights: w } = model;
  const { maxRows, rows } = b;
  const family = s.family;
  const eps = s.eps;
  const a = s.attention;
  const qkvDim = (a.heads + 2 * a.kvHeads) * a.headDim;
  const batch = (xStride: number, yStride: number) => ({ rows, maxRows, xStride, yStride });
  rec.batchEmbedding(b.x, w.tokenEmbedding, b.tokenIn, maxRows, BATCH_TOKEN_STRIDE_BYTES / 4, family.embeddingScale ?? 1);
  const activation = family.activation;
  for (let l = 0; l < s.layers; l++) {
    const layer = w.layers[l];
    const qkv = [
      { W: layer.wq, bias: layer.bq },
      { W: layer.wk, bias: layer.bk },
      { W: layer.wv, bias: layer.bv },
    ];
    rec.fusedMatvec(b.qkv, b.x, qkv, { norm: { gamma: layer.attnNorm, eps }, batch: batch(s.dim, qkvDim) });
    const { attention: la, ropeTable } = s.layerShapes[l];
    const attention = { out: b.attnOut, qkv: b.qkv, keys: cache.keys[l], values: cache.values[l], invFreq: model.invFreqs[ropeTable] };
    const qkNorm = layer.qNorm && layer.kNorm ? { q: layer.qNorm, k: layer.kNorm, eps } : undefined;
    const ring = cache.rings[l];
    const at = { rows, maxRows, slotRows: cache.rows[l], qkvStride: qkvDim, outStride: s.qDim };
    const split = b.partials && { chunkKeys: b.chunkKeys, partials: b.partials };
    rec.batchDecodeAttention(attention, at, ring ? { ...la, ring } : la, cache.kvDType, split, qkNorm);
    if (layer.postAttnNorm) {
      rec.fusedMatvec(b.blockOut!, b.attnOut, [{ W: layer.wo }], { batch: batch(s.qDim, s.dim) });
      rec.rmsNorm(b.blockOut!, b.blockOut!, layer.postAttnNorm, maxRows, s.dim, eps);
      rec.add(b.x, b.x, b.blockOut!, maxRows * s.dim);
    } else {
      rec.fusedMatvec(b.x, b.attnOut, [{ W: layer.wo }], { accumulate: true, batch: batch(s.qDim, s.dim) });
    }
    const swiglu = { norm: { gamma: layer.ffnNorm, eps }, batch: batch(s.dim, s.ffn), ...(activation !== 'silu' ? { activation } : {}) };
    rec.fusedSwiglu(b.ffnHidden, b.x, layer.wGate, layer.wUp, swiglu);
    if (layer.postFfnNorm) {
      rec.fusedMatvec(b.blockOut!, b.ffnHidden, [{ W: layer.wDown }], { batch: batch(s.ffn, s.dim) });
      rec.rmsNorm(b.blockOut!, b.blockOut!, layer.postFfnNorm, maxRows, s.dim, eps);
      rec.add(b.x, b.x, b.blockOut!, maxRows * s.dim);
    } else {
      rec.fusedMatvec(b.x, b.ffnHidden, [{ W: layer.wDown }], { accumulate: true, batch: batch(s.ffn, s.dim) });
    }
  }
  rec.fusedMatvec(b.logits, b.x, [{ W: w.lmHead }], { norm: { gamma: w.outputNorm, eps }, batch: batch(s.dim, b.stride) });
  if (family.finalLogitSoftcap !== undefined) rec.softcap(b.logits, maxRows * b.stride, family.finalLogitSoftcap); // Gemma 2
  if (b.records) {
    const shape = { maxRows, vocab: s.vocab, stride: b.stride, tokenStride: BATCH_TOKEN_STRIDE_BYTES / 4, slots: BATCH_RECORD_SLOTS };
    rec.batchGreedy({ logits: b.logits, tokens: b.tokenIn, records: b.records, rows }, shape);
  }
  rec.advanceBatchRows(rows, maxRows);
}
