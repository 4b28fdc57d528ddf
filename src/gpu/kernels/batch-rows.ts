// The rows of a batched decode step (continuous batching) as the kernels read them: a small u32
// buffer of the row count, then each row's position and K/V slot. The batched kernels read the
// count at run time (one pipeline for every batch size) and loop over the rows, or index their
// grids by row; `advance_rows` moves every row to its next position, on the GPU, at the end of a step.
import type { ShaderSpec } from '../pipelines.ts';
import type { WeightDType } from '../tensor.ts';
import { paramStruct } from '../uniforms.ts';
import { weightKernelSpec } from './weights.ts';
import batchGreedyWgsl from '../../../shaders/batch_greedy.wgsl?raw';

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

/** batch_greedy.wgsl: every row's greedy pick and its record (one workgroup a row). */
export const BATCH_GREEDY_SPEC: ShaderSpec = { code: `${batchRowsWgsl(4)}\n${batchGreedyWgsl}`, entryPoint: 'main' };
/** batch_greedy.wgsl's Params. */
export const BATCH_GREEDY_PARAMS = paramStruct({ vocab: 'u32', stride: 'u32', token_stride: 'u32', slots: 'u32' });
/** Bytes of one greedy record (u32 id, f32 logprob, zeros), as the decode layers' (DECODE_RECORD_BYTES). */
export const BATCH_RECORD_BYTES = 16;
