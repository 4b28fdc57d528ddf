// Prefill attention (src/gpu/kernels/attention.ts) under every plan (attentionPlan, heads and query
// tokens a thread), with sliding windows and f32 or f16 K/V caches, and the K/V cache write
// (writeKv, elementwise.ts) that fills the f16 ones, against the plain CPU reference
// (test/reference/cpu-ops.ts). The fused decode attention: fused-matvec.test.ts.
import { randomF32 } from '../../helpers/prng.ts';
import { describe, expect, it } from 'vitest';
import { attentionPlan, type KvDType } from '../../../src/gpu/kernels/index.ts';
import { createU32Buffer, readBufferU32 } from '../../../src/gpu/buffers.ts';
import { attentionRef, f32ToF16Bits, roundF16 } from '../../reference/cpu-ops.ts';
import { expectClose, maxAbs, maxAbsDiff } from '../../helpers/compare.ts';
import { device, input, kernels, output, read, track, tuned, useKernelGpu } from '../../helpers/kernel-runs.ts';

useKernelGpu();

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
    scores: { scale?: number; softcap?: number } = {},
  ): Promise<{ got: Float32Array; want: Float32Array; unwindowed: Float32Array; plain: Float32Array }> {
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
    const shape = { heads: numHeads, kvHeads: numKvHeads, headDim, slidingWindow: window, ...scores };
    batch.attention({ out, q: input(q), keys: kBuf, values: vBuf }, { T, startPos }, shape, kvDType);
    batch.submit();
    // An f16 cache holds K and V rounded to nearest even: the reference attends over those.
    const k = kvDType === 'f16' ? roundF16(kCache) : kCache;
    const v = kvDType === 'f16' ? roundF16(vCache) : vCache;
    return {
      got: await read(out, T * numHeads * headDim),
      want: attentionRef(q, k, v, T, startPos, numHeads, numKvHeads, headDim, window, scores),
      unwindowed: attentionRef(q, k, v, T, startPos, numHeads, numKvHeads, headDim, undefined, scores),
      // Without the score scale and soft-capping.
      plain: attentionRef(q, k, v, T, startPos, numHeads, numKvHeads, headDim, window),
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

  // A score scale other than 1/sqrt(headDim) (Gemma's query_pre_attn_scalar) and soft-capped scores
  // (Gemma 2), alone and together, with and without a window, under every entry and both caches;
  // each changes the answer by far more than the tolerance.
  const scoreCases = [
    { c: cases[3], scores: { scale: 0.7 } },
    { c: cases[0], scores: { softcap: 0.8 } },
    { c: windowCases[1], scores: { scale: 0.5, softcap: 1.5 } },
    { c: { T: 3, startPos: 9, numHeads: 4, numKvHeads: 2, headDim: 6 }, scores: { scale: 0.1, softcap: 0.3 } },
  ];
  for (const { c, scores } of scoreCases) {
    for (const [entry, heads] of [['per_thread', 1], ['per_thread', undefined], ['per_workgroup', undefined]] as const) {
      for (const kvDType of ['f32', 'f16'] as const) {
        const { T, startPos, numHeads, numKvHeads, headDim } = c;
        const window = 'window' in c ? `, window=${c.window}` : '';
        it(`${entry}${heads ? ', one head a thread' : ''}, ${kvDType} cache, scale ${scores.scale ?? 'default'}, softcap ${scores.softcap ?? 'none'}: T=${T}, startPos=${startPos}, heads=${numHeads}/${numKvHeads}, headDim=${headDim}${window}`, async () => {
          const { got, want, plain } = await runAttention(c, entry, kvDType, heads, undefined, scores);
          expectClose(got, want);
          expect(maxAbsDiff(want, plain)).toBeGreaterThan(1e-2 * maxAbs(want));
        });
      }
    }
  }

  // A packed pass (TokenSpan.segments): inputs of these lengths back to back from row 0, each query
  // attending only to its own input's rows; the reference is each input's attention alone over its
  // rows. Sharp scores (q and k scaled up), so a key of another input would show.
  const segmentCases = [
    { lengths: [3, 1, 5, 2, 6], numHeads: 6, numKvHeads: 2, headDim: 8 },
    { lengths: [1, 1, 1, 4], numHeads: 4, numKvHeads: 4, headDim: 6 },
    { lengths: [7, 9, 2], numHeads: 2, numKvHeads: 1, headDim: 64, window: 4 },
    { lengths: [70, 3], numHeads: 2, numKvHeads: 1, headDim: 16 }, // per_workgroup's key blocks of 64
  ];
  async function runSegments(c: (typeof segmentCases)[number], entry: 'per_thread' | 'per_workgroup', kvDType: KvDType, queries: number) {
    const { lengths, numHeads, numKvHeads, headDim } = c;
    const window = 'window' in c ? c.window : undefined;
    const T = lengths.reduce((a, b) => a + b, 0);
    const kvRow = numKvHeads * headDim;
    const qRow = numHeads * headDim;
    const q = randomF32(T * qRow, 2000 + T, 4);
    const kCache = randomF32(T * kvRow, 2100 + T, 4);
    const vCache = randomF32(T * kvRow, 2200 + T);
    const segments = new Uint32Array(T);
    const starts: number[] = [];
    for (let i = 0, s = 0; i < lengths.length; s += lengths[i]!, i++) {
      starts.push(s);
      segments.fill(s, s, s + lengths[i]!);
    }
    const forced = await tuned({ attentionPlan: () => entry, attentionQueries: () => queries });
    const batch = forced.begin();
    const out = output(T * qRow);
    let kBuf = input(kCache);
    let vBuf = input(vCache);
    if (kvDType === 'f16') {
      kBuf = output((T * kvRow) / 2);
      vBuf = output((T * kvRow) / 2);
      batch.writeKv({ keys: kBuf, values: vBuf, k: input(kCache), v: input(vCache) }, { T, startPos: 0 }, kvRow);
    }
    const segBuf = track(createU32Buffer(device, segments, 'segments'));
    const shape = { heads: numHeads, kvHeads: numKvHeads, headDim, slidingWindow: window };
    batch.attention({ out, q: input(q), keys: kBuf, values: vBuf }, { T, startPos: 0, segments: segBuf }, shape, kvDType);
    batch.submit();
    const k = kvDType === 'f16' ? roundF16(kCache) : kCache;
    const v = kvDType === 'f16' ? roundF16(vCache) : vCache;
    const want = new Float32Array(T * qRow);
    const unpacked = attentionRef(q, k, v, T, 0, numHeads, numKvHeads, headDim, window); // one causal sequence
    lengths.forEach((n, i) => {
      const s = starts[i]!;
      const alone = attentionRef(q.slice(s * qRow, (s + n) * qRow), k.slice(s * kvRow), v.slice(s * kvRow), n, 0, numHeads, numKvHeads, headDim, window);
      want.set(alone, s * qRow);
    });
    return { got: await read(out, T * qRow), want, unpacked };
  }
  for (const c of segmentCases) {
    for (const [entry, queries] of [['per_thread', 1], ['per_thread', 3], ['per_workgroup', 1]] as const) {
      for (const kvDType of ['f32', 'f16'] as const) {
        const window = 'window' in c ? `, window=${c.window}` : '';
        it(`packed inputs [${c.lengths.join(', ')}], ${entry}, ${queries} tokens a thread, ${kvDType} cache${window}: each input's own attention`, async () => {
          const { got, want, unpacked } = await runSegments(c, entry, kvDType, queries);
          expectClose(got, want);
          // Attending across inputs would change the answer by far more than the tolerance.
          expect(maxAbsDiff(want, unpacked)).toBeGreaterThan(1e-2 * maxAbs(want));
        });
      }
    }
  }

  it('refuses segments with a position buffer, too short, or over a ring', () => {
    const b = output(64);
    const batch = kernels.begin();
    const shape = { heads: 1, kvHeads: 1, headDim: 8 };
    const buffers = { out: output(64), q: b, keys: b, values: b };
    expect(() => batch.attention(buffers, { T: 2, startPos: 0, segments: output(2), position: output(1) }, shape)).toThrow(/position/);
    expect(() => batch.attention(buffers, { T: 3, startPos: 0, segments: output(2) }, shape)).toThrow(/segments/);
    const ringShape = { ...shape, slidingWindow: 2, ring: { rows: 4, positions: 8 } };
    expect(() => batch.attention(buffers, { T: 2, startPos: 0, segments: output(2) }, ringShape)).toThrow(/ring/);
    batch.submit();
  });

  it('refuses a score scale or softcap that is not a positive number', () => {
    const b = output(64);
    const batch = kernels.begin();
    for (const scores of [{ scale: 0 }, { scale: -1 }, { scale: NaN }, { softcap: 0 }, { softcap: Infinity }]) {
      const shape = { heads: 1, kvHeads: 1, headDim: 8, ...scores };
      expect(() => batch.attention({ out: output(8), q: b, keys: b, values: b }, { T: 1, startPos: 0 }, shape)).toThrow(/scale|softcap/);
    }
    batch.submit();
  });

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
