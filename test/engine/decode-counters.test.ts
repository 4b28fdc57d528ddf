// What one decode token asks of the GPU, counted (src/gpu/counters.ts): after warm-up a token
// costs one command submission and a fixed number of dispatches, creates no buffers, bind groups
// or pipelines, and is not read back on its own (tokens come back in batches). A prefill after
// the first, of a prompt no longer than those before, creates nothing either.
//
// Two requests that differ only in max_tokens share their prefill and their first step, so the
// difference of their counts is exactly the cost of the extra decode tokens.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import { counterDelta, gpuCounters, type GpuCounters } from '../../src/gpu/counters.ts';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { STORIES_GGUF } from '../helpers/model-files.ts';

let engine: Engine;
let device: GPUDevice;

beforeAll(async () => {
  engine = await loadModelFromPath(STORIES_GGUF);
  device = (engine.generator as LlamaGenerator).model.ctx.device;
});

afterAll(() => {
  void engine?.unload();
});

/**
 * The counts of one completion of exactly `tokens` tokens (ignore_eos), ignoring its output.
 * Without the prefix cache unless `extra` asks for it: each request prefills its whole prompt.
 */
async function countCompletion(tokens: number, extra: Record<string, unknown> = {}): Promise<GpuCounters> {
  const before = gpuCounters(device);
  const response = await engine.complete({
    model: engine.info.id,
    prompt: 'Once upon a time',
    max_tokens: tokens,
    ignore_eos: true,
    cache_prompt: false,
    ...extra,
  } as Parameters<Engine['complete']>[0] & { stream?: false });
  expect(response.usage.completion_tokens).toBe(tokens);
  return counterDelta(gpuCounters(device), before);
}

describe('GPU work per decode token', () => {
  for (const [name, params] of [
    ['greedy', { temperature: 0 }],
    ['sampled with top_p, penalties and logprobs', { temperature: 0.8, top_p: 0.9, seed: 7, frequency_penalty: 0.5, logprobs: 3 }],
  ] as const) {
    it(`${name}: fixed dispatches per token, nothing created, one submit and one read-back per batch of steps`, async () => {
      await countCompletion(40, params); // warm-up: pipelines, bind groups, staging buffers
      const short = await countCompletion(8, params);
      const long = await countCompletion(40, params);
      const extra = 32;
      const perToken = (key: keyof GpuCounters) => (long[key] - short[key]) / extra;

      expect(perToken('buffersCreated')).toBe(0);
      expect(perToken('bindGroupsCreated')).toBe(0);
      expect(perToken('pipelinesCreated')).toBe(0);
      // The same dispatches every step: the difference is a whole number per token.
      expect(Number.isInteger(perToken('dispatches'))).toBe(true);
      expect(perToken('dispatches')).toBeGreaterThan(0);
      // A batch of steps is one command buffer, one submit and one read-back: at most one per
      // token (batch sizes depend on the step time, see decode-pipeline.test.ts), and each request
      // reads something back. (The prefill adds its own submits, the same in both requests.)
      expect(long.readBacks - short.readBacks).toBeLessThanOrEqual(extra);
      expect(short.readBacks).toBeGreaterThan(0);
      expect(long.submits - short.submits).toBe(long.readBacks - short.readBacks);
      expect(long.commandBuffers - short.commandBuffers).toBe(long.readBacks - short.readBacks);
      // Where the batch's steps share a compute pass (their positions on the GPU, or set by one
      // copy a row before the pass), a batch is also one compute pass and a copy or two of records.
      const generator = engine.generator as LlamaGenerator;
      const step = await generator.batchStep();
      step.setRows([{ slot: 0, position: 0, greedy: name === 'greedy' }]);
      const picks = name === 'greedy' && (step.greedyRecords?.(0) ?? step.greedy) !== undefined;
      // A plain greedy step picks its token itself: no sampler dispatch.
      if (picks) expect(perToken('dispatches')).toBe(step.dispatchCount);
      if (step.encodeInPass) {
        const batches = long.readBacks - short.readBacks;
        expect(long.computePasses - short.computePasses).toBe(batches);
        const copies = long.copies - short.copies;
        const positions = step.beginPass ? batches : 0;
        if (picks) {
          // The step's own records sit in a ring (slot = position mod slots): a batch that wraps takes a second copy.
          expect(copies).toBeGreaterThanOrEqual(positions + batches);
          expect(copies).toBeLessThanOrEqual(positions + 2 * batches);
        } else {
          expect(copies).toBe(positions + batches);
        }
      } else {
        expect(perToken('computePasses')).toBeGreaterThanOrEqual(1);
      }
    });
  }
});

describe('GPU work per decode step of a batch', () => {
  /** The counts of `rows` completions sent together, each of exactly `tokens` tokens, prompts and sampling unlike each other. */
  async function countBatch(rows: number, tokens: number): Promise<GpuCounters> {
    const before = gpuCounters(device);
    const responses = await Promise.all(
      Array.from({ length: rows }, (_, i) =>
        engine.complete({
          model: engine.info.id,
          prompt: ['Once upon a time', 'One day', 'Lily and Tom', 'The sun was'][i % 4]!,
          max_tokens: tokens,
          ignore_eos: true,
          cache_prompt: false,
          ...(i % 2 ? { temperature: 0.8, top_p: 0.9, seed: i, frequency_penalty: 0.5, logprobs: 2 } : { temperature: 0 }),
        } as Parameters<Engine['complete']>[0] & { stream?: false }),
      ),
    );
    for (const r of responses) expect(r.usage.completion_tokens).toBe(tokens);
    return counterDelta(gpuCounters(device), before);
  }

  it('rows decoding together create no buffers, bind groups or pipelines per step once warm', async () => {
    // Warm-up: the rows' samplers, their bind groups per row offset, the sessions' logits buffers.
    await countBatch(4, 40);
    await countBatch(4, 40);
    const counts = await countBatch(4, 40);
    expect(counts.buffersCreated).toBe(0);
    expect(counts.pipelinesCreated).toBe(0);
    // A sampler's bind groups are made once per (row, logits buffer) it meets, not per step: one
    // a step would be 156 here (4 rows of 39 steps).
    expect(counts.bindGroupsCreated).toBeLessThan(40);
    // The rows share rounds: fewer read-backs than one a token of one row.
    expect(counts.readBacks).toBeGreaterThan(0);
    expect(counts.readBacks).toBeLessThan(40);
  });
});

describe('GPU work per prefill', () => {
  it('after the longest prompt so far, prefills of it or shorter create no buffers and no bind groups', async () => {
    const longest = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.';
    const warmUp = await countCompletion(2, { prompt: longest });
    expect(warmUp.bindGroupsCreated).toBeGreaterThan(0);
    const tokenizer = (engine.generator as LlamaGenerator).tokenizer;
    const prompts = [longest, 'Once upon a time, there was a little girl', 'One day, Lily went'];
    // Different lengths, each more than one token (one token takes the decode path's own buffers).
    expect(new Set(prompts.map((p) => tokenizer.encode(p).length)).size).toBe(prompts.length);
    for (const prompt of prompts) {
      const counts = await countCompletion(2, { prompt });
      expect(counts.buffersCreated, prompt).toBe(0);
      expect(counts.bindGroupsCreated, prompt).toBe(0);
      expect(counts.pipelinesCreated, prompt).toBe(0);
    }
  });

  it('a prompt that extends what the KV cache holds reuses it in place: nothing created, the same dispatches as its whole prefill', async () => {
    const first = 'Once upon a time, there was a little girl named Lily.';
    const next = `${first} She loved to play outside in the park with her friends.`;
    await countCompletion(2, { prompt: next }); // the prefill's buffers for the longer prompt
    await countCompletion(2, { prompt: first, cache_prompt: true });
    const before = gpuCounters(device);
    const response = await engine.complete({ model: engine.info.id, prompt: next, max_tokens: 2, ignore_eos: true } as Parameters<Engine['complete']>[0] & { stream?: false });
    const warm = counterDelta(gpuCounters(device), before);
    expect(response.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(10);
    expect([warm.buffersCreated, warm.bindGroupsCreated, warm.pipelinesCreated]).toEqual([0, 0, 0]);
    // The same request prefilled whole runs the same dispatches; only its passes are longer.
    const cold = await countCompletion(2, { prompt: next });
    expect(warm.dispatches).toBe(cold.dispatches);
    // (The cold one first saved the conversation the KV cache held: one buffer, one submit of
    // copies; the warm one, which keeps its prompt, copied its answer back from its decode slot: one submit.)
    expect([cold.buffersCreated, cold.submits - warm.submits]).toEqual([1, 0]);
  });
});
