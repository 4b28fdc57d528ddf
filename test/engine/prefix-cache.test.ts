// Automatic prefix caching (src/engine/prefix-cache.ts) through the generator: every request with
// the cache gives what the same request gives without it (a generator whose prefix cache is off,
// on the same weights), whichever way the cached K/V got there, and reports what it reused.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LlamaGenerator } from '../../src/engine/generator.ts';
import { commonPrefixLength, MIN_PREFILL_TOKENS, MIN_SAVED_TOKENS } from '../../src/engine/prefix-cache.ts';
import type { FinishReason, GeneratedToken, ModelInfo, SamplingParams, SequenceOptions, SessionRequest } from '../../src/engine/types.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import type { KvDType } from '../../src/model/kv-cache.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { IdTokenizer } from '../helpers/id-tokenizer.ts';

const CAPACITY = 96;
const V = 97;
const greedy: SamplingParams = { temperature: 0, topP: 1 };
const seeded: SamplingParams = { temperature: 1, topP: 0.9, seed: 7 };

/** Deterministic token ids in 1..V-1 (a distinct stream per seed). */
function tokens(n: number, seed: number): number[] {
  let x = seed * 7919 + 13;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return 1 + (x % (V - 1));
  });
}

interface Run {
  tokens: GeneratedToken[];
  ids: number[];
  finish: FinishReason;
  cached: number;
}

async function run(g: LlamaGenerator, request: SessionRequest, options: Partial<SequenceOptions> = {}): Promise<Run> {
  const session = await g.openSession(request);
  try {
    const seq = session.sequence({ index: 0, maxTokens: 8, stopTokenIds: [], ...options });
    const out: GeneratedToken[] = [];
    for (;;) {
      const step = await seq.next();
      if (step.done) return { tokens: out, ids: out.map((t) => t.id), finish: step.value, cached: session.cachedTokens };
      out.push(step.value);
    }
  } finally {
    session.close();
  }
}

/** The same tokens, and logprobs (and alternatives) within 1e-4. */
function expectSameRun(got: Run, want: Run): void {
  expect(got.ids).toEqual(want.ids);
  expect(got.finish).toBe(want.finish);
  got.tokens.forEach((t, i) => {
    const w = want.tokens[i]!;
    expect(Math.abs(t.logprob - w.logprob), `token ${i} logprob`).toBeLessThan(1e-4);
    expect(t.topLogprobs?.map((a) => a.id)).toEqual(w.topLogprobs?.map((a) => a.id));
    t.topLogprobs?.forEach((a, k) => expect(Math.abs(a.logprob - w.topLogprobs![k]!.logprob)).toBeLessThan(1e-4));
  });
}

describe('commonPrefixLength', () => {
  it('counts the shared leading ids, within the first array\'s given length', () => {
    expect(commonPrefixLength([1, 2, 3], [1, 2, 4])).toBe(2);
    expect(commonPrefixLength([1, 2, 3], [1, 2, 3, 4])).toBe(3);
    expect(commonPrefixLength([1, 2, 3], [1, 2, 3, 4], 2)).toBe(2);
    expect(commonPrefixLength([], [1])).toBe(0);
    expect(commonPrefixLength([5], [1])).toBe(0);
  });
});

interface Variant {
  name: string;
  kvDType: KvDType;
  /** The CPU adapter's one-dispatch-a-layer decode step (decode_layer.wgsl), rather than the GPU step. */
  decodeLayer: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'f32 KV, GPU decode step', kvDType: 'f32', decodeLayer: false },
  { name: 'f16 KV, GPU decode step', kvDType: 'f16', decodeLayer: false },
  { name: 'f32 KV, one dispatch a layer', kvDType: 'f32', decodeLayer: true },
];

describe.each(VARIANTS)('with the prefix cache, outputs equal those without it ($name)', (variant) => {
  let model: LlamaModel;
  let cold: LlamaGenerator;
  const made: LlamaGenerator[] = [];
  const info: ModelInfo = { id: 'random', aliases: [], architecture: 'llama', contextLength: CAPACITY, vocabSize: V, format: 'gguf', created: 0 };

  /** A generator on the shared weights with its own KV cache and prefix cache. */
  function generator(options: { maxBytes?: number; enabled?: boolean; prefillChunkTokens?: number } = {}): LlamaGenerator {
    const g = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY, variant.kvDType), {
      maxQueued: 8,
      prefixCache: { enabled: options.enabled ?? true, ...(options.maxBytes !== undefined ? { maxBytes: options.maxBytes } : {}) },
      ...(options.prefillChunkTokens ? { prefillChunkTokens: options.prefillChunkTokens } : {}),
    });
    made.push(g);
    return g;
  }

  beforeAll(async () => {
    const ctx = await testGpu();
    // FFN 60 fits decode_layer.wgsl's arena; 61 does not, so that model takes the GPU decode step.
    const config: LlamaConfig = tinyConfig({ vocabSize: V, contextLength: 128, intermediateSize: variant.decodeLayer ? 60 : 61 });
    const built = buildRandomModel(ctx, config, 'f32', 11);
    model = await LlamaModel.create(ctx, config, built.gpu, { tuning: { decodeLayer: () => variant.decodeLayer } });
    cold = generator({ enabled: false });
  });

  afterAll(() => {
    made[0]?.destroy(); // the model with it
  });

  it('a turn that appends to the previous prompt and answer reuses all of it', async () => {
    const warm = generator();
    const prompt = tokens(20, 1);
    // A first turn that ends with a stop id: every answer token's K/V is written.
    const probe = await run(cold, { promptTokens: prompt, sampling: greedy }, { maxTokens: 10 });
    const stopAt = probe.ids.findIndex((id, i) => i >= 3 && !probe.ids.slice(0, i).includes(id));
    expect(stopAt).toBeGreaterThan(0);
    const first = await run(warm, { promptTokens: prompt, sampling: greedy, logprobs: 2 }, { maxTokens: 10, stopTokenIds: [probe.ids[stopAt]!] });
    expect(first.finish).toBe('stop');
    expect(first.cached).toBe(0);
    const answer = first.ids;
    const second = [...prompt, ...answer, ...tokens(6, 2)];
    const warmSecond = await run(warm, { promptTokens: second, sampling: greedy, logprobs: 2 });
    expect(warmSecond.cached).toBe(prompt.length + answer.length);
    expectSameRun(warmSecond, await run(cold, { promptTokens: second, sampling: greedy, logprobs: 2 }));
    // The second turn ended by length: its last token's K/V is not written, the rest is reused.
    const third = [...second, ...warmSecond.ids, ...tokens(5, 3)];
    const warmThird = await run(warm, { promptTokens: third, sampling: seeded, logprobs: 1 });
    expect(warmThird.cached).toBe(second.length + warmSecond.ids.length - 1);
    expectSameRun(warmThird, await run(cold, { promptTokens: third, sampling: seeded, logprobs: 1 }));
    expect(cold.prefixCacheStats).toEqual({ enabled: false, bytes: 0, saved: 0 });
  });

  it("the same prompt again reuses all but the tokens a prefill always runs (its last)", async () => {
    const warm = generator();
    const prompt = tokens(12, 4);
    const a = await run(warm, { promptTokens: prompt, sampling: seeded });
    const b = await run(warm, { promptTokens: prompt, sampling: seeded });
    expect([a.cached, b.cached]).toEqual([0, prompt.length - MIN_PREFILL_TOKENS]);
    expectSameRun(b, a);
  });

  it('a conversation overwritten by another is saved, and restored from the copy', async () => {
    const warm = generator();
    const a = tokens(24, 5);
    const b = tokens(20, 6); // shares nothing with a
    const runA = await run(warm, { promptTokens: a, sampling: greedy });
    const runB = await run(warm, { promptTokens: b, sampling: greedy });
    expect(runB.cached).toBe(0);
    expect(warm.prefixCacheStats.saved).toBe(1);
    const a2 = [...a, ...runA.ids, ...tokens(4, 7)];
    const warmA2 = await run(warm, { promptTokens: a2, sampling: seeded, logprobs: 3 });
    expect(warmA2.cached).toBe(a.length + runA.ids.length - 1);
    expectSameRun(warmA2, await run(cold, { promptTokens: a2, sampling: seeded, logprobs: 3 }));
    // b's conversation was saved in turn when a2 overwrote it.
    const b2 = [...b, ...runB.ids, ...tokens(3, 8)];
    const warmB2 = await run(warm, { promptTokens: b2, sampling: greedy });
    expect(warmB2.cached).toBe(b.length + runB.ids.length - 1);
    expectSameRun(warmB2, await run(cold, { promptTokens: b2, sampling: greedy }));
  });

  it('saved prefixes stay within a small budget, least recently used evicted first; with none, only the last request is reused', async () => {
    const rowBytes = variant.kvDType === 'f32' ? 8 * 4 : 8 * 2; // 2 KV heads x head dim 4
    const perPosition = 2 * 2 * rowBytes; // K and V of 2 layers
    const budget = 40 * perPosition; // room for one conversation of 20 + 8 positions, not two
    const warm = generator({ maxBytes: budget });
    const prompts = [tokens(20, 9), tokens(20, 10), tokens(20, 11)];
    const answers: number[][] = [];
    for (const p of prompts) {
      answers.push((await run(warm, { promptTokens: p, sampling: greedy })).ids);
      expect(warm.prefixCacheStats.bytes).toBeLessThanOrEqual(budget);
      expect(warm.prefixCacheStats.saved).toBeLessThanOrEqual(1);
    }
    // The second conversation is the one saved (the first was evicted); the third is in the KV cache.
    const followUps = prompts.map((p, i) => [...p, ...answers[i]!, 3, 1, 4]);
    const cached = [];
    for (const i of [1, 0]) {
      const warmRun = await run(warm, { promptTokens: followUps[i]!, sampling: greedy, logprobs: 1 });
      cached.push(warmRun.cached);
      expectSameRun(warmRun, await run(cold, { promptTokens: followUps[i]!, sampling: greedy, logprobs: 1 }));
    }
    expect(cached).toEqual([27, 0]);

    const none = generator({ maxBytes: 0 });
    await run(none, { promptTokens: prompts[0]!, sampling: greedy });
    await run(none, { promptTokens: prompts[1]!, sampling: greedy });
    expect(none.prefixCacheStats).toEqual({ enabled: true, bytes: 0, saved: 0 });
    expect((await run(none, { promptTokens: followUps[0]!, sampling: greedy })).cached).toBe(0);
    // The previous prompt and one more token: all of the previous prompt is held, all but the last MIN_PREFILL_TOKENS reused.
    expect((await run(none, { promptTokens: [...followUps[0]!, 2], sampling: greedy })).cached).toBe(followUps[0]!.length + 1 - MIN_PREFILL_TOKENS);
  });

  it('cachePrompt false reuses nothing and leaves nothing; prompt logprobs score the whole prompt', async () => {
    const warm = generator();
    const prompt = tokens(18, 12);
    await run(warm, { promptTokens: prompt, sampling: greedy });
    const longer = [...prompt, ...tokens(4, 13)];
    const bypass = await run(warm, { promptTokens: longer, sampling: greedy, cachePrompt: false });
    expect(bypass.cached).toBe(0);
    expectSameRun(bypass, await run(cold, { promptTokens: longer, sampling: greedy }));
    // Its K/V is not offered: the next request finds only the first request's (saved when overwritten).
    const after = await run(warm, { promptTokens: [...longer, 9], sampling: greedy });
    expect(after.cached).toBe(prompt.length);

    const scoredSession = await warm.openSession({ promptTokens: longer, sampling: greedy, promptLogprobs: true, logprobs: 1 });
    const coldSession = await cold.openSession({ promptTokens: longer, sampling: greedy, promptLogprobs: true, logprobs: 1 });
    try {
      expect(scoredSession.cachedTokens).toBe(0);
      scoredSession.promptLogprobs!.forEach((t, i) => {
        if (i === 0) return expect(t).toBeNull();
        expect(Math.abs(t!.logprob - coldSession.promptLogprobs![i]!.logprob)).toBeLessThan(1e-4);
      });
    } finally {
      scoredSession.close();
      coldSession.close();
    }
  });

  it('concurrent requests sharing a system prompt each equal their own cold run', async () => {
    const warm = generator();
    const system = tokens(24, 14);
    const questions = [tokens(5, 15), tokens(6, 16), tokens(4, 17)];
    questions.forEach((q, i) => (q[0] = 90 + i)); // distinct right after the system prompt
    const requests = questions.map((q) => ({ promptTokens: [...system, ...q], sampling: seeded, logprobs: 2 }));
    const warmRuns = await Promise.all(requests.map((r) => run(warm, r, { maxTokens: 6 })));
    expect(warmRuns.map((r) => r.cached)).toEqual([0, system.length, system.length]);
    for (const [i, r] of requests.entries()) expectSameRun(warmRuns[i]!, await run(cold, r, { maxTokens: 6 }));
  });

  it('n sequences share the prefill; the next turn extends the last one', async () => {
    const warm = generator();
    const prompt = tokens(16, 18);
    const session = await warm.openSession({ promptTokens: prompt, sampling: seeded });
    const answers: number[][] = [];
    try {
      for (const index of [0, 1]) {
        const seq = session.sequence({ index, maxTokens: 7, stopTokenIds: [] });
        const ids: number[] = [];
        for await (const t of seq) ids.push(t.id);
        answers.push(ids);
      }
    } finally {
      session.close();
    }
    const next = [...prompt, ...answers[1]!, 7, 7];
    const warmNext = await run(warm, { promptTokens: next, sampling: greedy, logprobs: 1 });
    expect(warmNext.cached).toBe(prompt.length + answers[1]!.length - 1);
    expectSameRun(warmNext, await run(cold, { promptTokens: next, sampling: greedy, logprobs: 1 }));
  });

  it('a prefill that reuses a prefix and is aborted midway leaves only what it wrote; the next request is exact', async () => {
    const warm = generator({ prefillChunkTokens: 4 });
    const prompt = tokens(12, 19);
    await run(warm, { promptTokens: prompt, sampling: greedy });
    const longer = [...prompt, ...tokens(20, 20)];
    const controller = new AbortController();
    const forward = vi.spyOn(model, 'forward');
    forward.mockImplementationOnce(async (...args) => {
      const out = await LlamaModel.prototype.forward.apply(model, args);
      controller.abort();
      return out;
    });
    try {
      await expect(run(warm, { promptTokens: longer, sampling: greedy, signal: controller.signal })).rejects.toThrow(/abort/i);
    } finally {
      forward.mockRestore();
    }
    const again = await run(warm, { promptTokens: longer, sampling: greedy, logprobs: 2 });
    // The first request's prompt (its answer's tokens differ from `longer`), then the one chunk of 4 the aborted prefill ran.
    expect(again.cached).toBe(prompt.length + 4);
    expectSameRun(again, await run(cold, { promptTokens: longer, sampling: greedy, logprobs: 2 }));
  });

  it('a session closed while its sequence waits at a token, resumed after another request ran, claims nothing of the cache', async () => {
    const warm = generator();
    const a = tokens(20, 22);
    const session = await warm.openSession({ promptTokens: a, sampling: greedy });
    const seq = session.sequence({ index: 0, maxTokens: 8, stopTokenIds: [] });
    const first = await seq.next();
    expect(first.done).toBe(false);
    session.close(); // frees the GPU once the work in flight is done
    const b = tokens(24, 23);
    await run(warm, { promptTokens: b, sampling: greedy }); // overwrites the cache
    await expect(seq.next()).rejects.toThrow(); // the closed session's sequence ends
    const extended = [...a, (first.value as GeneratedToken).id, 5, 6, 7];
    const again = await run(warm, { promptTokens: extended, sampling: greedy, logprobs: 2 });
    expectSameRun(again, await run(cold, { promptTokens: extended, sampling: greedy, logprobs: 2 }));
    // Only what was saved of the closed request's prompt (when b overwrote it) is reused, if anything.
    expect(again.cached).toBeLessThanOrEqual(a.length);
  });

  it(`a short overwritten remainder (under ${MIN_SAVED_TOKENS} tokens) is not saved`, async () => {
    const warm = generator();
    const prompt = tokens(20, 21);
    await run(warm, { promptTokens: prompt, sampling: greedy }, { maxTokens: 4 });
    // Shares all but the last 5 tokens of the 23 held: nothing worth a copy is lost.
    await run(warm, { promptTokens: [...prompt.slice(0, 18), 1, 2, 3], sampling: greedy });
    expect(warm.prefixCacheStats.saved).toBe(0);
  });
});
