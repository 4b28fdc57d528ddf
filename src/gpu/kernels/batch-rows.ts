// The rows of a batched decode step (continuous batching) as the kernels read them: a small u32
// buffer of the row count, then each row's position and K/V slot. The batched kernels read the
// count at run time (one pipeline for every batch size) and loop over the rows, or index their
// grids by row; `advance_rows` moves every row to its next position, on the GPU, at the end of a step.
// With them, the batch-only kernels' planning: the rows' embedding, greedy pick and advance
// (KernelRecorder.batchEmbedding, batchGreedy, advanceBatchRows).
import type { PipelineCache, ShaderSpec } from '../pipelines.ts';
import type { GpuMatrix, WeightDType } from '../tensor.ts';
import { paramStruct, type PlannedDispatch } from '../uniforms.ts';
import { checkWeightShape } from '../weight-formats.ts';
import { assertCount, assertFits } from './checks.ts';
import { ELEMENTWISE_WORKGROUP } from './elementwise.ts';
import { EMBEDDING_PARAMS, WEIGHT_BINDING, weightKernelSpec } from './weights.ts';
import batchGreedyWgsl from '../../../shaders/batch_greedy.wgsl?raw';
import greedyPickWgsl from '../../../shaders/greedy_pick.wgsl?raw';

/** u32 words before the rows: the row count, then padding. */
export const BATCH_ROWS_HEADER = 4;

/** Bytes of a rows buffer for up to maxRows rows. */
export const batchRowsBytes = (maxRows: number) => (BATCH_ROWS_HEADER + 2 * maxRows) * 4;

/** The words of a rows buffer holding `rows` (count, padding, then (position, slot) a row). */
export function packBatchRows(rows: readonly { position: number; slot: number }[]): Uint32Array<ArrayBuffer> {
  const words = new Uint32Array(BATCH_ROWS_HEADER + 2 * rows.length);
  words[0] = rows.length;
  rows.forEach((r, i) => {
    words[BATCH_ROWS_HEADER + 2 * i] = r.position;
    words[BATCH_ROWS_HEADER + 2 * i + 1] = r.slot;
  });
  return words;
}

/**
 * `batch_count()`, `batch_position(r)` and `batch_slot(r)` over the rows buffer at `binding`, read
 * only (a read-only storage value is uniform, so a loop over the rows may hold barriers).
 */
export function batchRowsWgsl(binding: number): string {
  return (
    `@group(0) @binding(${binding}) var<storage, read> batch_rows: array<u32>;\n` +
    'fn batch_count() -> u32 { return batch_rows[0]; }\n' +
    `fn batch_position(r: u32) -> u32 { return batch_rows[${BATCH_ROWS_HEADER}u + 2u * r]; }\n` +
    `fn batch_slot(r: u32) -> u32 { return batch_rows[${BATCH_ROWS_HEADER + 1}u + 2u * r]; }\n`
  );
}

/** advance_rows: every row's position one further (one thread; at most a few hundred rows). */
export const ADVANCE_ROWS_SPEC: ShaderSpec = {
  code:
    'struct Params { max_rows: u32 }\n@group(0) @binding(0) var<uniform> params: Params;\n' +
    '@group(0) @binding(1) var<storage, read_write> batch_rows: array<u32>;\n' +
    '@compute @workgroup_size(1)\nfn main() {\n  let n = min(batch_rows[0], params.max_rows);\n' +
    `  for (var r = 0u; r < n; r++) {\n    let i = ${BATCH_ROWS_HEADER}u + 2u * r;\n    batch_rows[i] = batch_rows[i] + 1u;\n  }\n}\n`,
  entryPoint: 'main',
};

/**
 * embedding.wgsl over rows whose tokens are `tokenStride` u32 words apart (each at its own
 * storage-binding offset, where a sampler writes it): params.T rows, row t's token at t * stride.
 */
export function batchEmbeddingSpec(dtype: WeightDType, tokenStride: number): ShaderSpec {
  const spec = weightKernelSpec('embedding', dtype, { hasBias: false, aligned: false });
  const code = spec.code.replace('let token = tokens[t];', `let token = tokens[t * ${tokenStride}u];`);
  if (code === spec.code) throw new Error('embedding.wgsl no longer reads `let token = tokens[t];`');
  return { ...spec, code };
}
export const batchEmbeddingKey = (dtype: WeightDType, tokenStride: number) => `embedding/${dtype}/batch_stride${tokenStride}`;
/** advance_rows's Params. */
export const ADVANCE_ROWS_PARAMS = paramStruct({ max_rows: 'u32' });

/** batch_greedy.wgsl: every row's greedy pick (greedy_pick.wgsl) and its record (one workgroup a row). */
export const BATCH_GREEDY_SPEC: ShaderSpec = { code: `${batchRowsWgsl(4)}\n${greedyPickWgsl}\n${batchGreedyWgsl}`, entryPoint: 'main' };
/** batch_greedy.wgsl's Params. */
export const BATCH_GREEDY_PARAMS = paramStruct({ vocab: 'u32', stride: 'u32', token_stride: 'u32', slots: 'u32' });
/** Bytes of one greedy record (u32 id, f32 logprob, zeros), as the decode layers' (DECODE_RECORD_BYTES). */
export const BATCH_RECORD_BYTES = 16;

/** What the batch-only kernels' plans read of the device's kernels (KernelRegistry has it). */
export interface BatchRowsKernels {
  readonly pipelines: PipelineCache;
}

/** The dispatch of KernelRecorder.batchEmbedding, checked. */
export function planBatchEmbedding(
  kernels: BatchRowsKernels,
  out: GPUBuffer,
  table: GpuMatrix,
  tokens: GPUBuffer,
  rows: number,
  tokenStride: number,
  scale: number,
): PlannedDispatch {
  assertCount(rows, 'batchEmbedding rows');
  assertCount(tokenStride, 'batchEmbedding tokenStride');
  if (!Number.isFinite(scale)) throw new Error(`embedding scale must be a finite number, got ${scale}`);
  if (table.parts) throw new Error('batchEmbedding takes a whole table');
  checkWeightShape(table.dtype, table.rows, table.cols, 'embedding table');
  assertFits(out, rows * table.cols * 4, 'batchEmbedding out');
  assertFits(tokens, ((rows - 1) * tokenStride + 1) * 4, 'batchEmbedding tokens');
  const pipeline = kernels.pipelines.get(batchEmbeddingKey(table.dtype, tokenStride), () => batchEmbeddingSpec(table.dtype, tokenStride));
  const n = rows * table.cols;
  return {
    pipeline,
    params: EMBEDDING_PARAMS.pack({ T: rows, cols: table.cols, vocab: table.rows, first_row: 0, part_rows: table.rows, scale }),
    buffers: { 1: out, 2: tokens, [WEIGHT_BINDING]: table.buffer },
    workgroups: Math.ceil(n / ELEMENTWISE_WORKGROUP),
  };
}

/** The buffers of a batched greedy pick (KernelRecorder.batchGreedy). */
export interface BatchGreedyBuffers {
  logits: GPUBuffer;
  tokens: GPUBuffer;
  records: GPUBuffer;
  rows: GPUBuffer;
}
/** The sizes of a batched greedy pick (KernelRecorder.batchGreedy): rows, logits a row, and the strides and record slots. */
export interface BatchGreedyShape {
  maxRows: number;
  vocab: number;
  stride: number;
  tokenStride: number;
  slots: number;
}

/** The dispatch of KernelRecorder.batchGreedy (batch_greedy.wgsl), checked: one workgroup a row of maxRows. */
export function planBatchGreedy(kernels: BatchRowsKernels, io: BatchGreedyBuffers, shape: BatchGreedyShape): PlannedDispatch {
  const { maxRows, vocab, stride, tokenStride, slots } = shape;
  for (const [n, what] of [[maxRows, 'maxRows'], [vocab, 'vocab'], [stride, 'stride'], [tokenStride, 'tokenStride'], [slots, 'slots']] as const) {
    assertCount(n, `batchGreedy ${what}`);
  }
  assertFits(io.logits, ((maxRows - 1) * stride + vocab) * 4, 'batchGreedy logits');
  assertFits(io.tokens, ((maxRows - 1) * tokenStride + 1) * 4, 'batchGreedy tokens');
  assertFits(io.records, maxRows * slots * BATCH_RECORD_BYTES, 'batchGreedy records');
  assertFits(io.rows, batchRowsBytes(maxRows), 'batchGreedy rows');
  return {
    pipeline: kernels.pipelines.get('batch_greedy', () => BATCH_GREEDY_SPEC),
    params: BATCH_GREEDY_PARAMS.pack({ vocab, stride, token_stride: tokenStride, slots }),
    buffers: { 1: io.logits, 2: io.tokens, 3: io.records, 4: io.rows },
    workgroups: [maxRows, 1],
  };
}

/** The dispatch of KernelRecorder.advanceBatchRows (advance_rows), checked. */
export function planAdvanceBatchRows(kernels: BatchRowsKernels, rows: GPUBuffer, maxRows: number): PlannedDispatch {
  assertFits(rows, batchRowsBytes(maxRows), 'advanceBatchRows rows');
  return {
    pipeline: kernels.pipelines.get('advance_rows', () => ADVANCE_ROWS_SPEC),
    params: ADVANCE_ROWS_PARAMS.pack({ max_rows: maxRows }),
    buffers: { 1: rows },
    workgroups: 1,
  };
}
