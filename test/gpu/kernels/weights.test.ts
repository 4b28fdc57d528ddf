// Every GPU kernel against the plain CPU reference (test/reference/cpu-ops.ts), on seeded random
// inputs whose sizes are deliberately not multiples of the workgroup sizes or of 4.
import { mulberry32, randomF32 } from '../../helpers/prng.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../../src/gpu/device.ts';
import { testGpu } from '../../helpers/gpu.ts';
import type { GpuMatrix, WeightDType } from '../../../src/gpu/tensor.ts';
import { attentionPlan, Kernels, type KernelTuning, type KvDType, matmulShape, type MatmulShape, matvecPlan, rmsNormPlan, RMSNORM_ROW_MAX_DIM, TILED_MATMUL_SHAPE, type MatvecPlan } from '../../../src/gpu/kernels/index.ts';
import {
  createF32Buffer,
  createStorageBuffer,
  createU32Buffer,
  createWeightMatrix,
  readBufferF32,
  readBufferU32,
} from '../../../src/gpu/buffers.ts';
import {
  addRef,
  attentionRef,
  bf16BitsToF32,
  embeddingRef,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  matmulRef,
  packHalves,
  rmsNormRef,
  ropeInvFreq,
  ropeRef,
  roundF16,
  swigluRef,
} from '../../reference/cpu-ops.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../../helpers/compare.ts';
import { counterDelta, gpuCounters } from '../../../src/gpu/counters.ts';

// ---- helpers -------------------------------------------------------------------------------


/**
 * Max abs error within relTol of the expected values' magnitude (tight enough that any indexing
 * slip fails). Under SwiftShader every kernel passes at 1e-6: run with RELTOL=1e-6 to see the margin.
 */
const DTYPES: WeightDType[] = ['f32', 'f16', 'bf16'];

let ctx: GpuContext;
let device: GPUDevice;
let kernels: Kernels;
const created: GPUBuffer[] = [];

function track<B extends GPUBuffer>(b: B): B {
  created.push(b);
  return b;
}
const input = (data: Float32Array, label = 'input') => track(createF32Buffer(device, data, label));
const output = (floats: number, label = 'output') => track(createStorageBuffer(device, floats * 4, label));
const read = (b: GPUBuffer, floats: number) => readBufferF32(device, b, floats);

/**
 * Uploads `values` as a [rows, cols] weight matrix in `dtype`, and returns the values it really
 * holds (rounded to f16/bf16), which is what the reference must compute with.
 */
function weightMatrix(values: Float32Array, rows: number, cols: number, dtype: WeightDType): { W: GpuMatrix; held: Float32Array } {
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

beforeAll(async () => {
  ctx = await testGpu();
  device = ctx.device;
  // Compile the weight-format variants up front too (the async path); the bias ones compile lazily.
  kernels = await Kernels.create(ctx, { weightDTypes: DTYPES });
});

/** Kernels on the test device with some of its choices replaced (undefined entries keep the device's). */
function tuned(tuning: Partial<KernelTuning>): Promise<Kernels> {
  return Kernels.create(ctx, { weightDTypes: DTYPES, tuning });
}

afterAll(() => {
  for (const b of created) b.destroy();
});

async function expectNoGpuErrors(work: () => Promise<void>): Promise<void> {
  device.pushErrorScope('validation');
  await work();
  const error = await device.popErrorScope();
  expect(error?.message ?? null).toBeNull();
}

// ---- 16-bit conversions ------------------------------------------------------------------

describe('f16 / bf16 conversions (CPU reference)', () => {
  it('rounds to known f16 bit patterns', () => {
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(-2)).toBe(0xc000);
    expect(f32ToF16Bits(0.1)).toBe(0x2e66);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65519)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // ties to even: rounds up to infinity
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie -> even (0)
    expect(f32ToF16Bits(1.5 * 2 ** -25)).toBe(0x0001);
    expect(f32ToF16Bits(2 ** -14)).toBe(0x0400); // smallest normal
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie -> even mantissa
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
    expect(f16BitsToF32(0x3555)).toBeCloseTo(0.333251953125, 12);
    expect(f16BitsToF32(0x7c00)).toBe(Infinity);
  });

  it('round-trips every finite f16 pattern', () => {
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00) continue; // inf / NaN
      expect(f32ToF16Bits(f16BitsToF32(h))).toBe(h);
    }
  });

  it('rounds to known bf16 bit patterns and round-trips', () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(f32ToBf16Bits(-2)).toBe(0xc000);
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80); // tie -> even
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToBf16Bits(3.4028234663852886e38)).toBe(0x7f80); // rounds up to infinity
    for (let b = 0; b < 0x10000; b += 7) {
      if ((b & 0x7f80) === 0x7f80) continue;
      expect(f32ToBf16Bits(bf16BitsToF32(b))).toBe(b);
    }
  });

  it('packs two halves per word, low half first', () => {
    expect(Array.from(packHalves(Uint16Array.of(0x1111, 0x2222, 0xffff)))).toEqual([0x22221111, 0x0000ffff]);
  });
});

// ---- kernels -------------------------------------------------------------------------------

describe('weight formats on the GPU', () => {
  // Every 16-bit pattern, read by the embedding kernel (one table row per high byte): checks
  // load_weight for f16 and bf16 bit for bit, including odd element indices and signs.
  for (const dtype of ['f16', 'bf16'] as const) {
    it(`${dtype}: load_weight decodes every finite bit pattern exactly`, async () => {
      const bits = new Uint16Array(0x10000);
      for (let i = 0; i < bits.length; i++) bits[i] = i;
      const fromBits = dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
      const W = createWeightMatrix(device, packHalves(bits), dtype, 256, 256, 'all patterns');
      track(W.buffer);
      const tokens = track(createU32Buffer(device, Uint32Array.from({ length: 256 }, (_, i) => i), 'tokens'));
      const out = output(0x10000);
      const batch = kernels.begin();
      batch.embedding(out, W, tokens, 256);
      batch.submit();
      const got = await read(out, 0x10000);
      const exponentMask = dtype === 'f16' ? 0x7c00 : 0x7f80;
      let mismatches = 0;
      let flushedSubnormals = 0;
      for (let h = 0; h < 0x10000; h++) {
        if ((h & exponentMask) === exponentMask) continue; // inf / NaN: no model weight is one
        const want = fromBits(h);
        if (got[h] === want) continue;
        // A GPU may flush subnormals to zero; tolerated (they are below 6e-5 for f16).
        if ((h & exponentMask) === 0 && got[h] === 0) flushedSubnormals++;
        else mismatches++;
      }
      expect(mismatches).toBe(0);
      expect(flushedSubnormals).toBeLessThanOrEqual(2 * 1023);
    });
  }
});

describe('embedding', () => {
  const vocab = 37;
  const cols = 61;
  for (const dtype of DTYPES) {
    for (const T of [1, 3, 17]) {
      it(`${dtype}, T=${T}`, async () => {
        const { W, held } = weightMatrix(randomF32(vocab * cols, 11 + T), vocab, cols, dtype);
        const next = mulberry32(T);
        const ids = Array.from({ length: T }, (_, t) => (t === 0 ? vocab - 1 : Math.floor(next() * vocab)));
        const tokens = track(createU32Buffer(device, Uint32Array.from(ids), 'tokens'));
        const out = output(T * cols);
        const batch = kernels.begin();
        batch.embedding(out, W, tokens, T);
        batch.submit();
        expect(Array.from(await read(out, T * cols))).toEqual(Array.from(embeddingRef(held, cols, ids)));
      });
    }
  }

  it('gives a zero row for a token id outside the table', async () => {
    const { W, held } = weightMatrix(randomF32(vocab * cols, 5), vocab, cols, 'f32');
    const tokens = track(createU32Buffer(device, Uint32Array.of(2, vocab, 0), 'tokens'));
    const out = output(3 * cols);
    const batch = kernels.begin();
    batch.embedding(out, W, tokens, 3);
    batch.submit();
    const got = await read(out, 3 * cols);
    const want = embeddingRef(held, cols, [2, 0, 0]);
    want.fill(0, cols, 2 * cols);
    expect(Array.from(got)).toEqual(Array.from(want));
  });
});

describe('rmsNorm', () => {
  it('rmsNormPlan: one thread per row up to RMSNORM_ROW_MAX_DIM on GPUs, always on CPU devices', () => {
    expect(rmsNormPlan(64, false)).toBe('per_row');
    expect(rmsNormPlan(RMSNORM_ROW_MAX_DIM, false)).toBe('per_row');
    expect(rmsNormPlan(RMSNORM_ROW_MAX_DIM + 1, false)).toBe('per_workgroup');
    expect(rmsNormPlan(8192, true)).toBe('per_row');
  });

  // dim 61: scalar loads; 300, 8, 1100: vec4 rows. T=70: more rows than one per_row workgroup.
  const cases = [[1, 61], [3, 61], [17, 61], [3, 300], [2, 8], [70, 8], [70, 61], [2, 1100]];
  for (const entry of ['per_row', 'per_workgroup'] as const) {
    for (const [T, dim] of cases) {
      it(`${entry}: T=${T}, dim=${dim}`, async () => {
        const x = randomF32(T * dim, 100 + dim + T, 3);
        const gamma = randomF32(dim, 200 + dim, 2);
        const eps = 1e-5;
        const out = output(T * dim);
        const batch = (await tuned({ rmsNormPlan: () => entry })).begin();
        batch.rmsNorm(out, input(x), input(gamma), T, dim, eps);
        batch.submit();
        expectClose(await read(out, T * dim), rmsNormRef(x, gamma, T, dim, eps));
      });
    }
  }

  it('respects eps (tiny inputs)', async () => {
    const T = 2;
    const dim = 61;
    const x = randomF32(T * dim, 7, 1e-3);
    const gamma = randomF32(dim, 8);
    const out = output(T * dim);
    const batch = kernels.begin();
    batch.rmsNorm(out, input(x), input(gamma), T, dim, 1e-2);
    batch.submit();
    expectClose(await read(out, T * dim), rmsNormRef(x, gamma, T, dim, 1e-2));
  });
});

describe('matmul (matvec for T=1, register-blocked matmul for T>1)', () => {
  for (const dtype of DTYPES) {
    for (const T of [1, 3, 17]) {
      for (const withBias of [false, true]) {
        it(`${dtype}, T=${T}, rows=173, cols=61${withBias ? ', bias' : ''}`, async () => {
          const rows = 173;
          const cols = 61;
          const { W, held } = weightMatrix(randomF32(rows * cols, 300 + T), rows, cols, dtype);
          const x = randomF32(T * cols, 400 + T);
          const bias = withBias ? randomF32(rows, 500) : undefined;
          const y = output(T * rows);
          const batch = kernels.begin();
          batch.matmul(y, input(x), W, T, bias && input(bias));
          batch.submit();
          expectClose(await read(y, T * rows), matmulRef(x, held, T, rows, cols, bias));
        });
      }
    }
  }

  // matvec shares a quad of rows among a team of threads sized by K (1 thread for short K, a
  // subgroup or the workgroup for long K): cover a team of one, teams with K longer than the
  // workgroup, and rows that end in the middle of a workgroup. T=20: ragged token blocks.
  for (const [T, rows, cols] of [[1, 5, 300], [20, 5, 300], [1, 131, 5], [1, 67, 1500]]) {
    it(`f16, T=${T}, rows=${rows}, cols=${cols}`, async () => {
      const { W, held } = weightMatrix(randomF32(rows * cols, 600 + T), rows, cols, 'f16');
      const x = randomF32(T * cols, 700 + T);
      const y = output(T * rows);
      const batch = kernels.begin();
      batch.matmul(y, input(x), W, T);
      batch.submit();
      expectClose(await read(y, T * rows), matmulRef(x, held, T, rows, cols));
    });
  }
});

describe('matmul blocks: aligned (vec4) and scalar paths, ragged edges', () => {
  // matmul.wgsl: threads of 4 rows x 4 tokens (GPUs; 8 on CPU devices) in workgroups of 16 x 4
  // threads, vec4 loads when cols % 4 == 0, a scalar tail for the last cols % 4 columns.
  // matmul_tiled.wgsl (GPUs, 32 tokens or more): 64 x 64 tiles, K in steps of 16.
  // matvec.wgsl: quads of 4 rows. The T > 1 cases run under the device's shape and a GPU's two.
  const cases: [number, number, number][] = [
    [5, 7, 8], // aligned; T and rows not multiples of 4
    [18, 66, 64], // aligned; two workgroups along rows and tokens, ragged in both
    [70, 37, 20], // tiled: two tiles of tokens, a K step of 16 and a ragged one of 4
    [16, 64, 64], // exact multiples of every block
    [6, 9, 6], // one vec4 step and a 2-column scalar tail
    [3, 5, 3], // only the scalar tail
    [2, 3, 1], // a single column
    [1, 7, 8], // matvec, aligned, ragged quad
    [1, 9, 6], // matvec, vec4 step and tail
    [1, 2, 3], // matvec, a single partial quad, tail only
  ];
  const gpuShape: MatmulShape = { wx: 16, wy: 4, tokens: 4 };
  // Two 4-row blocks a thread and an odd number of tokens: rows past the end inside a thread's block.
  const oddShape: MatmulShape = { wx: 2, wy: 3, tokens: 3, rowQuads: 2 };
  // GPUs' shared-memory tiles (64 x 64, K in steps of 16): unaligned columns fall back to gpuShape.
  const shapeName = (shape: MatmulShape | undefined) =>
    !shape ? '' : shape.tiled ? ', tiled' : `, ${4 * (shape.rowQuads ?? 1)} rows x ${shape.tokens} tokens a thread`;
  for (const dtype of DTYPES) {
    for (const [T, rows, cols] of cases) for (const shape of T > 1 ? [undefined, gpuShape, oddShape, TILED_MATMUL_SHAPE] : [undefined]) {
      it(`${dtype}, T=${T}, rows=${rows}, cols=${cols}, bias${shapeName(shape)}`, async () => {
        const { W, held } = weightMatrix(randomF32(rows * cols, 2000 + rows + cols), rows, cols, dtype);
        const x = randomF32(T * cols, 2100 + T + cols);
        const bias = randomF32(rows, 2200 + rows);
        const y = output(T * rows);
        const batch = (await tuned({ matmulShape: shape && (() => shape) })).begin();
        batch.matmul(y, input(x), W, T, input(bias));
        batch.submit();
        expectClose(await read(y, T * rows), matmulRef(x, held, T, rows, cols, bias));
      });
    }
  }

  for (const [T, rows, cols] of [[1, 9, 6], [1, 7, 8], [5, 7, 8], [18, 66, 64], [3, 5, 3]] as [number, number, number][]) {
    it(`accumulate (the residual add folded in): y += x·Wᵀ + b, T=${T}, rows=${rows}, cols=${cols}`, async () => {
      const { W, held } = weightMatrix(randomF32(rows * cols, 2400 + rows), rows, cols, 'f32');
      const x = randomF32(T * cols, 2401 + T);
      const bias = randomF32(rows, 2402);
      const y0 = randomF32(T * rows, 2403, 3);
      const y = input(y0);
      const batch = kernels.begin();
      batch.matmul(y, input(x), W, T, input(bias), { accumulate: true });
      batch.submit();
      const want = matmulRef(x, held, T, rows, cols, bias).map((v, i) => v + y0[i]);
      expectClose(await read(y, T * rows), want);
    });
  }

  // The feed-forward's input in one pass: silu(x·W_gateᵀ) * (x·W_upᵀ). T = 1 goes to fusedSwiglu;
  // a split W_gate falls back to two matmuls and swiglu() through the scratch buffers.
  for (const dtype of DTYPES) {
    for (const [T, rows, cols, split] of [[5, 7, 8, false], [18, 66, 64, false], [70, 37, 20, false], [6, 9, 6, false], [1, 9, 8, false], [9, 12, 8, true]] as [number, number, number, boolean][]) {
      for (const shape of T > 1 ? [undefined, gpuShape, oddShape, TILED_MATMUL_SHAPE] : [undefined]) {
        it(`matmulSwiglu ${dtype}, T=${T}, rows=${rows}, cols=${cols}${split ? ', W_gate split in parts of 5 rows' : ''}${shapeName(shape)}`, async () => {
          const gate = weightMatrix(randomF32(rows * cols, 2500 + rows), rows, cols, dtype);
          const up = weightMatrix(randomF32(rows * cols, 2501 + rows), rows, cols, dtype);
          if (split) {
            // Parts of 5 rows over the same buffer contents, as a device with small buffer limits gets.
            const rowBytes = (cols * (dtype === 'f32' ? 4 : 2));
            gate.W.parts = [];
            for (let r = 0; r < rows; r += 5) {
              const n = Math.min(5, rows - r);
              const part = track(device.createBuffer({ size: Math.max(4, Math.ceil((n * rowBytes) / 4) * 4), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST }));
              const encoder = device.createCommandEncoder();
              encoder.copyBufferToBuffer(gate.W.buffer, r * rowBytes, part, 0, Math.ceil((n * rowBytes) / 4) * 4);
              device.queue.submit([encoder.finish()]);
              gate.W.parts.push({ buffer: part, firstRow: r, rows: n });
            }
          }
          const x = randomF32(T * cols, 2502 + T);
          const out = output(T * rows);
          const batch = (await tuned({ matmulShape: shape && (() => shape) })).begin();
          batch.matmulSwiglu(out, input(x), gate.W, up.W, T, { gate: output(T * rows), up: output(T * rows) });
          batch.submit();
          expectClose(await read(out, T * rows), swigluRef(matmulRef(x, gate.held, T, rows, cols), matmulRef(x, up.held, T, rows, cols)));
        });
      }
    }
  }

  // The prefill's K and V in one pass: y1 = x·W1ᵀ + b1, y2 = x·W2ᵀ + b2, sharing the X loads. T = 1,
  // a single bias or matrices of different shapes fall back to two matmuls.
  for (const dtype of ['f32', 'f16'] as const) {
    const cases: [number, number, number, 'both' | 'none' | 'one'][] = [[5, 8, 8, 'both'], [18, 64, 64, 'none'], [70, 32, 32, 'both'], [6, 8, 32, 'none'], [1, 8, 32, 'both'], [9, 12, 32, 'one']];
    for (const [T, rows, cols, biases] of cases) {
      for (const shape of T > 1 ? [undefined, gpuShape, oddShape, TILED_MATMUL_SHAPE] : [undefined]) {
        it(`matmulPair ${dtype}, T=${T}, rows=${rows}, cols=${cols}, biases: ${biases}${shapeName(shape)}`, async () => {
          const w1 = weightMatrix(randomF32(rows * cols, 2600 + rows), rows, cols, dtype);
          const w2 = weightMatrix(randomF32(rows * cols, 2601 + rows), rows, cols, dtype);
          const x = randomF32(T * cols, 2602 + T);
          const b1 = biases !== 'none' ? randomF32(rows, 2603) : undefined;
          const b2 = biases === 'both' ? randomF32(rows, 2604) : undefined;
          const [y1, y2] = [output(T * rows), output(T * rows)];
          const batch = (await tuned({ matmulShape: shape && (() => shape) })).begin();
          batch.matmulPair({ y: y1, W: w1.W, bias: b1 && input(b1) }, { y: y2, W: w2.W, bias: b2 && input(b2) }, input(x), T);
          batch.submit();
          expectClose(await read(y1, T * rows), matmulRef(x, w1.held, T, rows, cols, b1));
          expectClose(await read(y2, T * rows), matmulRef(x, w2.held, T, rows, cols, b2));
        });
      }
    }
  }

  it('matmulShape: tiles on GPUs from 32 tokens with aligned columns, else 4 tokens a thread; on CPU devices 8 rows x 16 tokens, 4 x 8 for quantized weights', () => {
    expect(matmulShape(false, 32)).toEqual(TILED_MATMUL_SHAPE);
    expect(matmulShape(false, 31)).toEqual({ wx: 16, wy: 4, tokens: 4 });
    expect(matmulShape(false, 200, false)).toEqual({ wx: 16, wy: 4, tokens: 4 });
    expect(matmulShape(true, 200)).toEqual({ wx: 4, wy: 2, tokens: 16, rowQuads: 2 });
    expect(matmulShape(true, 200, true, 'f16')).toEqual({ wx: 4, wy: 2, tokens: 16, rowQuads: 2 });
    expect(matmulShape(true, 200, true, 'q4_k')).toEqual({ wx: 16, wy: 4, tokens: 8 });
  });

  it('reads vec4 activations from a buffer whose size is not a multiple of 16 bytes', async () => {
    const [T, rows, cols] = [3, 10, 12];
    const { W, held } = weightMatrix(randomF32(rows * cols, 2300), rows, cols, 'f32');
    const x = randomF32(T * cols + 1, 2301); // one spare float: 148 bytes
    const y = output(T * rows + 3);
    await expectNoGpuErrors(async () => {
      const batch = kernels.begin();
      batch.matmul(y, input(x), W, T);
      batch.matmul(y, input(x), W, 1);
      batch.submit();
    });
    expectClose((await read(y, T * rows + 3)).subarray(0, rows), matmulRef(x.subarray(0, cols), held, 1, rows, cols));
  });
});

describe('matvec plans (threads per quad of rows, and their reduction)', () => {
  it('matvecPlan: one thread for short rows, teams up to a subgroup or the workgroup for long ones', () => {
    expect(matvecPlan(64, 4)).toEqual({ team: 1, reduction: 'none' });
    expect(matvecPlan(256, 0)).toEqual({ team: 1, reduction: 'none' });
    expect(matvecPlan(4096, 4)).toEqual({ team: 4, reduction: 'subgroup' });
    expect(matvecPlan(4096, 32)).toEqual({ team: 32, reduction: 'subgroup' });
    expect(matvecPlan(1024, 32)).toEqual({ team: 16, reduction: 'subgroup' });
    expect(matvecPlan(4096, 0)).toEqual({ team: 64, reduction: 'workgroup' });
    expect(matvecPlan(300, 0)).toEqual({ team: 4, reduction: 'workgroup' });
  });

  // Every plan on one Kernels whose plan is forced, aligned and unaligned K, ragged quads.
  const plans: MatvecPlan[] = [
    { team: 1, reduction: 'none' },
    { team: 2, reduction: 'subgroup' },
    { team: 4, reduction: 'subgroup' },
    { team: 4, reduction: 'workgroup' },
    { team: 64, reduction: 'workgroup' },
  ];
  for (const plan of plans) {
    for (const [rows, cols] of [[131, 300], [70, 61], [5, 1000], [3, 2]]) {
      it(`team=${plan.team} ${plan.reduction}, rows=${rows}, cols=${cols}`, async (t) => {
        if (plan.reduction === 'subgroup' && !ctx.features.subgroups) t.skip();
        const dtype = DTYPES[(rows + cols) % 3];
        const { W, held } = weightMatrix(randomF32(rows * cols, 2400 + cols), rows, cols, dtype);
        const x = randomF32(cols, 2500 + cols);
        const bias = randomF32(rows, 2600);
        const y = output(rows);
        const batch = (await Kernels.create(ctx, { tuning: { matvecPlan: () => plan } })).begin();
        batch.matmul(y, input(x), W, 1, input(bias));
        batch.submit();
        expectClose(await read(y, rows), matmulRef(x, held, 1, rows, cols, bias));
      });
    }
  }
});

describe('rope', () => {
  const cases = [
    { T: 3, numHeads: 6, headDim: 8, startPos: 5, theta: 10000 },
    { T: 17, numHeads: 2, headDim: 6, startPos: 0, theta: 10000 },
    { T: 1, numHeads: 3, headDim: 64, startPos: 1000, theta: 500000 }, // angles far outside [-π, π]
    { T: 2, numHeads: 1, headDim: 128, startPos: 7000, theta: 10000 },
    { T: 3, numHeads: 2, headDim: 64, startPos: 7, theta: 10000 },
  ];
  for (const { T, numHeads, headDim, startPos, theta } of cases) {
    for (const pairing of ['adjacent', 'halves'] as const) {
      it(`${pairing}, T=${T}, heads=${numHeads}, headDim=${headDim}, startPos=${startPos}`, async () => {
        const n = T * numHeads * headDim;
        const x = randomF32(n, 800 + n + startPos);
        const invFreq = ropeInvFreq(headDim, theta);
        const xBuf = input(x);
        const batch = kernels.begin();
        batch.rope(xBuf, input(invFreq), { T, startPos }, { heads: numHeads, headDim, pairing });
        batch.submit();
        expectClose(await read(xBuf, n), ropeRef(x, T, numHeads, headDim, startPos, invFreq, pairing));
      });
    }
  }

  it("'adjacent' and 'halves' differ by far more than the tolerance (the tests can tell them apart)", async () => {
    const [T, numHeads, headDim, startPos] = [3, 6, 8, 5];
    const n = T * numHeads * headDim;
    const x = randomF32(n, 900);
    const invFreq = ropeInvFreq(headDim, 10000);
    const xBuf = input(x);
    const batch = kernels.begin();
    batch.rope(xBuf, input(invFreq), { T, startPos }, { heads: numHeads, headDim, pairing: 'adjacent' });
    batch.submit();
    const got = await read(xBuf, n);
    const halves = ropeRef(x, T, numHeads, headDim, startPos, invFreq, 'halves');
    const adjacent = ropeRef(x, T, numHeads, headDim, startPos, invFreq, 'adjacent');
    expect(maxAbsDiff(adjacent, halves)).toBeGreaterThan(1000 * 1e-4 * maxAbs(halves));
    expectClose(got, adjacent);
    expect(() => expectClose(got, halves)).toThrow(/exceeds/);
  });
});

describe('attention', () => {
  const cases = [
    { T: 3, startPos: 5, numHeads: 6, numKvHeads: 2, headDim: 8 },
    { T: 17, startPos: 0, numHeads: 6, numKvHeads: 3, headDim: 6 },
    { T: 1, startPos: 70, numHeads: 6, numKvHeads: 2, headDim: 64 }, // decode, keys span two blocks of 64
    { T: 17, startPos: 60, numHeads: 4, numKvHeads: 4, headDim: 16 }, // MHA, queries straddle a block edge
    { T: 3, startPos: 130, numHeads: 2, numKvHeads: 1, headDim: 200 }, // several dims per thread
    { T: 2, startPos: 3, numHeads: 2, numKvHeads: 2, headDim: 256 }, // the largest head
    { T: 2, startPos: 1, numHeads: 2, numKvHeads: 1, headDim: 20 }, // an odd number of vec4 slices
  ];
  // Sliding windows (query at p sees keys in (p - W, p]): one key; a window that cuts some queries
  // and not others, across a block edge of per_workgroup; T>1 from startPos>0; wider than the context.
  const windowCases = [
    { T: 5, startPos: 3, numHeads: 4, numKvHeads: 2, headDim: 8, window: 1 },
    { T: 17, startPos: 60, numHeads: 4, numKvHeads: 2, headDim: 16, window: 70 },
    { T: 9, startPos: 20, numHeads: 3, numKvHeads: 1, headDim: 6, window: 7 },
    { T: 1, startPos: 130, numHeads: 2, numKvHeads: 1, headDim: 64, window: 65 },
    { T: 4, startPos: 6, numHeads: 2, numKvHeads: 2, headDim: 12, window: 1000 },
  ];

  /** Runs one attention on seeded inputs; returns the GPU result and the reference. */
  async function runAttention(
    c: { T: number; startPos: number; numHeads: number; numKvHeads: number; headDim: number; window?: number },
    entry: 'per_thread' | 'per_workgroup' | undefined,
    kvDType: KvDType = 'f32',
    heads?: number,
    queries?: number,
  ): Promise<{ got: Float32Array; want: Float32Array; unwindowed: Float32Array }> {
    const { T, startPos, numHeads, numKvHeads, headDim, window } = c;
    const contextRows = startPos + T + 4;
    const kvRow = numKvHeads * headDim;
    const q = randomF32(T * numHeads * headDim, 1000 + headDim, 2);
    // Cache rows the queries must not see hold large values, so any causal-mask leak shows.
    const kCache = randomF32(contextRows * kvRow, 1100 + headDim, 2);
    const vCache = randomF32(contextRows * kvRow, 1200 + headDim);
    for (let i = (startPos + T) * kvRow; i < contextRows * kvRow; i++) {
      kCache[i] = 5;
      vCache[i] = 100;
    }
    const out = output(T * numHeads * headDim);
    const forced = await tuned({
      attentionPlan: entry && (() => entry),
      attentionHeads: heads === undefined ? undefined : () => heads,
      attentionQueries: queries === undefined ? undefined : () => queries,
    });
    const batch = forced.begin();
    let kBuf: GPUBuffer;
    let vBuf: GPUBuffer;
    if (kvDType === 'f16') {
      // The rows written by writeKv in two appends (the second at a row offset), as the model does.
      kBuf = output((contextRows * kvRow) / 2, 'k_cache f16');
      vBuf = output((contextRows * kvRow) / 2, 'v_cache f16');
      for (const [from, to] of [[0, startPos], [startPos, contextRows]]) {
        if (to === from) continue;
        const rows = (c: Float32Array) => input(c.slice(from * kvRow, to * kvRow));
        batch.writeKv({ keys: kBuf, values: vBuf, k: rows(kCache), v: rows(vCache) }, { T: to - from, startPos: from }, kvRow);
      }
    } else {
      kBuf = input(kCache);
      vBuf = input(vCache);
    }
    batch.attention({ out, q: input(q), keys: kBuf, values: vBuf }, { T, startPos }, { heads: numHeads, kvHeads: numKvHeads, headDim, slidingWindow: window }, kvDType);
    batch.submit();
    // An f16 cache holds K and V rounded to nearest even: the reference attends over those.
    const k = kvDType === 'f16' ? roundF16(kCache) : kCache;
    const v = kvDType === 'f16' ? roundF16(vCache) : vCache;
    return {
      got: await read(out, T * numHeads * headDim),
      want: attentionRef(q, k, v, T, startPos, numHeads, numKvHeads, headDim, window),
      unwindowed: attentionRef(q, k, v, T, startPos, numHeads, numKvHeads, headDim),
    };
  }

  // per_thread with one query head a thread (a GPU's choice; the CPU test device serves the GQA group).
  for (const c of [...cases, ...windowCases].filter((c) => c.numHeads > c.numKvHeads)) {
    const { T, startPos, numHeads, numKvHeads, headDim } = c;
    const window = 'window' in c ? c.window : undefined;
    it(`per_thread, one head a thread: T=${T}, startPos=${startPos}, heads=${numHeads}/${numKvHeads}, headDim=${headDim}${window ? `, window=${window}` : ''}`, async () => {
      const { got, want } = await runAttention(c, 'per_thread', 'f32', 1);
      expectClose(got, want);
    });
  }

  // per_thread with several query tokens a thread (a prefill on a CPU device takes as many as
  // unroll, attentionQueriesPerThread): ragged last blocks, windows that cut some of a block's
  // tokens and not others (window 1 and 7 with 2 and 3 tokens a thread), an f16 cache.
  for (const queries of [2, 3]) {
    for (const c of [cases[0], cases[1], cases[3], windowCases[0], windowCases[1], windowCases[2], windowCases[4]]) {
      const { T, startPos, numHeads, numKvHeads, headDim } = c;
      const window = 'window' in c ? c.window : undefined;
      for (const kvDType of ['f32', 'f16'] as const) {
        it(`per_thread, ${queries} tokens a thread, ${kvDType} cache: T=${T}, startPos=${startPos}, heads=${numHeads}/${numKvHeads}, headDim=${headDim}${window ? `, window=${window}` : ''}`, async () => {
          const { got, want } = await runAttention(c, 'per_thread', kvDType, undefined, queries);
          expectClose(got, want);
        });
      }
    }
  }

  for (const entry of ['per_thread', 'per_workgroup'] as const) {
    for (const c of cases) {
      const { T, startPos, numHeads, numKvHeads, headDim } = c;
      it(`${entry}: T=${T}, startPos=${startPos}, heads=${numHeads}/${numKvHeads}, headDim=${headDim}`, async () => {
        const { got, want } = await runAttention(c, entry);
        expectClose(got, want);
      });
    }
    for (const c of windowCases) {
      const { T, startPos, numHeads, numKvHeads, headDim, window } = c;
      it(`${entry}: window=${window}, T=${T}, startPos=${startPos}, heads=${numHeads}/${numKvHeads}, headDim=${headDim}`, async () => {
        const { got, want, unwindowed } = await runAttention(c, entry);
        expectClose(got, want);
        if (window >= startPos + T) {
          expect(maxAbsDiff(want, unwindowed)).toBe(0); // the window cuts nothing
        } else {
          // The window changes the answer by far more than the tolerance (a leak would show).
          expect(maxAbsDiff(want, unwindowed)).toBeGreaterThan(1e-2 * maxAbs(want));
        }
      });
    }
  }

  // f16 caches (two halves a u32 word): vec4 heads (headDim % 4 == 0) and single-float ones (6).
  for (const entry of ['per_thread', 'per_workgroup'] as const) {
    for (const c of [...cases, windowCases[2], windowCases[3]]) {
      const { T, startPos, numHeads, numKvHeads, headDim } = c;
      const window = 'window' in c ? `, window=${c.window}` : '';
      it(`${entry}, f16 cache: T=${T}, startPos=${startPos}, heads=${numHeads}/${numKvHeads}, headDim=${headDim}${window}`, async () => {
        const { got, want } = await runAttention(c, entry, 'f16');
        expectClose(got, want);
      });
    }
  }

  it('writeKv rounds to nearest even like f32ToF16Bits (ties, subnormals, overflow, NaN)', async () => {
    const special = [
      0, -0, 1, -1, 65504, 65520, 65519.99, -1e6, Infinity, -Infinity, NaN, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20,
      2 ** -14, 2 ** -15 + 2 ** -25, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -26, -(2 ** -24) * 1.5, 1e-10, 6.1e-5, 0.1, -3.14159,
    ];
    const rand = randomF32(4096, 77, 8);
    const tiny = randomF32(1024, 78, 1e-4);
    const values = new Float32Array([...special, ...(special.length % 2 ? [0.5] : []), ...rand, ...tiny]);
    const rowElems = 2;
    const rows = values.length / rowElems;
    const startRow = 3;
    const kCache = output((startRow + rows) * rowElems / 2);
    const vCache = output((startRow + rows) * rowElems / 2);
    const negated = values.map((x) => -x);
    const batch = kernels.begin();
    batch.writeKv({ keys: kCache, values: vCache, k: input(values), v: input(negated) }, { T: rows, startPos: startRow }, rowElems);
    batch.submit();
    for (const [cache, src] of [[kCache, values], [vCache, negated]] as const) {
      const words = await readBufferU32(device, cache, rows, startRow * 4);
      const want = new Uint32Array(rows);
      for (let i = 0; i < rows; i++) want[i] = (f32ToF16Bits(src[2 * i]) | (f32ToF16Bits(src[2 * i + 1]) << 16)) >>> 0;
      expect(Array.from(words)).toEqual(Array.from(want));
    }
  });

  it('writeKv refuses an odd row; attention refuses an odd f16 row', () => {
    const batch = kernels.begin();
    const b = output(64);
    expect(() => batch.writeKv({ keys: output(8), values: output(8), k: b, v: output(64) }, { T: 2, startPos: 0 }, 3)).toThrow(/even/);
    const f16Cache = { out: output(64), q: b, keys: output(8), values: output(8) };
    expect(() => batch.attention(f16Cache, { T: 1, startPos: 0 }, { heads: 3, kvHeads: 3, headDim: 1 }, 'f16')).toThrow(/even/);
    batch.submit();
  });

  it('window 1: every query returns its own value row', async () => {
    const c = windowCases[0];
    const { got, want } = await runAttention(c, undefined);
    const vCache = randomF32((c.startPos + c.T + 4) * c.numKvHeads * c.headDim, 1200 + c.headDim);
    const group = c.numHeads / c.numKvHeads;
    for (let t = 0; t < c.T; t++) {
      for (let h = 0; h < c.numHeads; h++) {
        const row = ((c.startPos + t) * c.numKvHeads + Math.floor(h / group)) * c.headDim;
        const at = (t * c.numHeads + h) * c.headDim;
        for (let d = 0; d < c.headDim; d++) expect(want[at + d]).toBeCloseTo(vCache[row + d], 6);
      }
    }
    expectClose(got, want);
  });

  it('refuses a sliding window below 1', () => {
    const b = output(64);
    const batch = kernels.begin();
    for (const slidingWindow of [0, 1.5]) {
      const shape = { heads: 1, kvHeads: 1, headDim: 8, slidingWindow };
      expect(() => batch.attention({ out: output(8), q: b, keys: b, values: b }, { T: 1, startPos: 0 }, shape)).toThrow(/slidingWindow/);
    }
    batch.submit();
  });

  it('attentionPlan: per_thread on CPU devices and for prefill; per_workgroup for long decode on GPUs', () => {
    expect(attentionPlan(32, 4096, 128, true)).toBe('per_thread');
    expect(attentionPlan(32, 4096, 128, false)).toBe('per_workgroup');
    expect(attentionPlan(32, 100, 128, false)).toBe('per_thread');
    expect(attentionPlan(32, 4096, 8, false)).toBe('per_thread');
    expect(attentionPlan(128 * 32, 4096, 128, false)).toBe('per_thread');
  });
});

describe('swiglu', () => {
  for (const n of [1, 61, 1000]) {
    it(`n=${n}`, async () => {
      const gate = randomF32(n, 1300 + n, 8);
      if (n > 2) gate[2] = -200; // exp(200) overflows f32: must still give -0 * up, not NaN
      const up = randomF32(n, 1400 + n, 2);
      const out = output(n);
      const batch = kernels.begin();
      batch.swiglu(out, input(gate), input(up), n);
      batch.submit();
      expectClose(await read(out, n), swigluRef(gate, up));
    });
  }
});

describe('add', () => {
  const n = 1003;
  const a = randomF32(n, 1500);
  const b = randomF32(n, 1600);
  it('out = a + b', async () => {
    const out = output(n);
    const batch = kernels.begin();
    batch.add(out, input(a), input(b), n);
    batch.submit();
    expectClose(await read(out, n), addRef(a, b));
  });
  it('in place: out aliases a (residual x += f(x))', async () => {
    const aBuf = input(a);
    await expectNoGpuErrors(async () => {
      const batch = kernels.begin();
      batch.add(aBuf, aBuf, input(b), n);
      batch.submit();
    });
    expectClose(await read(aBuf, n), addRef(a, b));
  });
  it('in place: out aliases b', async () => {
    const bBuf = input(b);
    const batch = kernels.begin();
    batch.add(bBuf, input(a), bBuf, n);
    batch.submit();
    expectClose(await read(bBuf, n), addRef(a, b));
  });
  it('refuses out == a == b', () => {
    const buf = input(a);
    expect(() => kernels.begin().add(buf, buf, buf, n)).toThrow(/one buffer/);
  });
});

describe('a whole batch', () => {
  it('chains dispatches and copies in order, across several uniform chunks', async () => {
    // x -> rmsnorm -> matmul -> add into x, repeated: 300 dispatches (more than one 128-slot chunk).
    const [T, d] = [3, 61];
    const x0 = randomF32(T * d, 1700);
    const gamma = randomF32(d, 1701);
    const { W, held } = weightMatrix(randomF32(d * d, 1702, 0.1), d, d, 'bf16');
    const x = input(x0);
    const xb = output(T * d);
    const y = output(T * d);
    const snapshot = output(T * d);
    const gammaBuf = input(gamma);
    const rounds = 100;
    await expectNoGpuErrors(async () => {
      const batch = kernels.begin();
      for (let r = 0; r < rounds; r++) {
        batch.rmsNorm(xb, x, gammaBuf, T, d, 1e-5);
        batch.matmul(y, xb, W, T);
        batch.add(x, x, y, T * d);
        if (r === 0) batch.copy(x, 0, snapshot, 0, T * d * 4);
      }
      batch.submit();
    });
    let want = x0;
    let wantSnapshot = x0;
    for (let r = 0; r < rounds; r++) {
      want = addRef(want, matmulRef(rmsNormRef(want, gamma, T, d, 1e-5), held, T, d, d));
      if (r === 0) wantSnapshot = want;
    }
    expectClose(await read(snapshot, T * d), wantSnapshot);
    expectClose(await read(x, T * d), want, 1e-3); // 100 rounds of f32 rounding
  });

  it('shares its parameter slots with the next batch: the same dispatches make no new bind groups', async () => {
    const n = 37;
    const [a, b] = [input(randomF32(n, 1710)), input(randomF32(n, 1711))];
    const out = output(n);
    const record = () => {
      const batch = kernels.begin();
      batch.add(out, a, b, n);
      batch.swiglu(out, a, b, n);
      return batch;
    };
    // A batch whose first call fails its checks holds nothing; one that never submits (a failed
    // recording) gives the slots back with discard().
    expect(() => kernels.begin().add(out, out, out, n)).toThrow(/one buffer/);
    record().discard();
    record().submit();
    const before = gpuCounters(device);
    device.queue.writeBuffer(a, 0, new Float32Array(randomF32(n, 1712)));
    record().submit();
    expect(counterDelta(gpuCounters(device), before).bindGroupsCreated).toBe(0);
    expectClose(await read(out, n), swigluRef(await read(a, n), await read(b, n)));
  });

  it('two batches recorded at once keep their own parameters', async () => {
    const [n1, n2] = [29, 45];
    const x1 = randomF32(n1, 1720);
    const x2 = randomF32(n2, 1721);
    const [out1, out2] = [output(n1), output(n2)];
    const first = kernels.begin();
    first.add(out1, input(x1), input(x1), n1);
    const second = kernels.begin();
    second.add(out2, input(x2), input(x2), n2);
    second.submit();
    first.submit();
    expectClose(await read(out1, n1), addRef(x1, x1));
    expectClose(await read(out2, n2), addRef(x2, x2));
  });

  it('refuses to record after submit', () => {
    const batch = kernels.begin();
    batch.submit();
    expect(() => batch.swiglu(output(4), input(new Float32Array(4)), input(new Float32Array(4)), 4)).toThrow(/submitted/);
  });
});

describe('2-D grid folding (workgroup counts above the per-dimension limit)', () => {
  // A limit of 7 workgroups per dimension forces the kernels onto a folded 2-D grid with a
  // ragged last row, as a 128k vocabulary would against the real 65535 limit.
  let folded: Kernels;
  beforeAll(async () => {
    folded = await Kernels.create(ctx, { maxWorkgroupsPerDimension: 7 });
  });
  const foldedWith = (tuning: Partial<KernelTuning>) => Kernels.create(ctx, { maxWorkgroupsPerDimension: 7, tuning });

  it('refuses a dispatch that does not fit even folded', () => {
    expect(() => folded.grid(50)).toThrow(/exceeds/);
    expect(folded.grid(49)).toEqual([7, 7]);
    expect(folded.grid(37)).toEqual([7, 6]);
  });

  it('matvec over 37 rows', async () => {
    const [rows, cols] = [37, 61];
    const { W, held } = weightMatrix(randomF32(rows * cols, 1800), rows, cols, 'f16');
    const x = randomF32(cols, 1801);
    const y = output(rows);
    const batch = folded.begin();
    batch.matmul(y, input(x), W, 1);
    batch.submit();
    expectClose(await read(y, rows), matmulRef(x, held, 1, rows, cols));
  });

  // 2051 rows: 513 quads, 9 workgroups of 64 threads with a team of one (7 x 2 grid); 150 rows with
  // a team of 16: 38 quads, 10 workgroups of 4 quads. Aligned K (vec4 loads).
  for (const [rows, plan] of [[2051, { team: 1, reduction: 'none' }], [150, { team: 16, reduction: 'workgroup' }]] as const) {
    it(`matvec over ${rows} rows, team=${plan.team}`, async () => {
      const cols = 8;
      const { W, held } = weightMatrix(randomF32(rows * cols, 1810), rows, cols, 'bf16');
      const x = randomF32(cols, 1811);
      const y = output(rows);
      const batch = (await foldedWith({ matvecPlan: () => ({ ...plan }) })).begin();
      batch.matmul(y, input(x), W, 1);
      batch.submit();
      expectClose(await read(y, rows), matmulRef(x, held, 1, rows, cols));
    });
  }

  // rmsNorm per_row: 500 rows, 64 per workgroup -> 8 workgroups (7 x 2); per_workgroup: 40 rows -> 7 x 6.
  // attention per_thread, one token and one head a thread: 60 * 8 = 480 threads, 16 a workgroup on
  // the CPU device -> 30 (7 x 5); per_workgroup: 5 * 8 = 40 pairs -> 7 x 6. Both with a sliding window.
  for (const [rmsEntry, rmsT, attEntry, attT] of [['per_row', 500, 'per_thread', 60], ['per_workgroup', 40, 'per_workgroup', 5]] as const) {
    it(`rmsNorm ${rmsEntry} and attention ${attEntry}`, async () => {
      const dim = 12;
      const x = randomF32(rmsT * dim, 1950);
      const gamma = randomF32(dim, 1951);
      const normed = output(rmsT * dim);
      const [numHeads, numKvHeads, headDim, startPos, window] = [8, 2, 4, 3, 5];
      const q = randomF32(attT * numHeads * headDim, 1952);
      const kCache = randomF32((startPos + attT) * numKvHeads * headDim, 1953);
      const vCache = randomF32((startPos + attT) * numKvHeads * headDim, 1954);
      const attn = output(attT * numHeads * headDim);
      const batch = (
        await foldedWith({ rmsNormPlan: () => rmsEntry, attentionPlan: () => attEntry, attentionHeads: () => 1, attentionQueries: () => 1 })
      ).begin();
      batch.rmsNorm(normed, input(x), input(gamma), rmsT, dim, 1e-5);
      batch.attention(
        { out: attn, q: input(q), keys: input(kCache), values: input(vCache) },
        { T: attT, startPos },
        { heads: numHeads, kvHeads: numKvHeads, headDim, slidingWindow: window },
      );
      batch.submit();
      expectClose(await read(normed, rmsT * dim), rmsNormRef(x, gamma, rmsT, dim, 1e-5));
      expectClose(
        await read(attn, attT * numHeads * headDim),
        attentionRef(q, kCache, vCache, attT, startPos, numHeads, numKvHeads, headDim, window),
      );
    });
  }

  it('embedding, rmsNorm, rope, attention, swiglu, add', async () => {
    const [T, d, vocab] = [17, 70, 23]; // embedding: 17*70/256 -> 5 workgroups; rmsNorm: per_row, 1
    const { W, held } = weightMatrix(randomF32(vocab * d, 1900), vocab, d, 'f32');
    const ids = Array.from({ length: T }, (_, t) => (t * 7) % vocab);
    const tokens = track(createU32Buffer(device, Uint32Array.from(ids), 'tokens'));
    const emb = output(T * d);
    const normed = output(T * d);
    const gamma = randomF32(d, 1901);

    const [numHeads, numKvHeads, headDim, startPos] = [2, 1, 64, 2]; // rope: 17*2*32 pairs -> 5; attention: per_thread, 1
    const q0 = randomF32(T * numHeads * headDim, 1902);
    const contextRows = startPos + T;
    const kCache = randomF32(contextRows * numKvHeads * headDim, 1903);
    const vCache = randomF32(contextRows * numKvHeads * headDim, 1904);
    const invFreq = ropeInvFreq(headDim, 10000);
    const q = input(q0);
    const attn = output(T * numHeads * headDim);

    const n = 5000; // 20 workgroups
    const gate = randomF32(n, 1905, 4);
    const up = randomF32(n, 1906);
    const act = output(n);
    const sum = output(n);

    const batch = folded.begin();
    batch.embedding(emb, W, tokens, T);
    batch.rmsNorm(normed, emb, input(gamma), T, d, 1e-6);
    batch.rope(q, input(invFreq), { T, startPos }, { heads: numHeads, headDim, pairing: 'halves' });
    batch.attention({ out: attn, q, keys: input(kCache), values: input(vCache) }, { T, startPos }, { heads: numHeads, kvHeads: numKvHeads, headDim });
    batch.swiglu(act, input(gate), input(up), n);
    batch.add(sum, act, input(up), n);
    batch.submit();

    const embWant = embeddingRef(held, d, ids);
    expectClose(await read(emb, T * d), embWant);
    expectClose(await read(normed, T * d), rmsNormRef(embWant, gamma, T, d, 1e-6));
    const qWant = ropeRef(q0, T, numHeads, headDim, startPos, invFreq, 'halves');
    expectClose(await read(q, q0.length), qWant);
    expectClose(
      await read(attn, T * numHeads * headDim),
      attentionRef(qWant, kCache, vCache, T, startPos, numHeads, numKvHeads, headDim),
    );
    const actWant = swigluRef(gate, up);
    expectClose(await read(act, n), actWant);
    expectClose(await read(sum, n), addRef(actWant, up));
  });
});
