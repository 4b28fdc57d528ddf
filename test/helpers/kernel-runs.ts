// What the kernel tests (test/gpu/kernels/, test/gpu/weight-formats.test.ts) share: the test GPU
// and its Kernels, compiled once per file by useKernelGpu(), and small helpers that upload inputs,
// allocate outputs and read results back, destroying every buffer they made after the file's tests.
//
// ctx, device and kernels are live bindings: set in the beforeAll that useKernelGpu() registers,
// read inside the tests.
import { afterAll, beforeAll, expect } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import type { GpuMatrix, WeightDType } from '../../src/gpu/tensor.ts';
import { Kernels, type KernelTuning } from '../../src/gpu/kernels/index.ts';
import { createF32Buffer, createStorageBuffer, createWeightMatrix, readBufferF32 } from '../../src/gpu/buffers.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, packHalves } from '../reference/cpu-ops.ts';
import { testGpu } from './gpu.ts';

export const DTYPES: WeightDType[] = ['f32', 'f16', 'bf16'];

export let ctx: GpuContext;
export let device: GPUDevice;
export let kernels: Kernels;
const created: GPUBuffer[] = [];

/**
 * Registers the calling test file's beforeAll (the test GPU, and Kernels with every weight format
 * compiled) and afterAll (destroys the buffers made through track). Call once, at the top level.
 */
export function useKernelGpu(): void {
  beforeAll(async () => {
    ctx = await testGpu();
    device = ctx.device;
    // Compile the weight-format variants up front too (the async path); the bias ones compile lazily.
    kernels = await Kernels.create(ctx, { weightDTypes: DTYPES });
  });

  afterAll(() => {
    for (const b of created) b.destroy();
    created.length = 0;
  });
}

export function track<B extends GPUBuffer>(b: B): B {
  created.push(b);
  return b;
}
export const input = (data: Float32Array, label = 'input') => track(createF32Buffer(device, data, label));
export const output = (floats: number, label = 'output') => track(createStorageBuffer(device, floats * 4, label));
export const read = (b: GPUBuffer, floats: number) => readBufferF32(device, b, floats);

/**
 * Uploads `values` as a [rows, cols] weight matrix in `dtype`, and returns the values it really
 * holds (rounded to f16/bf16), which is what the reference must compute with.
 */
export function weightMatrix(values: Float32Array, rows: number, cols: number, dtype: WeightDType): { W: GpuMatrix; held: Float32Array } {
  if (dtype === 'f32') {
    const W = createWeightMatrix(device, values, dtype, rows, cols, 'W f32');
    track(W.buffer);
    return { W, held: Float32Array.from(values) };
  }
  const toBits = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  const fromBits = dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  const bits = Uint16Array.from(values, toBits);
  const W = createWeightMatrix(device, packHalves(bits), dtype, rows, cols, `W ${dtype}`);
  track(W.buffer);
  return { W, held: Float32Array.from(bits, fromBits) };
}

/** Kernels on the test device with some of its choices replaced (undefined entries keep the device's). */
export function tuned(tuning: Partial<KernelTuning>): Promise<Kernels> {
  return Kernels.create(ctx, { weightDTypes: DTYPES, tuning });
}

export async function expectNoGpuErrors(work: () => Promise<void>): Promise<void> {
  device.pushErrorScope('validation');
  await work();
  const error = await device.popErrorScope();
  expect(error?.message ?? null).toBeNull();
}
