// The weight-reading kernels (src/gpu/kernels/weights.ts: embedding, matvec, matmul, and the
// matmul variants that fold in SwiGLU, a second matrix or the residual add) and their plans
// (tuning.ts: matmulShape, matvecPlan) against the plain CPU reference (test/reference/cpu-ops.ts),
// on seeded random inputs whose sizes are deliberately not multiples of the workgroup sizes or of 4.
import { mulberry32, randomF32 } from '../../helpers/prng.ts';
import { describe, expect, it } from 'vitest';
import { Kernels, matmulShape, type MatmulShape, matvecPlan, TILED_MATMUL_SHAPE, type MatvecPlan } from '../../../src/gpu/kernels/index.ts';
import { createU32Buffer } from '../../../src/gpu/buffers.ts';
import { embeddingRef, gatedRef, matmulRef, swigluRef } from '../../reference/cpu-ops.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../../helpers/compare.ts';
import {
  ctx,
  device,
  DTYPES,
  expectNoGpuErrors,
  input,
  kernels,
  output,
  read,
  track,
  tuned,
  useKernelGpu,
  weightMatrix,
} from '../../helpers/kernel-runs.ts';

useKernelGpu();

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

  // Scaled rows (Gemma: sqrt(d_model)); an id outside the table still gives a zero row.
  for (const dtype of ['f32', 'bf16'] as const) {
    it(`${dtype}, scale sqrt(2304) = 48 and 50.596`, async () => {
      const { W, held } = weightMatrix(randomF32(vocab * cols, 13), vocab, cols, dtype);
      const ids = [5, vocab + 3, 0, 36];
      const tokens = track(createU32Buffer(device, Uint32Array.from(ids), 'tokens'));
      for (const scale of [48, Math.sqrt(2560)]) {
        const out = output(ids.length * cols);
        const batch = kernels.begin();
        batch.embedding(out, W, tokens, ids.length, scale);
        batch.submit();
        const want = embeddingRef(held, cols, ids.map((id) => (id < vocab ? id : 0))).map((v) => v * Math.fround(scale));
        want.fill(0, cols, 2 * cols);
        expect(Array.from(await read(out, ids.length * cols))).toEqual(Array.from(want)); // one f32 product: exact
      }
    });
  }

  it('refuses a scale that is not finite', () => {
    const { W } = weightMatrix(randomF32(vocab * cols, 14), vocab, cols, 'f32');
    const tokens = track(createU32Buffer(device, Uint32Array.of(1), 'tokens'));
    expect(() => kernels.begin().embedding(output(cols), W, tokens, 1, NaN)).toThrow(/scale/);
  });

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
  // GeGLU (gelu_tanh, Gemma) through the same paths, on f16 weights.
  const gatedCases = [...DTYPES.map((dtype) => ({ dtype, activation: 'silu' as const })), { dtype: 'f16' as const, activation: 'gelu_tanh' as const }];
  for (const { dtype, activation } of gatedCases) {
    for (const [T, rows, cols, split] of [[5, 7, 8, false], [18, 66, 64, false], [70, 37, 20, false], [6, 9, 6, false], [1, 9, 8, false], [9, 12, 8, true]] as [number, number, number, boolean][]) {
      for (const shape of T > 1 ? [undefined, gpuShape, oddShape, TILED_MATMUL_SHAPE] : [undefined]) {
        it(`matmulSwiglu ${dtype}${activation === 'silu' ? '' : `, ${activation}`}, T=${T}, rows=${rows}, cols=${cols}${split ? ', W_gate split in parts of 5 rows' : ''}${shapeName(shape)}`, async () => {
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
          batch.matmulSwiglu(out, input(x), gate.W, up.W, T, { gate: output(T * rows), up: output(T * rows) }, activation);
          batch.submit();
          const [g, u] = [matmulRef(x, gate.held, T, rows, cols), matmulRef(x, up.held, T, rows, cols)];
          const want = gatedRef(g, u, activation);
          expectClose(await read(out, T * rows), want);
          if (activation !== 'silu') expect(maxAbsDiff(want, swigluRef(g, u))).toBeGreaterThan(1e-2 * maxAbs(want));
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
