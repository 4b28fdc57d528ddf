// Batched decode attention (continuous batching): decode_attention_batch.wgsl runs
// decode_attention.wgsl's work items for every row of a batched decode step, each at its position
// in its K/V slot, and (split) decode_attention_batch_combine.wgsl combines each row's partials;
// their composition and the planning of their dispatches.
import type { ShaderSpec } from '../pipelines.ts';
import {
  checkAttentionShape,
  checkShapeRing,
  DECODE_QK_NORM_BINDINGS,
  decodeAttentionHelpersWgsl,
  ringKey,
  scoreParams,
  unrollAttentionLoops,
  type AttentionKernels,
  type AttentionShape,
  type DecodeAttentionFeatures,
  type DecodeAttentionVariant,
} from './attention.ts';
import { batchRowsWgsl } from './batch-rows.ts';
import { assertCount, assertDistinct, assertFits } from './checks.ts';
import { ropePairingCode, ropeParams, type KvDType } from './elementwise.ts';
import { paramStruct, type PlannedDispatch } from '../uniforms.ts';
import { takeWgslFunctions } from './wgsl.ts';
import attentionWgsl from '../../../shaders/attention.wgsl?raw';
import decodeAttentionWgsl from '../../../shaders/decode_attention.wgsl?raw';
import decodeAttentionBatchWgsl from '../../../shaders/decode_attention_batch.wgsl?raw';
import decodeAttentionBatchCombineWgsl from '../../../shaders/decode_attention_batch_combine.wgsl?raw';

/** The batched decode attention's kernels: the attention itself, or (split) the combine of its partials. */
export type BatchDecodeAttentionVariant = Omit<DecodeAttentionVariant, 'position' | 'slotBase'> & { entry: 'main' | 'combine' };
export const batchDecodeAttentionKey = (v: BatchDecodeAttentionVariant) =>
  `decode_attention_batch/${v.entry}/hd${v.headDim}/kv_${v.kvDType}/${v.split ? 'split' : 'whole'}/t${v.threads}/g${v.heads}` +
  (v.softcap ? '/softcap' : '') +
  (v.rope ? '/rope_params' : '') +
  (v.qkNorm ? '/qk_norm' : '') +
  ringKey(v.ring);
/** The rows buffer's binding in the batched decode attention (batch-rows.ts). */
export const BATCH_ATTENTION_ROWS_BINDING = 8;

/** decode_attention_batch.wgsl (+ its combine, split): decode_attention.wgsl's math a row at a time. */
export function batchDecodeAttentionSpec(v: BatchDecodeAttentionVariant): ShaderSpec {
  const aligned = v.headDim % 4 === 0;
  let code = `const THREADS: u32 = ${v.threads}u;\n` + decodeAttentionHelpersWgsl(v.headDim, v.heads, v.kvDType, false, { ...v, slotBase: true });
  code += batchRowsWgsl(BATCH_ATTENTION_ROWS_BINDING);
  code += aligned
    ? 'fn store_out(i: u32, v: H) { let o = out_base + i; out[o] = v.x; out[o + 1u] = v.y; out[o + 2u] = v.z; out[o + 3u] = v.w; }\n'
    : 'fn store_out(i: u32, v: H) { out[out_base + i] = v; }\n';
  if (v.split) {
    code +=
      '@group(0) @binding(5) var<storage, read_write> partials: array<f32>;\n' +
      (aligned
        ? 'fn store_partial(i: u32, v: H) { let o = partial_base + i; partials[o] = v.x; partials[o + 1u] = v.y; partials[o + 2u] = v.z; partials[o + 3u] = v.w; }\n'
        : 'fn store_partial(i: u32, v: H) { partials[partial_base + i] = v; }\n') +
      'fn store_ml(i: u32, m: f32, l: f32) { partials[partial_base + i] = m; partials[partial_base + i + 1u] = l; }\n';
  } else {
    if (v.entry === 'combine') throw new Error('the batched decode attention combines split partials only');
    code += 'fn store_partial(i: u32, v: H) {}\nfn store_ml(i: u32, m: f32, l: f32) {}\n';
  }
  let source = `${code}\n${decodeAttentionWgsl}\n${decodeAttentionBatchWgsl}`;
  if (v.split) source += `\n${takeWgslFunctions(attentionWgsl, ['combine_chunks']).taken}\n${decodeAttentionBatchCombineWgsl}`;
  return { code: unrollAttentionLoops(source, v.headDim, v.heads), entryPoint: v.entry };
}

/** decode_attention_batch.wgsl's Params. */
export const BATCH_DECODE_ATTENTION_PARAMS = paramStruct({
  start_pos: 'u32',
  num_heads: 'u32',
  num_kv_heads: 'u32',
  head_dim: 'u32',
  scale: 'f32',
  window: 'u32',
  chunk_keys: 'u32',
  num_chunks: 'u32',
  pairing: 'u32',
  softcap: 'f32',
  rotary_dims: 'u32',
  magnitude: 'f32',
  qk_eps: 'f32',
  slot_rows: 'u32',
  qkv_stride: 'u32',
  out_stride: 'u32',
  positions: 'u32',
});

/** Where a batched decode attention's rows lie (see planBatchDecodeAttention). */
export interface DecodeAttentionBatch {
  /** The rows buffer (batch-rows.ts): the count, each row's position and slot. */
  rows: GPUBuffer;
  maxRows: number;
  /** Cache rows a slot: slot s's rows start at row s * slotRows of the caches. */
  slotRows: number;
  /** Floats between rows' qkv and out. */
  qkvStride: number;
  outStride: number;
}

/** What planBatchDecodeAttention reads of the device's kernels. */
export interface BatchAttentionKernels extends AttentionKernels {
  batchDecodeAttentionPipeline(variant: BatchDecodeAttentionVariant): GPUComputePipeline;
}

/**
 * The dispatches of a batched decode attention: planDecodeAttention's for every row of `batch`
 * (each at its position, in its slot), sized for batch.maxRows, the row count read on the GPU.
 * With `split` (partials for maxRows rows: maxRows * heads * chunks * (headDim + 2) floats) the
 * keys are split as a cache of slotRows rows (a ring: its positions) splits, and combined per row.
 */
export function planBatchDecodeAttention(
  kernels: BatchAttentionKernels,
  buffers: { out: GPUBuffer; qkv: GPUBuffer; keys: GPUBuffer; values: GPUBuffer; invFreq: GPUBuffer },
  batch: DecodeAttentionBatch,
  shape: AttentionShape,
  kvDType: KvDType,
  split: { chunkKeys: number; partials: GPUBuffer } | undefined,
  qkNorm?: { q: GPUBuffer; k: GPUBuffer; eps: number },
): PlannedDispatch[] {
  const { out, qkv, keys: kCache, values: vCache, invFreq } = buffers;
  const { heads: numHeads, kvHeads: numKvHeads, headDim, pairing, slidingWindow } = shape;
  checkAttentionShape(shape, 'batchDecodeAttention');
  assertCount(batch.maxRows, 'batchDecodeAttention maxRows');
  assertCount(batch.slotRows, 'batchDecodeAttention slotRows');
  if (headDim % 2 !== 0) throw new Error(`batchDecodeAttention headDim must be even (RoPE pairs), got ${headDim}`);
  if (pairing !== 'adjacent' && pairing !== 'halves') throw new Error(`unknown rope pairing: ${String(pairing)}`);
  const { rotaryDims, magnitude } = ropeParams(shape, headDim, 'batchDecodeAttention');
  const qDim = numHeads * headDim;
  const kvDim = numKvHeads * headDim;
  assertDistinct(out, [qkv, kCache, vCache, invFreq, split?.partials, qkNorm?.q, qkNorm?.k, batch.rows], 'batchDecodeAttention');
  assertDistinct(kCache, [vCache, qkv, qkNorm?.q, qkNorm?.k, batch.rows], 'batchDecodeAttention');
  assertDistinct(vCache, [qkNorm?.q, qkNorm?.k, batch.rows], 'batchDecodeAttention');
  if (qkNorm) {
    assertFits(qkNorm.q, headDim * 4, 'batchDecodeAttention qkNorm.q');
    assertFits(qkNorm.k, headDim * 4, 'batchDecodeAttention qkNorm.k');
  }
  if (batch.outStride < qDim || batch.qkvStride < qDim + 2 * kvDim) throw new Error('batchDecodeAttention: a row stride is shorter than its row');
  if (headDim % 4 === 0 && batch.outStride % 4 !== 0) throw new Error('batchDecodeAttention: outStride must be a multiple of 4 floats');
  assertFits(out, ((batch.maxRows - 1) * batch.outStride + qDim) * 4, 'batchDecodeAttention out');
  assertFits(qkv, ((batch.maxRows - 1) * batch.qkvStride + qDim + 2 * kvDim) * 4, 'batchDecodeAttention qkv');
  assertFits(invFreq, (rotaryDims / 2) * 4, 'batchDecodeAttention invFreq');
  const ring = shape.ring;
  checkShapeRing(shape, 1, 'batchDecodeAttention');
  if (ring && ring.rows !== batch.slotRows) throw new Error(`batchDecodeAttention: a ring of ${ring.rows} rows in slots of ${batch.slotRows}`);
  const rows = ring ? ring.positions : batch.slotRows;
  if (split) assertCount(split.chunkKeys, 'batchDecodeAttention chunkKeys');
  // As planDecodeAttention: out, qkv, caches, invFreq, the rows, and the partials and gammas when bound.
  const unsplit = 6 + (qkNorm ? 2 : 0);
  const maxStorage = kernels.ctx.limits.maxStorageBuffersPerShaderStage;
  if (unsplit > maxStorage) throw new Error(`batchDecodeAttention binds ${unsplit} storage buffers, the device ${maxStorage}`);
  const chunkKeys = split && unsplit < maxStorage ? split.chunkKeys : rows;
  const positionChunks = Math.ceil(rows / chunkKeys);
  if (positionChunks > 1 && !split) throw new Error('batchDecodeAttention: several chunks need a partials buffer');
  const chunks =
    ring && positionChunks > 1 ? Math.min(positionChunks, Math.max(2, Math.ceil((slidingWindow! - 1) / chunkKeys) + 1)) : positionChunks;
  if (chunks > 1 && split) assertFits(split.partials, batch.maxRows * numHeads * chunks * (headDim + 2) * 4, 'batchDecodeAttention partials');
  const { scale, softcap } = scoreParams(shape);
  const features: DecodeAttentionFeatures = {
    softcap: shape.softcap !== undefined,
    rope: rotaryDims !== headDim || magnitude !== 1,
    qkNorm: !!qkNorm,
    ring: ring?.rows,
  };
  const threads = kernels.tuning.decodeAttentionThreads;
  const heads = kernels.tuning.attentionHeads(numHeads / numKvHeads, headDim);
  const params = BATCH_DECODE_ATTENTION_PARAMS.pack({
    start_pos: 0,
    num_heads: numHeads,
    num_kv_heads: numKvHeads,
    head_dim: headDim,
    scale,
    window: slidingWindow ?? 0,
    chunk_keys: chunkKeys,
    num_chunks: chunks,
    pairing: ropePairingCode(pairing),
    softcap,
    rotary_dims: rotaryDims,
    magnitude,
    qk_eps: qkNorm?.eps ?? 0,
    slot_rows: batch.slotRows,
    qkv_stride: batch.qkvStride,
    out_stride: batch.outStride,
    positions: rows,
  });
  const splitNow = chunks > 1;
  const bound: Record<number, GPUBuffer> = { 1: out, 2: qkv, 3: kCache, 4: vCache, 6: invFreq, [BATCH_ATTENTION_ROWS_BINDING]: batch.rows };
  if (splitNow && split) bound[5] = split.partials;
  if (qkNorm) {
    bound[DECODE_QK_NORM_BINDINGS.q] = qkNorm.q;
    bound[DECODE_QK_NORM_BINDINGS.k] = qkNorm.k;
  }
  const variant = { headDim, kvDType, split: splitNow, threads, heads, ...features };
  const dispatches: PlannedDispatch[] = [
    {
      pipeline: kernels.batchDecodeAttentionPipeline({ ...variant, entry: 'main' }),
      params,
      buffers: bound,
      workgroups: Math.ceil((batch.maxRows * (numHeads / heads) * chunks) / threads),
    },
  ];
  if (splitNow && split) {
    dispatches.push({
      pipeline: kernels.batchDecodeAttentionPipeline({ ...variant, entry: 'combine' }),
      params,
      buffers: { 1: out, 5: split.partials, [BATCH_ATTENTION_ROWS_BINDING]: batch.rows },
      workgroups: Math.ceil((batch.maxRows * numHeads * headDim) / 64),
    });
  }
  return dispatches;
}
