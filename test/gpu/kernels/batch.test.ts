// Recording many kernels at once (src/gpu/kernels/batch.ts, recorder.ts): a whole batch (dispatches
// and copies in order, shared parameter slots, two batches at once), and 2-D grid folding
// (KernelRegistry.grid) for workgroup counts above the per-dimension limit, checked against the
// plain CPU reference (test/reference/cpu-ops.ts).
import { randomF32 } from '../../helpers/prng.ts';
import { beforeAll, describe, expect, it } from 'vitest';
import { Kernels, type KernelTuning } from '../../../src/gpu/kernels/index.ts';
import { createU32Buffer } from '../../../src/gpu/buffers.ts';
import { addRef, attentionRef, embeddingRef, matmulRef, rmsNormRef, ropeInvFreq, ropeRef, swigluRef } from '../../reference/cpu-ops.ts';
import { expectClose } from '../../helpers/compare.ts';
import { counterDelta, gpuCounters } from '../../../src/gpu/counters.ts';
import {
  ctx,
  device,
  expectNoGpuErrors,
  input,
  kernels,
  output,
  read,
  track,
  useKernelGpu,
  weightMatrix,
} from '../../helpers/kernel-runs.ts';

useKernelGpu();

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
