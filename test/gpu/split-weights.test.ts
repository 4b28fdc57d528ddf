// Weight matrices split into buffers of whole rows (GpuMatrix.parts: what the upload does for a
// tensor over the device's maxStorageBufferBindingSize / maxBufferSize), forced with tiny parts:
// the kernels against the CPU reference, the row splitting and its plan, and whole models uploaded
// under tiny limits against CpuLlama.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import type { GpuMatrix, GpuMatrixPart, WeightDType } from '../../src/gpu/tensor.ts';
import { Kernels } from '../../src/gpu/kernels/index.ts';
import { createF32Buffer, createStorageBuffer, createU32Buffer, createWeightMatrix, readBufferF32 } from '../../src/gpu/buffers.ts';
import { splitMatrixRows, weightRowBytes } from '../../src/gpu/weight-layout.ts';
import { checkTensorFits } from '../../src/model/weights.ts';
import { testGpu } from '../helpers/gpu.ts';
import { randomF32 } from '../helpers/prng.ts';
import { f16BitsToF32, f32ToF16Bits, matmulRef } from '../reference/cpu-ops.ts';
import { dequantize } from '../reference/quant.ts';
import { quantizeValues as quantize } from '../../src/model/quantize.ts';
import { expectClose } from '../helpers/compare.ts';

const DTYPES = ['f32', 'f16', 'q8_0'] as const;
type SplitDType = (typeof DTYPES)[number];

let ctx: GpuContext;
let device: GPUDevice;
let kernels: Kernels;
const created: GPUBuffer[] = [];
const track = <B extends GPUBuffer>(b: B): B => (created.push(b), b);

beforeAll(async () => {
  ctx = await testGpu();
  device = ctx.device;
  kernels = await Kernels.create(ctx, { weightDTypes: [...DTYPES] });
});

afterAll(() => {
  for (const b of created) b.destroy();
});

/** Columns per dtype: not a multiple of 4 for the float types (the unaligned loads), 3 blocks for q8_0. */
const colsOf = (dtype: SplitDType) => (dtype === 'q8_0' ? 96 : 45);

/**
 * A random [rows, cols] matrix in `dtype`, stored as parts of `partRows` rows (the last one the
 * rest), each its own buffer; and the values it holds.
 */
function splitMatrix(dtype: SplitDType, rows: number, cols: number, partRows: number, seed: number): { W: GpuMatrix; held: Float32Array } {
  const values = randomF32(rows * cols, seed);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) values[r * cols + c] *= 0.2 + (r % 7) * 0.3;
  let bytes: Uint8Array;
  let held: Float32Array;
  if (dtype === 'f32') {
    bytes = new Uint8Array(values.buffer);
    held = values;
  } else if (dtype === 'f16') {
    const bits = Uint16Array.from(values, f32ToF16Bits);
    bytes = new Uint8Array(bits.buffer);
    held = Float32Array.from(bits, f16BitsToF32);
  } else {
    bytes = quantize(dtype, values);
    held = dequantize(dtype, bytes, rows * cols);
  }
  const rowBytes = weightRowBytes(dtype as WeightDType, cols);
  const parts: GpuMatrixPart[] = [];
  for (let first = 0; first < rows; first += partRows) {
    const n = Math.min(partRows, rows - first);
    const slice = bytes.slice(first * rowBytes, (first + n) * rowBytes);
    const part = createWeightMatrix(device, slice, dtype, n, cols, `W ${dtype} rows ${first}..`);
    track(part.buffer);
    parts.push({ buffer: part.buffer, firstRow: first, rows: n });
  }
  return { W: { buffer: parts[0].buffer, dtype, rows, cols, parts }, held };
}

describe('kernels over a matrix split into row ranges', () => {
  for (const dtype of DTYPES) {
    for (const T of [1, 5]) {
      it(`${dtype}: matmul T=${T}, 37 rows in parts of 7, with bias`, async () => {
        const [rows, cols] = [37, colsOf(dtype)];
        const { W, held } = splitMatrix(dtype, rows, cols, 7, 3 + T);
        expect(W.parts).toHaveLength(6);
        const xs = randomF32(T * cols, 50 + T);
        const bias = randomF32(rows, 7);
        const x = track(createF32Buffer(device, xs, 'x'));
        const b = track(createF32Buffer(device, bias, 'bias'));
        const y = track(createStorageBuffer(device, T * rows * 4, 'y'));
        const batch = kernels.begin();
        batch.matmul(y, x, W, T, b);
        batch.submit();
        expectClose(await readBufferF32(device, y, T * rows), matmulRef(xs, held, T, rows, cols, bias), 1e-4);
      });
    }

    it(`${dtype}: embedding gathers each token from its part (ids past the table give zeros)`, async () => {
      const [vocab, cols] = [37, colsOf(dtype)];
      const { W, held } = splitMatrix(dtype, vocab, cols, 7, 21);
      const ids = [36, 0, 6, 7, 13, 14, 35, 40, 28, 7];
      const tokens = track(createU32Buffer(device, Uint32Array.from(ids), 'tokens'));
      const out = track(createStorageBuffer(device, ids.length * cols * 4, 'out'));
      const batch = kernels.begin();
      batch.embedding(out, W, tokens, ids.length);
      batch.submit();
      const want = new Float32Array(ids.length * cols);
      ids.forEach((id, t) => {
        if (id < vocab) want.set(held.subarray(id * cols, (id + 1) * cols), t * cols);
      });
      expectClose(await readBufferF32(device, out, ids.length * cols), want, 1e-6);
    });
  }

  it('refuses parts that do not cover the rows in order', () => {
    const { W } = splitMatrix('f32', 37, 45, 7, 1);
    const y = track(createStorageBuffer(device, 37 * 4, 'y'));
    const x = track(createF32Buffer(device, randomF32(45, 2), 'x'));
    const gap = { ...W, parts: W.parts!.filter((_, i) => i !== 2) };
    expect(() => kernels.begin().matmul(y, x, gap, 1)).toThrow(/consecutive/);
    const short = { ...W, parts: W.parts!.slice(0, -1) };
    expect(() => kernels.begin().matmul(y, x, short, 1)).toThrow(/cover 35 of 37 rows/);
  });
});

describe('splitting a matrix over the buffer limits', () => {
  it('cuts whole rows, as many per part as the limit allows, each part within it', () => {
    // q8_0 rows of 96 weights: 3 blocks, 102 bytes; 1000 bytes hold 9 rows (918 bytes, padded to 920).
    expect(weightRowBytes('q8_0', 96)).toBe(102);
    const parts = splitMatrixRows('q8_0', 40, 96, 1000)!;
    expect(parts.map((p) => p.rows)).toEqual([9, 9, 9, 9, 4]);
    expect(parts.map((p) => p.bytes)).toEqual([920, 920, 920, 920, 408]);
    // f16 with an odd number of columns: 7 rows of 45 = 630 bytes, padded to 632; the limit 631 leaves 6.
    expect(splitMatrixRows('f16', 37, 45, 632)!.map((p) => p.rows)).toEqual([7, 7, 7, 7, 7, 2]);
    expect(splitMatrixRows('f16', 37, 45, 631)!.map((p) => p.rows)).toEqual([6, 6, 6, 6, 6, 6, 1]);
    expect(splitMatrixRows('f32', 37, 45, 37 * 45 * 4)).toBeUndefined(); // fits whole
    expect(splitMatrixRows('f32', 37, 45, 179)).toBeUndefined(); // not even one row fits
  });

  it('refuses only a tensor whose parts (a single row) are over the limit', () => {
    const limits = { maxStorageBufferBindingSize: 1000, maxBufferSize: 2 ** 31 };
    expect(() => checkTensorFits('w', { dtype: 'q8_0', bytes: 4088, parts: splitMatrixRows('q8_0', 40, 96, 1000) }, limits)).not.toThrow();
    expect(() => checkTensorFits('w', { dtype: 'f32', bytes: 4000 }, limits)).toThrow(/Tensor w needs a 4000-byte GPU buffer/);
  });
});
