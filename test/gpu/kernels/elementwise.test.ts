// The elementwise kernels (src/gpu/kernels/elementwise.ts: rmsNorm and its plan, rope, swiglu, the
// residual add) against the plain CPU reference (test/reference/cpu-ops.ts), on seeded random inputs
// whose sizes are deliberately not multiples of the workgroup sizes or of 4. The K/V cache write
// (writeKv) is tested with attention (attention.test.ts).
import { randomF32 } from '../../helpers/prng.ts';
import { describe, expect, it } from 'vitest';
import { rmsNormPlan, RMSNORM_ROW_MAX_DIM } from '../../../src/gpu/kernels/index.ts';
import { addRef, gatedRef, geluTanhRef, rmsNormRef, ropeInvFreq, ropeRef, softcapRef, swigluRef } from '../../reference/cpu-ops.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../../helpers/compare.ts';
import { device, expectNoGpuErrors, input, kernels, output, read, track, tuned, useKernelGpu } from '../../helpers/kernel-runs.ts';
import { createU32Buffer } from '../../../src/gpu/buffers.ts';

useKernelGpu();

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

  // In place (out === x), as the per-head q/k norm runs it: rows = T * heads, dim = headDim.
  const inPlaceCases = [[3 * 8, 64], [5 * 4, 128], [2 * 2, 256], [70, 61], [1, 8]];
  for (const entry of ['per_row', 'per_workgroup'] as const) {
    for (const [rows, dim] of inPlaceCases) {
      it(`${entry}, in place: rows=${rows}, dim=${dim}`, async () => {
        const x = randomF32(rows * dim, 300 + dim + rows, 3);
        const gamma = randomF32(dim, 400 + dim, 2);
        const eps = 1e-6;
        const xBuf = input(x);
        await expectNoGpuErrors(async () => {
          const batch = (await tuned({ rmsNormPlan: () => entry })).begin();
          batch.rmsNorm(xBuf, xBuf, input(gamma), rows, dim, eps);
          batch.submit();
        });
        const want = rmsNormRef(x, gamma, rows, dim, eps);
        expectClose(await read(xBuf, rows * dim), want);
        expect(maxAbsDiff(want, x)).toBeGreaterThan(0.1); // the buffer was rewritten
      });
    }
  }

  it('refuses gamma as the output or the input', () => {
    const [x, gamma] = [output(64), output(8)];
    expect(() => kernels.begin().rmsNorm(gamma, x, gamma, 8, 8, 1e-5)).toThrow(/also an input/);
    expect(() => kernels.begin().rmsNorm(gamma, gamma, gamma, 1, 8, 1e-5)).toThrow(/also an input/);
  });

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

  // Partial rotary (HF partial_rotary_factor, llama.cpp n_dims < head_dim): only the first
  // rotaryDims elements of a head rotate, by rotaryDims / 2 frequencies; and LongRoPE's magnitude.
  const partialCases = [
    { T: 3, numHeads: 2, headDim: 64, rotaryDims: 16, magnitude: 1, startPos: 9 },
    { T: 5, numHeads: 3, headDim: 8, rotaryDims: 6, magnitude: 1.19, startPos: 0 },
    { T: 2, numHeads: 2, headDim: 128, rotaryDims: 96, magnitude: 1, startPos: 7000 }, // Phi-3.5's 0.75
    { T: 2, numHeads: 4, headDim: 96, rotaryDims: 96, magnitude: 1.4, startPos: 300 }, // magnitude alone
  ];
  for (const { T, numHeads, headDim, rotaryDims, magnitude, startPos } of partialCases) {
    for (const pairing of ['adjacent', 'halves'] as const) {
      it(`${pairing}, ${rotaryDims} of ${headDim} dims rotate, magnitude ${magnitude}: T=${T}, heads=${numHeads}, startPos=${startPos}`, async () => {
        const n = T * numHeads * headDim;
        const x = randomF32(n, 850 + n + rotaryDims);
        const invFreq = ropeInvFreq(rotaryDims, 10000);
        const xBuf = input(x);
        const batch = kernels.begin();
        batch.rope(xBuf, input(invFreq), { T, startPos }, { heads: numHeads, headDim, pairing, rotaryDims, magnitude });
        batch.submit();
        const got = await read(xBuf, n);
        const want = ropeRef(x, T, numHeads, headDim, startPos, invFreq, pairing, { rotaryDims, magnitude });
        expectClose(got, want);
        for (let head = 0; head < T * numHeads; head++) {
          const pass = (a: Float32Array) => Array.from(a.subarray(head * headDim + rotaryDims, (head + 1) * headDim));
          expect(pass(got)).toEqual(pass(x)); // the elements past rotaryDims pass through, bit for bit
        }
        if (magnitude !== 1) {
          const unit = ropeRef(x, T, numHeads, headDim, startPos, invFreq, pairing, { rotaryDims });
          expect(maxAbsDiff(want, unit)).toBeGreaterThan(1e-2 * maxAbs(want));
        }
        if (rotaryDims < headDim) {
          // Rotating the whole head (with the same frequencies spread over it) is far off.
          const whole = ropeRef(x, T, numHeads, headDim, startPos, ropeInvFreq(headDim, 10000), pairing, { magnitude });
          expect(maxAbsDiff(want, whole)).toBeGreaterThan(1e-2 * maxAbs(want));
        }
      });
    }
  }

  // A packed pass (TokenSpan.segments): inputs back to back from row 0, each token at its position
  // within its input; the reference rotates each input alone from position 0. Partial rotary and a
  // magnitude too; the tables (llama3, LongRoPE, linear scaling) are per-frequency and need no more.
  const packedCases = [
    { lengths: [3, 1, 6, 2], numHeads: 3, headDim: 8, rotaryDims: 8, magnitude: 1 },
    { lengths: [1, 40, 1], numHeads: 2, headDim: 64, rotaryDims: 48, magnitude: 1.19 },
  ];
  for (const { lengths, numHeads, headDim, rotaryDims, magnitude } of packedCases) {
    for (const pairing of ['adjacent', 'halves'] as const) {
      it(`packed inputs [${lengths.join(', ')}], ${pairing}, ${rotaryDims} of ${headDim} dims, magnitude ${magnitude}: positions restart per input`, async () => {
        const T = lengths.reduce((a, b) => a + b, 0);
        const row = numHeads * headDim;
        const x = randomF32(T * row, 870 + T);
        const invFreq = ropeInvFreq(rotaryDims, 10000);
        const segments = new Uint32Array(T);
        const want = new Float32Array(T * row);
        for (let i = 0, s = 0; i < lengths.length; s += lengths[i]!, i++) {
          const n = lengths[i]!;
          segments.fill(s, s, s + n);
          want.set(ropeRef(x.slice(s * row, (s + n) * row), n, numHeads, headDim, 0, invFreq, pairing, { rotaryDims, magnitude }), s * row);
        }
        const xBuf = input(x);
        const batch = kernels.begin();
        const segBuf = track(createU32Buffer(device, segments, 'segments'));
        batch.rope(xBuf, input(invFreq), { T, startPos: 0, segments: segBuf }, { heads: numHeads, headDim, pairing, rotaryDims, magnitude });
        batch.submit();
        const got = await read(xBuf, T * row);
        expectClose(got, want);
        // One sequence of T positions is far off.
        const unpacked = ropeRef(x, T, numHeads, headDim, 0, invFreq, pairing, { rotaryDims, magnitude });
        expect(maxAbsDiff(want, unpacked)).toBeGreaterThan(1e-2 * maxAbs(want));
      });
    }
  }

  it('refuses segments with a position buffer or too short', () => {
    const x = output(64);
    const batch = kernels.begin();
    const shape = { heads: 1, headDim: 8, pairing: 'halves' } as const;
    expect(() => batch.rope(x, output(4), { T: 2, startPos: 0, segments: output(2), position: output(1) }, shape)).toThrow(/position/);
    expect(() => batch.rope(x, output(4), { T: 3, startPos: 0, segments: output(2) }, shape)).toThrow(/segments/);
    batch.submit();
  });

  it('refuses an odd or too large rotaryDims and a magnitude that is not a positive number', () => {
    const x = output(64);
    const batch = kernels.begin();
    for (const bad of [{ rotaryDims: 7 }, { rotaryDims: 10 }, { rotaryDims: 0 }, { magnitude: 0 }, { magnitude: NaN }]) {
      expect(() => batch.rope(x, output(8), { T: 1, startPos: 0 }, { heads: 1, headDim: 8, pairing: 'halves', ...bad })).toThrow(/rotaryDims|magnitude/);
    }
    batch.submit();
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

  // GeGLU (Gemma): gelu_tanh(gate) * up, gates far out both ways included (exp overflows: no NaN).
  for (const n of [1, 61, 1000]) {
    it(`gelu_tanh, n=${n}`, async () => {
      const gate = randomF32(n, 1700 + n, 6);
      const extremes = [-200, 200, -12, 12, -3, 1e-4, -1e-4, 0];
      gate.set(extremes.slice(0, n));
      const up = randomF32(n, 1800 + n, 2);
      const out = output(n);
      const batch = kernels.begin();
      batch.swiglu(out, input(gate), input(up), n, 'gelu_tanh');
      batch.submit();
      const got = await read(out, n);
      const want = gatedRef(gate, up, 'gelu_tanh');
      expectClose(got, want, 1e-5);
      if (n > extremes.length) {
        // On the ordinary gates, GeGLU and SwiGLU differ by far more than the tolerance.
        const [ordinary, silu] = [want.slice(extremes.length), swigluRef(gate, up).slice(extremes.length)];
        expect(maxAbsDiff(ordinary, silu)).toBeGreaterThan(1e-2 * maxAbs(ordinary));
      }
    });
  }

  it("the reference is GELU's tanh approximation, not the exact (erf) GELU", () => {
    expect(geluTanhRef(1)).toBeCloseTo(0.841192, 6); // exact GELU(1) = Φ(1) = 0.841345
    expect(geluTanhRef(-1)).toBeCloseTo(-0.158808, 6);
  });

  it('refuses an unknown activation', () => {
    const b = output(8);
    expect(() => kernels.begin().swiglu(output(8), b, output(8), 8, 'gelu' as never)).toThrow(/activation/);
  });
});

describe('softcap', () => {
  // Logits-like values, some far past the cap (and ±huge: tanh must not give NaN).
  for (const [n, cap] of [[1, 30], [1000, 30], [300, 0.5]] as const) {
    it(`n=${n}, cap ${cap}`, async () => {
      const x = randomF32(n, 1900 + n, 3 * cap);
      x.set([1e30, -1e30, 0, cap, -cap / 10].slice(0, n));
      const xBuf = input(x);
      const batch = kernels.begin();
      batch.softcap(xBuf, n, cap);
      batch.submit();
      const want = softcapRef(x, cap);
      expectClose(await read(xBuf, n), want, 1e-5);
      if (n > 1) expect(maxAbsDiff(want, x)).toBeGreaterThan(1e-2 * maxAbs(want));
    });
  }

  it('refuses a cap that is not a positive number', () => {
    const b = output(8);
    for (const cap of [0, -1, NaN]) expect(() => kernels.begin().softcap(b, 8, cap)).toThrow(/cap/);
  });
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
