// Driven by test/browser/kernels-smoke.spec.ts: runs each kernel in the browser's WebGPU on small
// random inputs and reports its largest difference from the CPU reference (test/reference).
// The Node tests hold the kernels to the same reference under Dawn; this page checks that the
// browser's WGSL compiler and driver agree too.
import { acquireDevice } from '../../src/gpu/device.ts';
import { mulberry32 } from '../../test/helpers/prng.ts';
import { Kernels } from '../../src/gpu/kernels/index.ts';
import { createF32Buffer, createStorageBuffer, createWeightMatrix, readBufferF32 } from '../../src/gpu/buffers.ts';
import type { WeightDType } from '../../src/gpu/tensor.ts';
import {
  attentionRef,
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  matmulRef,
  packHalves,
  rmsNormRef,
  ropeInvFreq,
  ropeRef,
} from '../../test/reference/cpu-ops.ts';

export interface KernelCheck {
  name: string;
  /** Largest |gpu - cpu| over the output. */
  maxAbsError: number;
  /** Largest |cpu| over the output, for scale. */
  maxAbsRef: number;
}

/** Deterministic values in [-scale, scale), so failures reproduce. */
function random(seed: number): (scale?: number) => number {
  const next = mulberry32(seed);
  return (scale = 1) => (next() * 2 - 1) * scale;
}

function compare(name: string, gpu: Float32Array, cpu: Float32Array): KernelCheck {
  if (gpu.length < cpu.length) throw new Error(`${name}: GPU gave ${gpu.length} values, CPU ${cpu.length}`);
  let maxAbsError = 0;
  let maxAbsRef = 0;
  for (let i = 0; i < cpu.length; i++) {
    const err = Math.abs(gpu[i] - cpu[i]);
    maxAbsError = Number.isNaN(err) ? Infinity : Math.max(maxAbsError, err);
    maxAbsRef = Math.max(maxAbsRef, Math.abs(cpu[i]));
  }
  return { name, maxAbsError, maxAbsRef };
}

/** Weights in the storage layout of `dtype`, and the f32 values the GPU will actually read. */
function weightData(w: Float32Array, dtype: WeightDType): { data: Float32Array | Uint32Array; values: Float32Array } {
  if (dtype === 'f32') return { data: w, values: w };
  const [toBits, fromBits] = dtype === 'f16' ? [f32ToF16Bits, f16BitsToF32] : [f32ToBf16Bits, bf16BitsToF32];
  const bits = Uint16Array.from(w, toBits);
  const values = Float32Array.from(bits, fromBits);
  return { data: packHalves(bits), values };
}

async function runKernelChecks(): Promise<KernelCheck[]> {
  const ctx = await acquireDevice(navigator.gpu);
  const { device } = ctx;
  const kernels = await Kernels.create(ctx);
  const rand = random(1234);
  const randArray = (n: number, scale = 1) => Float32Array.from({ length: n }, () => rand(scale));
  const output = (elements: number, label: string) => createStorageBuffer(device, elements * 4, label);
  const checks: KernelCheck[] = [];

  // rmsNorm: T = 3 rows of 72 (not a multiple of any workgroup size).
  {
    const T = 3, dim = 72, eps = 1e-5;
    const x = randArray(T * dim, 2);
    const gamma = randArray(dim);
    const out = output(T * dim, 'rmsnorm out');
    const b = kernels.begin();
    b.rmsNorm(out, createF32Buffer(device, x, 'x'), createF32Buffer(device, gamma, 'gamma'), T, dim, eps);
    b.submit();
    checks.push(compare('rmsNorm', await readBufferF32(device, out, T * dim), rmsNormRef(x, gamma, T, dim, eps)));
  }

  // matmul: one token (matvec) and five (tiled), each weight storage type, with and without bias.
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    for (const T of [1, 5]) {
      const rows = 40, cols = 72;
      const x = randArray(T * cols);
      const w = weightData(randArray(rows * cols, 0.5), dtype);
      const bias = dtype === 'f32' ? randArray(rows) : undefined;
      const W = createWeightMatrix(device, w.data, dtype, rows, cols, `W ${dtype}`);
      const y = output(T * rows, 'matmul y');
      const b = kernels.begin();
      b.matmul(y, createF32Buffer(device, x, 'x'), W, T, bias && createF32Buffer(device, bias, 'bias'));
      b.submit();
      checks.push(
        compare(`matmul ${dtype} T=${T}${bias ? ' +bias' : ''}`, await readBufferF32(device, y, T * rows), matmulRef(x, w.values, T, rows, cols, bias)),
      );
    }
  }

  // rope: both pairings, at a start position past 0.
  for (const pairing of ['adjacent', 'halves'] as const) {
    const T = 4, numHeads = 3, headDim = 16, startPos = 37;
    const x = randArray(T * numHeads * headDim);
    const invFreq = ropeInvFreq(headDim, 10000);
    const xBuf = createF32Buffer(device, x, 'x');
    const b = kernels.begin();
    b.rope(xBuf, createF32Buffer(device, invFreq, 'inv_freq'), { T, startPos }, { heads: numHeads, headDim, pairing });
    b.submit();
    checks.push(
      compare(`rope ${pairing}`, await readBufferF32(device, xBuf, x.length), ropeRef(x, T, numHeads, headDim, startPos, invFreq, pairing)),
    );
  }

  // attention: grouped-query (4 heads over 2 KV heads), a prefill of 5 after 3 cached positions,
  // then one decode step.
  for (const [T, startPos] of [[5, 3], [1, 8]]) {
    const numHeads = 4, numKvHeads = 2, headDim = 16;
    const positions = startPos + T;
    const q = randArray(T * numHeads * headDim);
    const kCache = randArray(positions * numKvHeads * headDim);
    const vCache = randArray(positions * numKvHeads * headDim);
    const out = output(T * numHeads * headDim, 'attention out');
    const b = kernels.begin();
    b.attention(
      {
        out,
        q: createF32Buffer(device, q, 'q'),
        keys: createF32Buffer(device, kCache, 'k cache'),
        values: createF32Buffer(device, vCache, 'v cache'),
      },
      { T, startPos },
      { heads: numHeads, kvHeads: numKvHeads, headDim },
    );
    b.submit();
    checks.push(
      compare(
        `attention T=${T} startPos=${startPos}`,
        await readBufferF32(device, out, T * numHeads * headDim),
        attentionRef(q, kCache, vCache, T, startPos, numHeads, numKvHeads, headDim),
      ),
    );
  }

  device.destroy();
  document.getElementById('results')!.textContent = JSON.stringify(checks, null, 2);
  return checks;
}

Object.assign(window, { runKernelChecks });
