// The fused decode kernels (fused_matvec.wgsl; decode_attention.wgsl with attention.wgsl's
// split_combine) against the
// plain CPU reference (test/reference/cpu-ops.ts) on seeded random data: every weight storage type
// (quantized ones decoded from their blocks), matrices split into row ranges (GpuMatrix.parts),
// columns that are and are not multiples of 4, and every matvec team reduction.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../../src/gpu/device.ts';
import type { GpuMatrix, GpuMatrixPart, WeightDType } from '../../../src/gpu/tensor.ts';
import { attentionHeadsPerThread, attentionQueriesPerThread, attentionThreadsPerWorkgroup, Kernels, unrollConstLoops, type FusedShape, type GatedActivation, type KvDType, type MatvecPlan } from '../../../src/gpu/kernels/index.ts';
import { createF32Buffer, createStorageBuffer, createU32Buffer, createWeightMatrix, readBufferF32, readBufferU32 } from '../../../src/gpu/buffers.ts';
import { isQuantized, QUANT_FORMATS } from '../../../src/gpu/weight-formats.ts';
import { planDecodeAttention, type AttentionKernels } from '../../../src/gpu/kernels/attention.ts';
import { weightRowBytes } from '../../../src/gpu/weight-layout.ts';
import { testGpu } from '../../helpers/gpu.ts';
import { randomF32 } from '../../helpers/prng.ts';
import {
  attentionRef,
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  matmulRef,
  rmsNormRef,
  ropeInvFreq,
  ropeRef,
  roundF16,
  swigluRef,
  gatedRef,
} from '../../reference/cpu-ops.ts';
import { dequantize } from '../../reference/quant.ts';
import { quantizeValues as quantize } from '../../../src/model/quantize.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../../helpers/compare.ts';

let ctx: GpuContext;
let device: GPUDevice;
let kernels: Kernels;
const created: GPUBuffer[] = [];
const track = <B extends GPUBuffer>(b: B): B => (created.push(b), b);
const input = (data: Float32Array, label = 'input') => track(createF32Buffer(device, data, label));
const output = (floats: number, label = 'output') => track(createStorageBuffer(device, floats * 4, label));
const read = (b: GPUBuffer, floats: number) => readBufferF32(device, b, floats);

beforeAll(async () => {
  ctx = await testGpu();
  device = ctx.device;
  kernels = await Kernels.create(ctx);
});

afterAll(() => {
  for (const b of created) b.destroy();
});

/** A weight matrix's bytes in `dtype`, and the values they hold. */
function encode(dtype: WeightDType, values: Float32Array): { bytes: Uint8Array; held: Float32Array } {
  if (dtype === 'f32') return { bytes: new Uint8Array(values.buffer.slice(0)), held: values };
  if (dtype === 'f16' || dtype === 'bf16') {
    const [toBits, fromBits] = dtype === 'f16' ? [f32ToF16Bits, f16BitsToF32] : [f32ToBf16Bits, bf16BitsToF32];
    const bits = Uint16Array.from(values, toBits);
    return { bytes: new Uint8Array(bits.buffer), held: Float32Array.from(bits, fromBits) };
  }
  const bytes = quantize(dtype, values);
  return { bytes, held: dequantize(dtype, bytes, values.length) };
}

/**
 * A random [rows, cols] matrix in `dtype` (rows scaled differently, so a row mix-up shows), whole
 * or (with partRows) split into parts of partRows rows, each its own buffer; and the values it holds.
 */
function matrix(dtype: WeightDType, rows: number, cols: number, seed: number, partRows?: number): { W: GpuMatrix; held: Float32Array } {
  const values = randomF32(rows * cols, seed, 1 / Math.sqrt(cols));
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) values[r * cols + c] *= 0.4 + (r % 7) * 0.3;
  const { bytes, held } = encode(dtype, values);
  const rowBytes = weightRowBytes(dtype, cols);
  const parts: GpuMatrixPart[] = [];
  const step = partRows ?? rows;
  for (let first = 0; first < rows; first += step) {
    const n = Math.min(step, rows - first);
    const part = createWeightMatrix(device, bytes.slice(first * rowBytes, (first + n) * rowBytes), dtype, n, cols, `W ${dtype} rows ${first}..`);
    track(part.buffer);
    parts.push({ buffer: part.buffer, firstRow: first, rows: n });
  }
  const W: GpuMatrix = { buffer: parts[0].buffer, dtype, rows, cols };
  if (partRows !== undefined) W.parts = parts;
  return { W, held };
}

/** Columns that make whole blocks: 96 for 32-blocks; 512 for K-quants (also matvec's team path). */
const quantCols = (dtype: WeightDType) => (isQuantized(dtype) ? (QUANT_FORMATS[dtype].blockSize === 256 ? 512 : 96) : 45);

/**
 * The plans and shapes the fused kernels run under: the device's own (on the CPU test device,
 * Q8_0/Q4_0 rows walked by runs); a GPU's shape (a quad a thread, 64 threads, no runs) with its
 * plan and with a workgroup reduction; and 4 quads a thread in workgroups of 8 with subgroup teams.
 */
function plans(): { name: string; plan: MatvecPlan | undefined; shape?: FusedShape; runs?: boolean }[] {
  return [
    { name: 'planned', plan: undefined },
    { name: 'planned, 1 quad x 64 threads, no runs', plan: undefined, shape: { quads: 1, workgroup: 64 }, runs: false },
    { name: 'team 8 workgroup, 1 quad x 64 threads', plan: { team: 8, reduction: 'workgroup' }, shape: { quads: 1, workgroup: 64 } },
    { name: 'team 4 subgroup, 4 quads x 8 threads', plan: { team: 4, reduction: 'subgroup' }, shape: { quads: 4, workgroup: 8 } },
  ];
}

async function withPlan<T>(plan: MatvecPlan | undefined, fn: () => Promise<T>, shape?: FusedShape, runs?: boolean): Promise<T> {
  // (A device without subgroups runs the subgroup case under its own plan.)
  const forced = plan?.reduction === 'subgroup' && !ctx.features.subgroups ? undefined : plan;
  const saved = kernels;
  kernels = await Kernels.create(ctx, { tuning: { matvecPlan: forced && (() => forced), fusedShape: shape, weightRuns: runs } });
  try {
    return await fn();
  } finally {
    kernels = saved;
  }
}

describe('fusedMatvec: stacked projections with RMSNorm folded in (Q/K/V as one pass)', () => {
  const cases: { name: string; dtypes: WeightDType[]; cols: number; partRows?: number }[] = [
    { name: 'f32, 45 cols (scalar loads)', dtypes: ['f32', 'f32', 'f32'], cols: 45 },
    { name: 'f16, 64 cols', dtypes: ['f16', 'f16', 'f16'], cols: 64 },
    { name: 'bf16, 45 cols', dtypes: ['bf16', 'bf16', 'bf16'], cols: 45 },
    { name: 'mixed f16/f32/bf16, 60 cols', dtypes: ['f16', 'f32', 'bf16'], cols: 60 },
    { name: 'q8_0 / q4_0 / q4_1', dtypes: ['q8_0', 'q4_0', 'q4_1'], cols: 96 },
    { name: 'q5_0 / q5_1 / q8_0', dtypes: ['q5_0', 'q5_1', 'q8_0'], cols: 96 },
    { name: 'q4_k / q5_k / q6_k (Q4_K_M-style mix)', dtypes: ['q4_k', 'q5_k', 'q6_k'], cols: 512 },
    { name: 'split into parts of 7 rows, f16', dtypes: ['f16', 'f16', 'f16'], cols: 44, partRows: 7 },
    { name: 'split into parts of 5 rows, q8_0', dtypes: ['q8_0', 'q8_0', 'q8_0'], cols: 96, partRows: 5 },
  ];
  // Biases under every plan on the first case and on every case under the device's plan: each
  // storage type and each plan with biases, not every pair of them again (the bias is added after
  // the row's sum, whatever the storage).
  for (const [ci, c] of cases.entries()) {
    for (const [pi, { name: planName, plan, shape, runs }] of plans().entries()) {
      for (const withBias of ci === 0 || pi === 0 ? [false, true] : [false]) {
        it(`${c.name}, ${planName}${withBias ? ', biases' : ''}`, async () => {
          const rowsOf = [26, 10, 10]; // q, k, v of 6.5 / 2.5 quads: ragged last quads
          const mats = c.dtypes.map((dtype, i) => matrix(dtype, rowsOf[i], c.cols, 10 + i, c.partRows));
          const biases = rowsOf.map((rows, i) => randomF32(rows, 20 + i, 0.5));
          const xs = randomF32(c.cols, 30, 2);
          const gamma = randomF32(c.cols, 31, 0.3).map((g) => g + 1);
          const total = rowsOf.reduce((a, b) => a + b);
          const y = output(total + 3);
          await withPlan(plan, async () => {
            const batch = kernels.begin();
            batch.fusedMatvec(
              y,
              input(xs),
              mats.map(({ W }, i) => ({ W, bias: withBias ? input(biases[i]) : undefined })),
              { norm: { gamma: input(gamma), eps: 1e-5 } },
            );
            batch.submit();
          }, shape, runs);
          const xb = rmsNormRef(xs, gamma, 1, c.cols, 1e-5);
          const want = new Float32Array(total);
          let at = 0;
          mats.forEach(({ held }, i) => {
            want.set(matmulRef(xb, held, 1, rowsOf[i], c.cols, withBias ? biases[i] : undefined), at);
            at += rowsOf[i];
          });
          expectClose(await read(y, total), want, 1e-5);
        });
      }
    }
  }

  it('without the norm it is a plain stacked matvec', async () => {
    const cols = 40;
    const mats = [matrix('f32', 9, cols, 1), matrix('f16', 6, cols, 2)];
    const xs = randomF32(cols, 3);
    const y = output(15);
    const batch = kernels.begin();
    batch.fusedMatvec(y, input(xs), mats.map(({ W }) => ({ W })));
    batch.submit();
    const want = new Float32Array(15);
    want.set(matmulRef(xs, mats[0].held, 1, 9, cols));
    want.set(matmulRef(xs, mats[1].held, 1, 6, cols), 9);
    expectClose(await read(y, 15), want, 1e-5);
  });

  it('more row ranges than one dispatch binds: stacked over several dispatches', async () => {
    // 4 matrices in parts of 3 rows with biases: 16 ranges x 2 bindings, far over 8 segments a dispatch.
    const cols = 32;
    const rowsOf = [11, 7, 12, 5];
    const mats = rowsOf.map((rows, i) => matrix(i % 2 ? 'f16' : 'q8_0', rows, cols, 40 + i, 3));
    const biases = rowsOf.map((rows, i) => randomF32(rows, 50 + i));
    const xs = randomF32(cols, 60);
    const gamma = randomF32(cols, 61, 0.3).map((g) => g + 1);
    const total = rowsOf.reduce((a, b) => a + b);
    const y = output(total);
    const program = kernels.program();
    program.fusedMatvec(y, input(xs), mats.map(({ W }, i) => ({ W, bias: input(biases[i]) })), { norm: { gamma: input(gamma), eps: 1e-6 } });
    expect(program.dispatchCount).toBeGreaterThan(1);
    const encoder = device.createCommandEncoder();
    program.encode(encoder);
    device.queue.submit([encoder.finish()]);
    const xb = rmsNormRef(xs, gamma, 1, cols, 1e-6);
    const want = new Float32Array(total);
    let at = 0;
    mats.forEach(({ held }, i) => {
      want.set(matmulRef(xb, held, 1, rowsOf[i], cols, biases[i]), at);
      at += rowsOf[i];
    });
    expectClose(await read(y, total), want, 1e-5);
    program.destroy();
  });
});

describe('fusedMatvec accumulate: the residual add folded into the output projection', () => {
  for (const dtype of ['f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_k', 'q6_k'] as WeightDType[]) {
    for (const partRows of [undefined, 6]) {
      it(`${dtype}${partRows ? ', split in parts of 6 rows' : ''}: x += W·a`, async () => {
        const [rows, cols] = [21, quantCols(dtype)];
        const { W, held } = matrix(dtype, rows, cols, 70, partRows);
        const a = randomF32(cols, 71);
        const x0 = randomF32(rows, 72, 3);
        const x = input(x0);
        const batch = kernels.begin();
        batch.fusedMatvec(x, input(a), [{ W }], { accumulate: true });
        batch.submit();
        const want = matmulRef(a, held, 1, rows, cols).map((v, r) => v + x0[r]);
        expectClose(await read(x, rows), want, 1e-5);
      });
    }
  }

  it('refuses x as both the residual stream and the input', () => {
    const { W } = matrix('f32', 4, 4, 1);
    const x = output(4);
    expect(() => kernels.begin().fusedMatvec(x, x, [{ W }], { accumulate: true })).toThrow(/also an input/);
  });
});

describe('fusedSwiglu: gate/up projections, RMSNorm and SwiGLU in one pass', () => {
  const cases: { gate: WeightDType; up: WeightDType; cols: number; partRows?: number; activation?: GatedActivation }[] = [
    { gate: 'f32', up: 'f32', cols: 45 },
    { gate: 'f16', up: 'bf16', cols: 64 },
    { gate: 'q4_k', up: 'q6_k', cols: 512 },
    { gate: 'q8_0', up: 'q5_1', cols: 96 },
    { gate: 'q4_0', up: 'q8_0', cols: 320 }, // both walked by runs (on the CPU device), 10 blocks
    { gate: 'f16', up: 'f16', cols: 48, partRows: 8 }, // split: two fused projections + swiglu
    // GeGLU (gelu_tanh, Gemma): fused, and split.
    { gate: 'f16', up: 'bf16', cols: 64, activation: 'gelu_tanh' },
    { gate: 'q8_0', up: 'q4_0', cols: 96, activation: 'gelu_tanh' },
    { gate: 'f32', up: 'f32', cols: 45, partRows: 8, activation: 'gelu_tanh' },
  ];
  for (const c of cases) {
    const activation = c.activation ?? 'silu';
    for (const { name: planName, plan, shape, runs } of plans()) {
      it(`${c.gate} / ${c.up}, ${c.cols} cols${c.partRows ? ', split' : ''}${c.activation ? `, ${c.activation}` : ''}, ${planName}`, async () => {
        const rows = 29;
        const gate = matrix(c.gate, rows, c.cols, 80, c.partRows);
        const up = matrix(c.up, rows, c.cols, 81, c.partRows);
        const xs = randomF32(c.cols, 82, 2);
        const gamma = randomF32(c.cols, 83, 0.3).map((g) => g + 1);
        const out = output(rows);
        await withPlan(plan, async () => {
          const batch = kernels.begin();
          batch.fusedSwiglu(out, input(xs), gate.W, up.W, {
            norm: { gamma: input(gamma), eps: 1e-5 },
            scratch: { gate: output(rows), up: output(rows) },
            activation: c.activation,
          });
          batch.submit();
        }, shape, runs);
        const xb = rmsNormRef(xs, gamma, 1, c.cols, 1e-5);
        const [g, u] = [matmulRef(xb, gate.held, 1, rows, c.cols), matmulRef(xb, up.held, 1, rows, c.cols)];
        const want = gatedRef(g, u, activation);
        expectClose(await read(out, rows), want, 1e-5);
        if (activation !== 'silu') expect(maxAbsDiff(want, swigluRef(g, u))).toBeGreaterThan(1e-2 * maxAbs(want));
      });
    }
  }

  it('a split W_gate without scratch buffers is refused', () => {
    const gate = matrix('f32', 8, 8, 1, 4);
    const up = matrix('f32', 8, 8, 2, 4);
    expect(() => kernels.begin().fusedSwiglu(output(8), output(8), gate.W, up.W)).toThrow(/scratch/);
  });
});

describe('decodeAttention: RoPE, the K/V append and attention in one pass (split: + combine)', () => {
  const cases = [
    { numHeads: 6, numKvHeads: 2, headDim: 4, pairing: 'halves' as const, pos: 20, chunkKeys: 7 },
    { numHeads: 3, numKvHeads: 3, headDim: 6, pairing: 'adjacent' as const, pos: 20, chunkKeys: 1 },
    { numHeads: 3, numKvHeads: 3, headDim: 6, pairing: 'halves' as const, pos: 13 },
    { numHeads: 4, numKvHeads: 1, headDim: 8, pairing: 'halves' as const, pos: 0, chunkKeys: 4 },
    { numHeads: 4, numKvHeads: 1, headDim: 8, pairing: 'adjacent' as const, pos: 31, chunkKeys: 8 },
    { numHeads: 8, numKvHeads: 2, headDim: 8, pairing: 'halves' as const, pos: 17 },
    { numHeads: 4, numKvHeads: 2, headDim: 8, pairing: 'adjacent' as const, pos: 25, chunkKeys: 3, window: 10 },
    { numHeads: 2, numKvHeads: 2, headDim: 6, pairing: 'adjacent' as const, pos: 25, chunkKeys: 5, window: 1 },
    // Gemma's score scale and Gemma 2's soft-capping, split and whole.
    { numHeads: 4, numKvHeads: 2, headDim: 8, pairing: 'halves' as const, pos: 25, chunkKeys: 3, scores: { scale: 0.6, softcap: 1.2 } },
    { numHeads: 2, numKvHeads: 1, headDim: 6, pairing: 'adjacent' as const, pos: 19, window: 9, scores: { softcap: 0.7 } },
    { numHeads: 3, numKvHeads: 3, headDim: 4, pairing: 'halves' as const, pos: 12, scores: { scale: 1.3 } },
    // Partial rotary (rotaryDims < headDim) and LongRoPE's magnitude, both pairings, split and whole.
    { numHeads: 4, numKvHeads: 2, headDim: 8, pairing: 'halves' as const, pos: 22, chunkKeys: 6, rope: { rotaryDims: 4 } },
    { numHeads: 2, numKvHeads: 1, headDim: 12, pairing: 'adjacent' as const, pos: 17, rope: { rotaryDims: 6, magnitude: 1.3 } },
    { numHeads: 2, numKvHeads: 2, headDim: 6, pairing: 'halves' as const, pos: 9, chunkKeys: 4, rope: { magnitude: 0.8 } },
    // Per-head q/k RMSNorm before RoPE (Qwen3; Gemma 3 with a scale, a partial... everything at once).
    { numHeads: 4, numKvHeads: 2, headDim: 8, pairing: 'halves' as const, pos: 21, chunkKeys: 5, qkNorm: true },
    { numHeads: 2, numKvHeads: 1, headDim: 6, pairing: 'adjacent' as const, pos: 14, qkNorm: true },
    {
      numHeads: 4, numKvHeads: 1, headDim: 12, pairing: 'halves' as const, pos: 23, chunkKeys: 8, window: 12, qkNorm: true,
      scores: { scale: 0.4, softcap: 2 }, rope: { rotaryDims: 8, magnitude: 1.1 },
    },
  ];
  // Query heads per thread: the device's choice, and every other divisor of the GQA group.
  const headsChoices = (group: number) => [undefined, ...Array.from({ length: group }, (_, i) => i + 1).filter((d) => group % d === 0)];
  for (const c of cases) for (const kvDType of ['f32', 'f16'] as KvDType[]) for (const viaBuffer of [true, false])
  for (const heads of viaBuffer ? headsChoices(c.numHeads / c.numKvHeads) : [undefined]) {
    const { numHeads, numKvHeads, headDim, pairing, pos, chunkKeys } = c;
    const window = 'window' in c ? c.window : undefined;
    const scores = 'scores' in c ? c.scores : undefined;
    const rope = 'rope' in c ? c.rope : undefined;
    const rotaryDims = rope?.rotaryDims ?? headDim;
    const qkNorm = 'qkNorm' in c;
    const name =
      `${numHeads}/${numKvHeads} heads, headDim ${headDim}, ${pairing}, at ${pos}, ` +
      `${chunkKeys ? `chunks of ${chunkKeys}` : 'one pass'}${window ? `, window ${window}` : ''}, ${kvDType} cache, ` +
      (scores ? `scores ${JSON.stringify(scores)}, ` : '') +
      (rope ? `rope ${JSON.stringify(rope)}, ` : '') +
      (qkNorm ? 'q/k norm, ' : '') +
      `position ${viaBuffer ? 'from a buffer' : 'uniform'}, ${heads ? `${heads} head${heads > 1 ? 's' : ''} a thread` : "the device's heads a thread"}`;
    it(name, async () => {
      const kernels = await Kernels.create(ctx, { tuning: { attentionHeads: heads === undefined ? undefined : () => heads } });
      const rows = 32;
      const qDim = numHeads * headDim;
      const kvDim = numKvHeads * headDim;
      const qkv = randomF32(qDim + 2 * kvDim, 110, 2);
      const invFreq = ropeInvFreq(rotaryDims, 10000);
      // The cache rows before the position hold earlier tokens; rows from it on hold large values
      // (row pos must be replaced by this token's, the later ones never seen).
      const k = randomF32(rows * kvDim, 111, 2);
      const v = randomF32(rows * kvDim, 112);
      for (let i = pos * kvDim; i < rows * kvDim; i++) [k[i], v[i]] = [5, 100];
      const toCache = (values: Float32Array) =>
        kvDType === 'f32' ? input(values) : track(createU32Buffer(device, packF16(values), 'cache f16'));
      const [kBuf, vBuf] = [toCache(k), toCache(v)];
      const chunks = chunkKeys ? Math.ceil(rows / chunkKeys) : 1;
      const split = chunkKeys ? { chunkKeys, partials: output(numHeads * chunks * (headDim + 2)) } : undefined;
      const out = output(qDim);
      const [qGamma, kGamma] = [randomF32(headDim, 113, 0.5).map((g) => g + 1), randomF32(headDim, 114, 0.5).map((g) => g + 1)];
      const position = viaBuffer ? track(createU32Buffer(device, Uint32Array.of(pos), 'position')) : undefined;
      const program = kernels.program();
      program.decodeAttention(
        { out, qkv: input(qkv), keys: kBuf, values: vBuf, invFreq: input(invFreq) },
        { startPos: viaBuffer ? 0 : pos, position },
        { heads: numHeads, kvHeads: numKvHeads, headDim, pairing, slidingWindow: window, ...scores, ...rope },
        kvDType,
        split,
        qkNorm ? { q: input(qGamma), k: input(kGamma), eps: 1e-6 } : undefined,
      );
      expect(program.dispatchCount).toBe(chunks > 1 ? 2 : 1);
      const encoder = device.createCommandEncoder();
      program.encode(encoder);
      device.queue.submit([encoder.finish()]);

      // The reference: rope q and k, put (k, v) at row pos of the caches (rounded as they store), attend.
      // (With the q/k norm: each head normalized first, rmsNorm of rows = heads, dim = headDim.)
      const [qIn, kIn] = [qkv.slice(0, qDim), qkv.slice(qDim, qDim + kvDim)];
      const [qNormed, kNormed] = qkNorm
        ? [rmsNormRef(qIn, qGamma, numHeads, headDim, 1e-6), rmsNormRef(kIn, kGamma, numKvHeads, headDim, 1e-6)]
        : [qIn, kIn];
      const q = ropeRef(qNormed, 1, numHeads, headDim, pos, invFreq, pairing, rope);
      const kNew = ropeRef(kNormed, 1, numKvHeads, headDim, pos, invFreq, pairing, rope);
      const vNew = qkv.slice(qDim + kvDim);
      const round = (x: Float32Array) => (kvDType === 'f16' ? roundF16(x) : x);
      const [kWant, vWant] = [round(k), round(v)];
      kWant.set(round(kNew), pos * kvDim);
      vWant.set(round(vNew), pos * kvDim);
      const want = attentionRef(q, kWant, vWant, 1, pos, numHeads, numKvHeads, headDim, window, scores);
      expectClose(await read(out, qDim), want, 1e-5);
      if (qkNorm) {
        // The norm changes the answer.
        const plain = ropeRef(kIn, 1, numKvHeads, headDim, pos, invFreq, pairing, rope);
        expect(maxAbsDiff(kNew, plain)).toBeGreaterThan(1e-2 * maxAbs(kNew));
        const qPlain = ropeRef(qIn, 1, numHeads, headDim, pos, invFreq, pairing, rope);
        const outPlain = attentionRef(qPlain, kWant, vWant, 1, pos, numHeads, numKvHeads, headDim, window, scores);
        expect(maxAbsDiff(want, outPlain)).toBeGreaterThan(1e-2 * maxAbs(want));
      }
      if (rope) {
        // The rotation changes the answer (the cache's K row: past rotaryDims, k as it came).
        const plain = ropeRef(kNormed, 1, numKvHeads, headDim, pos, ropeInvFreq(headDim, 10000), pairing);
        expect(maxAbsDiff(kNew, plain)).toBeGreaterThan(1e-2 * maxAbs(kNew));
      }
      if (scores) {
        // The scale and cap change the answer by far more than the tolerance.
        const plain = attentionRef(q, kWant, vWant, 1, pos, numHeads, numKvHeads, headDim, window);
        expect(maxAbsDiff(want, plain)).toBeGreaterThan(1e-2 * maxAbs(want));
      }

      // The caches: row pos is this token's K and V; the other rows are untouched.
      const readCache = async (b: GPUBuffer) => {
        if (kvDType === 'f32') return readBufferF32(device, b, rows * kvDim);
        const words = await readBufferU32(device, b, (rows * kvDim) / 2);
        return Float32Array.from({ length: rows * kvDim }, (_, i) => f16BitsToF32((words[i >> 1] >>> (16 * (i & 1))) & 0xffff));
      };
      const [kGot, vGot] = [await readCache(kBuf), await readCache(vBuf)];
      const rowOf = (a: Float32Array) => a.slice(pos * kvDim, (pos + 1) * kvDim);
      // K may differ from the reference in the last bits of the rotation, before rounding.
      expectClose(rowOf(kGot), rowOf(kWant), kvDType === 'f16' ? 1e-3 : 1e-6);
      expect(Array.from(rowOf(vGot))).toEqual(Array.from(rowOf(vWant)));
      for (const [got, wantAll] of [[kGot, kWant], [vGot, vWant]] as const) {
        expect(Array.from(got.subarray(0, pos * kvDim))).toEqual(Array.from(wantAll.subarray(0, pos * kvDim)));
        expect(Array.from(got.subarray((pos + 1) * kvDim))).toEqual(Array.from(wantAll.subarray((pos + 1) * kvDim)));
      }
      program.destroy();
    });
  }

  it('goes unsplit where the split would bind more storage buffers than the device allows (split, position buffer and q/k norm: 9)', () => {
    const stub = (max: number): AttentionKernels => ({
      ctx: { limits: { maxStorageBuffersPerShaderStage: max } },
      tuning: kernels.tuning,
      attentionPipeline: () => ({}) as GPUComputePipeline,
      decodeAttentionPipeline: () => ({}) as GPUComputePipeline,
    });
    const b = () => output(64);
    const buffers = { out: b(), qkv: b(), keys: b(), values: b(), invFreq: b() };
    const shape = { heads: 2, kvHeads: 2, headDim: 4, pairing: 'halves' as const };
    const split = { chunkKeys: 2, partials: output(2 * 8 * 6) };
    const qkNorm = { q: b(), k: b(), eps: 1e-6 };
    const at = { startPos: 0, position: b() };
    const bound = (d: { buffers: Record<number, GPUBuffer> }) => Object.keys(d.buffers).length;
    const unsplit = planDecodeAttention(stub(8), buffers, at, shape, 'f32', split, qkNorm);
    expect(unsplit).toHaveLength(1);
    expect(bound(unsplit[0])).toBe(8);
    const splitUp = planDecodeAttention(stub(9), buffers, at, shape, 'f32', split, qkNorm);
    expect(splitUp).toHaveLength(2);
    expect(bound(splitUp[0])).toBe(9);
    expect(planDecodeAttention(stub(8), buffers, { startPos: 0 }, shape, 'f32', split, qkNorm)).toHaveLength(2);
    expect(() => planDecodeAttention(stub(7), buffers, at, shape, 'f32', split, qkNorm)).toThrow(/8 storage buffers/);
  });

  it('CPU devices give a thread the whole GQA group while its slices unroll; GPUs one head', () => {
    expect(attentionHeadsPerThread(4, 8, false)).toBe(1);
    expect(attentionHeadsPerThread(2, 8, true)).toBe(2); // stories260K: 2 x 2 slices
    expect(attentionHeadsPerThread(4, 8, true)).toBe(4);
    expect(attentionHeadsPerThread(3, 64, true)).toBe(1); // 16 slices: already at the limit
    expect(attentionHeadsPerThread(8, 16, true)).toBe(4); // 4 slices: 4 x 4
    expect(attentionHeadsPerThread(7, 6, true)).toBe(1); // 6 slices (unaligned): 7 x 6 too many
    expect(attentionHeadsPerThread(1, 8, true)).toBe(1);
  });

  it('a CPU device\'s prefill gives an attention thread up to 4 query tokens while they unroll; decode and GPUs 1', () => {
    expect(attentionQueriesPerThread(200, 2, 8, true)).toBe(4); // stories260K: 4 x 2 heads x 2 slices
    expect(attentionQueriesPerThread(200, 4, 8, true)).toBe(2); // 2 x 4 x 2
    expect(attentionQueriesPerThread(200, 1, 64, true)).toBe(1); // 16 slices: already at the limit
    expect(attentionQueriesPerThread(1, 2, 8, true)).toBe(1); // decode
    expect(attentionQueriesPerThread(200, 1, 8, false)).toBe(1);
    expect(attentionThreadsPerWorkgroup(true)).toBe(16);
    expect(attentionThreadsPerWorkgroup(false)).toBe(64);
  });
});

describe('unrollConstLoops', () => {
  it('unrolls nested loops over the named bounds, braces in their bodies included', () => {
    const code = 'a(); for (var g = 0u; g < HEADS; g++) { if (x[g] > 0.0) { for (var i = 0u; i < SLICES; i++) { y[g * 2u + i] = 1.0; } } } b();';
    expect(unrollConstLoops(code, { HEADS: 2, SLICES: 2 })).toBe(
      'a(); {' +
        ' if (x[0u] > 0.0) { { y[0u * 2u + 0u] = 1.0; } { y[0u * 2u + 1u] = 1.0; } } }' +
        ' {' +
        ' if (x[1u] > 0.0) { { y[1u * 2u + 0u] = 1.0; } { y[1u * 2u + 1u] = 1.0; } } } b();',
    );
  });

  it('leaves loops over other bounds alone', () => {
    const code = 'for (var d = 0u; d < HEAD_DIM / 2u; d++) { for (var g = 0u; g < N; g++) { f(g); } }';
    expect(unrollConstLoops(code, { HEADS: 2 })).toBe(code);
  });
});

/** f32 values as an f16 cache: two halves a u32 word, rounded to nearest even. */
function packF16(values: Float32Array): Uint32Array {
  const words = new Uint32Array(values.length / 2);
  for (let i = 0; i < words.length; i++) words[i] = (f32ToF16Bits(values[2 * i]) | (f32ToF16Bits(values[2 * i + 1]) << 16)) >>> 0;
  return words;
}
