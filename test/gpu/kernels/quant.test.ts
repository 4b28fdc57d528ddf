// The weight-reading kernels (embedding, matvec, matmul) over ggml's block-quantized types, decoded
// from their blocks in the shader, against the CPU reference on the dequantized weights
// (test/reference/quant.ts). Rows are not multiples of the workgroups, T not a multiple of 4.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../../src/gpu/device.ts';
import type { QuantDType } from '../../../src/gpu/tensor.ts';
import { Kernels, TILED_MATMUL_SHAPE } from '../../../src/gpu/kernels/index.ts';
import { createF32Buffer, createStorageBuffer, createU32Buffer, createWeightMatrix, readBufferF32 } from '../../../src/gpu/buffers.ts';
import { QUANT_FORMATS } from '../../../src/gpu/weight-formats.ts';
import { testGpu } from '../../helpers/gpu.ts';
import { randomF32 } from '../../helpers/prng.ts';
import { embeddingRef, matmulRef } from '../../reference/cpu-ops.ts';
import { dequantize } from '../../reference/quant.ts';
import { quantizeValues as quantize } from '../../../src/model/quantize.ts';
import { expectClose } from '../../helpers/compare.ts';

const QUANT_DTYPES: QuantDType[] = ['q8_0', 'q4_0', 'q4_1', 'q5_0', 'q5_1', 'q4_k', 'q5_k', 'q6_k'];

let ctx: GpuContext;
let device: GPUDevice;
let kernels: Kernels;
const created: GPUBuffer[] = [];
const track = <B extends GPUBuffer>(b: B): B => (created.push(b), b);

beforeAll(async () => {
  ctx = await testGpu();
  device = ctx.device;
  // Compiles the quantized embedding / matmul pipelines up front (the async path); matvec and the bias variants lazily.
  kernels = await Kernels.create(ctx, { weightDTypes: QUANT_DTYPES });
});

afterAll(() => {
  for (const b of created) b.destroy();
});

/** A random [rows, cols] matrix quantized to `dtype` on the GPU, and the values its blocks hold. */
function quantMatrix(dtype: QuantDType, rows: number, cols: number, seed: number) {
  // Per-row scales that differ, so a row or block mix-up shows.
  const values = randomF32(rows * cols, seed);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) values[r * cols + c] *= 0.2 + (r % 7) * 0.3;
  const bytes = quantize(dtype, values);
  const W = createWeightMatrix(device, bytes, dtype, rows, cols, `W ${dtype}`);
  track(W.buffer);
  return { W, held: dequantize(dtype, bytes, rows * cols) };
}

/** Columns for a test: a few blocks (K-quants: 2 blocks of 256 = 512, which also takes matvec's team path). */
const colsOf = (dtype: QuantDType) => (QUANT_FORMATS[dtype].blockSize === 256 ? 512 : 96);

describe('quantized weights: embedding', () => {
  for (const dtype of QUANT_DTYPES) {
    it(`${dtype}: rows decode to the CPU reference`, async () => {
      const vocab = 13;
      const cols = colsOf(dtype);
      const { W, held } = quantMatrix(dtype, vocab, cols, 5);
      const ids = [vocab - 1, 0, 7, 3, 7];
      const tokens = track(createU32Buffer(device, Uint32Array.from(ids), 'tokens'));
      const out = track(createStorageBuffer(device, ids.length * cols * 4, 'out'));
      const batch = kernels.begin();
      batch.embedding(out, W, tokens, ids.length);
      batch.submit();
      const got = await readBufferF32(device, out, ids.length * cols);
      // The same f32 products as the reference; only a fused multiply-add may differ in the last bit.
      expectClose(got, embeddingRef(held, cols, ids), 1e-6);
    });
  }
});

describe('quantized weights: matvec (T=1) and matmul (T>1)', () => {
  for (const dtype of QUANT_DTYPES) {
    for (const T of [1, 3, 17]) {
      it(`${dtype}, T=${T}, rows=37`, async () => {
        const rows = 37;
        const cols = colsOf(dtype);
        const { W, held } = quantMatrix(dtype, rows, cols, 11 + T);
        const xs = randomF32(T * cols, 100 + T);
        const x = track(createF32Buffer(device, xs, 'x'));
        const y = track(createStorageBuffer(device, T * rows * 4, 'y'));
        const bias = randomF32(rows, 3);
        const b = track(createF32Buffer(device, bias, 'bias'));
        const batch = kernels.begin();
        batch.matmul(y, x, W, T, b);
        batch.submit();
        expectClose(await readBufferF32(device, y, T * rows), matmulRef(xs, held, T, rows, cols, bias), 1e-4);
      });
    }
  }

  // GPUs' tiled prefill matmul (shared-memory tiles; K steps of 16 inside the blocks).
  for (const dtype of QUANT_DTYPES) {
    it(`${dtype}, T=70, rows=37, tiled`, async () => {
      const [T, rows, cols] = [70, 37, colsOf(dtype)];
      const { W, held } = quantMatrix(dtype, rows, cols, 60);
      const xs = randomF32(T * cols, 61);
      const y = track(createStorageBuffer(device, T * rows * 4, 'y'));
      const tiled = await Kernels.create(ctx, { tuning: { matmulShape: () => TILED_MATMUL_SHAPE } });
      const batch = tiled.begin();
      batch.matmul(y, track(createF32Buffer(device, xs, 'x')), W, T);
      batch.submit();
      expectClose(await readBufferF32(device, y, T * rows), matmulRef(xs, held, T, rows, cols), 1e-4);
    });
  }

  // Rows a run (dot_run: a block of the 32-weight types, a sub-block of 32 of a K-quant) at a time, as CPU
  // adapters walk them, and a load_weight4 at a time, as GPUs do; long rows take matvec's team
  // path (lanes split K by runs).
  for (const dtype of QUANT_DTYPES) {
    for (const runs of [true, false]) {
      for (const cols of QUANT_FORMATS[dtype].blockSize === 256 ? [256, 1280] : [96, 1024]) {
        it(`${dtype} matvec ${runs ? 'by runs' : 'by 4 weights'}, ${cols} cols`, async () => {
          const rows = 21;
          const { W, held } = quantMatrix(dtype, rows, cols, 40 + cols);
          const xs = randomF32(cols, 41);
          const y = track(createStorageBuffer(device, rows * 4, 'y'));
          const batch = (await Kernels.create(ctx, { tuning: { weightRuns: runs } })).begin();
          batch.matmul(y, track(createF32Buffer(device, xs, 'x')), W, 1);
          batch.submit();
          expectClose(await readBufferF32(device, y, rows), matmulRef(xs, held, 1, rows, cols), 1e-4);
        });
      }
    }
  }

  it('refuses a quantized matrix whose rows are not whole blocks', () => {
    expect(() => createWeightMatrix(device, new Uint8Array(34 * 3), 'q8_0', 2, 48, 'bad')).toThrow(/multiple of 32/);
    const W = { buffer: track(createStorageBuffer(device, 1024, 'w')), dtype: 'q4_k' as const, rows: 2, cols: 128 };
    const x = track(createStorageBuffer(device, 1024, 'x'));
    const y = track(createStorageBuffer(device, 1024, 'y'));
    expect(() => kernels.begin().matmul(y, x, W, 1)).toThrow(/multiple of 256/);
  });
});
