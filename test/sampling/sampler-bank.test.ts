// A SamplerBank's rows sampled together (one set of dispatches, workgroup_id.y the row) against
// each sampled alone (its own dispatches): the same tokens and the same records, bit for bit, for
// rows of every shape side by side (greedy, sampled with and without top_k / top_p, penalties,
// logit_bias, logprobs, a mask), in either order, over steps that carry penalty counts forward,
// in both the fused and the per-pass paths. The single sampler is checked against the CPU chain
// in gpu-sampler.test.ts; this is what makes a batched request's tokens those it gets alone.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import type { SamplingParams } from '../../src/sampling/types.ts';
import { GpuSampler, RECORD_BYTES } from '../../src/sampling/gpu-sampler.ts';
import { SamplerBank, type GpuSequenceSetup, type SampleRow } from '../../src/sampling/sampler-bank.ts';
import { maskOf } from '../reference/mask.ts';
import { testGpu } from '../helpers/gpu.ts';
import { randomF32 } from '../helpers/prng.ts';

let ctx: GpuContext;
beforeAll(async () => {
  ctx = await testGpu();
});
afterAll(() => ctx?.device.destroy());

const STEPS = 3;
const ROW_BYTES = (V: number) => Math.ceil((V * 4) / 256) * 256;

/** Sequences of every shape the chain has. */
function setups(V: number): GpuSequenceSetup[] {
  const p = (x: Partial<SamplingParams>): SamplingParams => ({ temperature: 1, topP: 1, ...x });
  const base = { promptTokens: [1, 5, 9, 200], banned: [2], minTokens: 0 };
  return [
    { ...base, params: p({ temperature: 0 }), seed: 1, stream: 0 },
    { ...base, params: p({ temperature: 0, logitBias: new Map([[7, 3]]) }), seed: 1, stream: 0, logprobs: 3 },
    { ...base, params: p({ temperature: 0.8 }), seed: 11, stream: 2 },
    { ...base, params: p({ topK: 20, repetitionPenalty: 1.3 }), seed: 12, stream: 0, logprobs: 5 },
    { ...base, params: p({ topP: 0.9, presencePenalty: 0.5, frequencyPenalty: 0.2 }), seed: 13, stream: 1, minTokens: 2 },
    { ...base, params: p({ topK: 50, topP: 0.8, minP: 0.05, temperature: 1.3 }), seed: 14, stream: 0, logprobs: 1 },
    { ...base, params: p({ temperature: 0.7 }), seed: 15, stream: 0, constrained: true },
  ].map((s) => ({ ...s, promptTokens: s.promptTokens.filter((id) => id < V) }));
}

/**
 * How a run samples: 'alone', each row by its own dispatches; 'together', all rows in one
 * dispatch set a step; 'standalone', each sequence by a sampler of its own bank (state 0 of one);
 * 'mixed', every step in one encoder and one submit, half the rows together and half alone.
 */
type Mode = 'alone' | 'together' | 'standalone' | 'mixed';

/** Per sequence, its records and tokens over STEPS steps. */
async function run(V: number, fused: boolean, order: number[], mode: Mode): Promise<Map<number, { records: Uint8Array; tokens: number[] }>> {
  const all = setups(V);
  const device = ctx.device;
  const bank = await SamplerBank.create(ctx, V, { states: all.length, recordSlots: STEPS, fused });
  const samplers =
    mode === 'standalone'
      ? await Promise.all(all.map(() => GpuSampler.create(ctx, V, { recordSlots: STEPS, fused })))
      : all.map((_, s) => new GpuSampler(bank, s));
  const rows = order.length;
  // Every (step, row) has its own logits and token: a submit may hold all the steps.
  const logits = device.createBuffer({ size: STEPS * rows * ROW_BYTES(V), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  const tokens = device.createBuffer({ size: STEPS * rows * 256, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const recordBytes = STEPS * RECORD_BYTES;
  const staging = device.createBuffer({ size: all.length * recordBytes + STEPS * rows * 256, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const tokensAt = all.length * recordBytes;
  order.forEach((s) => samplers[s]!.beginSequence(all[s]!));
  // The constrained sequence's masks: a different allowed set each step.
  order.forEach((s) => {
    if (!all[s]!.constrained) return;
    for (let j = 0; j < STEPS; j++) samplers[s]!.setMask(j, maskOf(V, Array.from({ length: V }, (_, id) => id).filter((id) => (id * 7 + j) % 5 === 0)));
  });
  // Each sequence's logits are its own whatever its row: seeded by (state, step).
  for (let j = 0; j < STEPS; j++) order.forEach((s, r) => device.queue.writeBuffer(logits, (j * rows + r) * ROW_BYTES(V), new Float32Array(randomF32(V, 1000 * s + j, 6))));
  let encoder = device.createCommandEncoder();
  for (let j = 0; j < STEPS; j++) {
    const pass = encoder.beginComputePass();
    const sampleRows: SampleRow[] = order.map((s, r) => ({
      state: s,
      // Rows at different steps of their sequences (Philox counters, min_tokens).
      step: j + 3 * s,
      slot: j,
      logits: { buffer: logits, offset: (j * rows + r) * ROW_BYTES(V) },
      token: { buffer: tokens, offset: (j * rows + r) * 256 },
    }));
    const alone = (row: SampleRow) => samplers[row.state]!.encodeInPass(pass, row.logits, row.step, row.token, row.slot);
    if (mode === 'together') bank.encodeRows(pass, sampleRows, j);
    else if (mode === 'mixed') {
      bank.encodeRows(pass, sampleRows.filter((_, r) => r % 2 === 0), j);
      sampleRows.filter((_, r) => r % 2 === 1).forEach(alone);
    } else sampleRows.forEach(alone);
    pass.end();
    order.forEach((_, r) => encoder.copyBufferToBuffer(tokens, (j * rows + r) * 256, staging, tokensAt + (j * rows + r) * 256, 4));
    if (mode !== 'mixed') {
      device.queue.submit([encoder.finish()]);
      encoder = device.createCommandEncoder();
    }
  }
  order.forEach((s) => encoder.copyBufferToBuffer(samplers[s]!.records, samplers[s]!.recordsOffset, staging, s * recordBytes, recordBytes));
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const bytes = new Uint8Array(staging.getMappedRange().slice(0));
  staging.unmap();
  const out = new Map<number, { records: Uint8Array; tokens: number[] }>();
  const words = new DataView(bytes.buffer);
  order.forEach((s, r) => {
    const tokensOf = Array.from({ length: STEPS }, (_, j) => words.getUint32(tokensAt + (j * rows + r) * 256, true));
    out.set(s, { records: bytes.slice(s * recordBytes, (s + 1) * recordBytes), tokens: tokensOf });
  });
  for (const b of [logits, tokens, staging]) b.destroy();
  if (mode === 'standalone') for (const sampler of samplers) sampler.destroy();
  bank.destroy();
  return out;
}

describe('a sampler bank samples many rows in one dispatch as each alone', () => {
  for (const [V, fused] of [[700, true], [1500, false]] as const) {
    it(`every shape side by side, in either order, vocabulary ${V} (${fused ? 'one dispatch' : 'one dispatch per pass'})`, async () => {
      const all = [0, 1, 2, 3, 4, 5, 6];
      // A sampler of its own bank (every offset 0) is the reference for every state of a shared one.
      const want = await run(V, fused, all, 'standalone');
      const runs = [
        await run(V, fused, all, 'alone'),
        await run(V, fused, all, 'together'),
        await run(V, fused, [...all].reverse(), 'together'),
        await run(V, fused, [5, 0, 3], 'together'),
        await run(V, fused, [...all].reverse(), 'mixed'),
      ];
      for (const s of all) {
        const { records, tokens } = want.get(s)!;
        // Each record's token is the token written where the next step reads it.
        tokens.forEach((id, j) => expect(new DataView(records.buffer).getUint32(j * RECORD_BYTES, true)).toBe(id));
        for (const got of runs) if (got.has(s)) expect(got.get(s)).toEqual(want.get(s));
      }
      // The sequences' tokens differ from one another (the comparison is not of empty records).
      expect(new Set(all.map((s) => want.get(s)!.tokens.join())).size).toBeGreaterThan(4);
    });
  }

  it('a dispatch of greedy rows runs the greedy passes only; one sampled row runs them all', async () => {
    const V = 1500;
    const bank = await SamplerBank.create(ctx, V, { states: 3, fused: false });
    const all = setups(V);
    bank.begin(0, all[0]!);
    bank.begin(1, all[1]!);
    bank.begin(2, all[5]!);
    expect(bank.dispatchesFor([0, 1])).toBe(2);
    expect(bank.dispatchesFor([0, 1, 2])).toBe(6 + 2 * 8 * 2);
    bank.destroy();
  });

  it('refuses a state twice in one dispatch, and rows in different buffers', async () => {
    const V = 300;
    const bank = await SamplerBank.create(ctx, V, { states: 2 });
    const all = setups(V);
    bank.begin(0, all[2]!);
    bank.begin(1, all[3]!);
    const a = ctx.device.createBuffer({ size: 2 * ROW_BYTES(V), usage: GPUBufferUsage.STORAGE });
    const b = ctx.device.createBuffer({ size: ROW_BYTES(V), usage: GPUBufferUsage.STORAGE });
    const t = ctx.device.createBuffer({ size: 512, usage: GPUBufferUsage.STORAGE });
    const encoder = ctx.device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    const row = (state: number, logits: GPUBuffer, offset: number): SampleRow => ({ state, step: 0, slot: 0, logits: { buffer: logits, offset }, token: { buffer: t, offset } });
    expect(() => bank.encodeRows(pass, [row(0, a, 0), row(0, a, 256 * Math.ceil((V * 4) / 256))], 0)).toThrow(/twice/);
    expect(() => bank.encodeRows(pass, [row(0, a, 0), row(1, b, 0)], 0)).toThrow(/one logits buffer/);
    pass.end();
    encoder.finish();
    for (const buffer of [a, b, t]) buffer.destroy();
    bank.destroy();
  });
});
