// The prefix cache over sliding-window layers' rings (KvCache.rings, src/engine/prefix-cache.ts):
// cached K/V is reused only while every ring still holds the window before the shared length,
// else the prompt is prefilled from 0; saved prefixes copy the rings. Either way each request
// gives what a generator with a full cache and no prefix cache gives. The sequences of one prompt
// (n, best_of) too: one that decodes past the rings overwrites the prompt's last rows, which the
// next one gets back (LlamaGenerator.restorePrompt).
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LlamaGenerator } from '../../src/engine/generator.ts';
import { createCompletion, type CompletionResponse } from '../../src/api/completions.ts';
import type { FinishReason, GeneratedToken, ModelInfo, SamplingParams, SequenceOptions, SessionRequest } from '../../src/engine/types.ts';
import { LLAMA_FAMILY, type LayerDescription, type LlamaConfig } from '../../src/model/config.ts';
import type { KvDType } from '../../src/model/kv-cache.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { IdTokenizer } from '../helpers/id-tokenizer.ts';

const CAPACITY = 112;
const V = 97;
/** The rings take passes of 16 tokens: windows 5 and 7 keep 20 and 22 rows. */
const PASS = 16;
const greedy: SamplingParams = { temperature: 0, topP: 1 };

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
    const seq = session.sequence({ index: 0, maxTokens: 6, stopTokenIds: [], ...options });
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

/** The session's sequences 0, 1, ... one after another, sequence j decoding up to maxTokens[j] tokens. */
async function runSequences(g: LlamaGenerator, request: SessionRequest, maxTokens: readonly number[]): Promise<Run[]> {
  const session = await g.openSession(request);
  const runs: Run[] = [];
  try {
    for (const [index, max] of maxTokens.entries()) {
      const seq = session.sequence({ index, maxTokens: max, stopTokenIds: [] });
      const out: GeneratedToken[] = [];
      for (;;) {
        const step = await seq.next();
        if (step.done) {
          runs.push({ tokens: out, ids: out.map((t) => t.id), finish: step.value, cached: session.cachedTokens });
          break;
        }
        out.push(step.value);
      }
    }
  } finally {
    session.close();
  }
  return runs;
}

/** The same tokens with the same logprobs, bit for bit (the rings' logits are the full cache's). */
function expectExactRuns(got: Run[], want: Run[]): void {
  expect(got.map((r) => r.ids)).toEqual(want.map((r) => r.ids));
  expect(got.map((r) => r.tokens.map((t) => t.logprob))).toEqual(want.map((r) => r.tokens.map((t) => t.logprob)));
}

function expectSameRun(got: Run, want: Run): void {
  expect(got.ids).toEqual(want.ids);
  expect(got.finish).toBe(want.finish);
  got.tokens.forEach((t, i) => expect(Math.abs(t.logprob - want.tokens[i]!.logprob), `token ${i} logprob`).toBeLessThan(1e-4));
}

const rope = { theta: 10000, rotaryDims: 4 };
const local = (slidingWindow: number): LayerDescription => ({ rope, slidingWindow });
const config: LlamaConfig = tinyConfig({
  vocabSize: V,
  contextLength: 128,
  numLayers: 3,
  family: { ...LLAMA_FAMILY, attentionScale: 1.5, layers: [local(5), { rope }, local(7)] },
});

describe.each(['f32', 'f16'] as KvDType[])('the prefix cache over window layers\' rings (%s KV)', (kvDType) => {
  let model: LlamaModel;
  let cold: LlamaGenerator;
  const made: LlamaGenerator[] = [];
  const info: ModelInfo = { id: 'random', aliases: [], architecture: 'llama', contextLength: CAPACITY, vocabSize: V, format: 'gguf', created: 0 };

  function generator(rings: boolean, enabled = true): LlamaGenerator {
    const g = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY, kvDType, rings ? PASS : Infinity), {
      maxQueued: 8,
      prefixCache: { enabled },
    });
    made.push(g);
    return g;
  }

  /** What `f` gives, and how many prefills of the whole `prompt` it ran (LlamaModel.forward calls; a ring cache's passes of 16 tokens not counted). */
  async function counting<T>(prompt: readonly number[], f: () => Promise<T>): Promise<[T, number]> {
    const spy = vi.spyOn(model, 'forward');
    try {
      const result = await f();
      return [result, spy.mock.calls.filter(([t, start]) => start === 0 && t.length === prompt.length).length];
    } finally {
      spy.mockRestore();
    }
  }

  beforeAll(async () => {
    const ctx = await testGpu();
    const built = buildRandomModel(ctx, config, 'f32', 11);
    model = await LlamaModel.create(ctx, config, built.gpu);
    cold = generator(false, false); // a full cache, no prefix cache: the reference
  });

  afterAll(() => {
    made[0]?.destroy();
  });

  it('a turn that extends the last reuses it; one that shares only a prefix older than the rings recomputes from 0; the saved copy restores the rings', async () => {
    const warm = generator(true);
    const a = tokens(60, 1); // far past the rings (20, 22 rows)
    const runA = await run(warm, { promptTokens: a, sampling: greedy });
    expect(runA.cached).toBe(0);
    expectSameRun(runA, await run(cold, { promptTokens: a, sampling: greedy }));

    // Extends a and its answer (ended by length: all but the last token's K/V written): the rings hold the window before.
    const a2 = [...a, ...runA.ids, ...tokens(5, 2)];
    const runA2 = await run(warm, { promptTokens: a2, sampling: greedy });
    expect(runA2.cached).toBe(a.length + runA.ids.length - 1);
    expectSameRun(runA2, await run(cold, { promptTokens: a2, sampling: greedy }));

    // Shares a's first 30 tokens: the rings hold positions 50.. only, so nothing is reused (a full cache would reuse 30).
    const b = [...a.slice(0, 30), ...tokens(12, 3)];
    const runB = await run(warm, { promptTokens: b, sampling: greedy });
    expect(runB.cached).toBe(0);
    expectSameRun(runB, await run(cold, { promptTokens: b, sampling: greedy }));
    expect(warm.prefixCacheStats.saved).toBe(1); // a2's conversation, rings and all

    // a2's conversation again: restored from its saved copy, whose rings hold its end.
    const a3 = [...a2, ...runA2.ids, ...tokens(4, 4)];
    const runA3 = await run(warm, { promptTokens: a3, sampling: greedy });
    expect(runA3.cached).toBe(a2.length + runA2.ids.length - 1);
    expectSameRun(runA3, await run(cold, { promptTokens: a3, sampling: greedy }));

    // The rings' share of the saved bytes: a full layer keeps every position, a ring layer its rows.
    const full = generator(false);
    await run(full, { promptTokens: a, sampling: greedy });
    await run(full, { promptTokens: tokens(20, 5), sampling: greedy });
    const rowBytes = 2 * 4 * (kvDType === 'f32' ? 4 : 2);
    const held = a.length + 5; // a and its answer but the last token
    expect(full.prefixCacheStats.bytes).toBe(3 * 2 * held * rowBytes);
  });

  it('n sequences of one prompt, the first decoding far past the rings: each equals the full cache\'s; the next request reuses the last', async () => {
    // Rings of 20 and 22 rows: a sequence of more than 15 tokens overwrites rows of the prompt's last positions.
    const prompt = tokens(30, 8);
    const lengths = [40, 30, 6];
    const seeded: SamplingParams = { temperature: 0.9, topP: 0.95, seed: 7 };
    for (const sampling of [greedy, seeded]) {
      const request: SessionRequest = { promptTokens: prompt, sampling, logprobs: 2 };
      // A full cache runs one prefill; the rings, one more before each sequence after the first (the first overwrote them, then the second).
      const [want, fullPasses] = await counting(prompt, () => runSequences(cold, request, lengths));
      expect(fullPasses).toBe(1);
      if (sampling === greedy) for (const r of want) expect(r.ids).toEqual(want[0]!.ids.slice(0, r.ids.length));
      const [unkept, ringPasses] = await counting(prompt, () => runSequences(generator(true, false), request, lengths));
      expectExactRuns(unkept, want);
      expect(ringPasses).toBe(3);
      const warm = generator(true);
      expectExactRuns(await runSequences(warm, request, lengths), want);
      // The next turn extends the prompt and the last sequence (ended by length: all but its last token's K/V written).
      const next = [...prompt, ...want[2]!.ids, ...tokens(4, 9)];
      const runNext = await run(warm, { promptTokens: next, sampling: greedy });
      expect(runNext.cached).toBe(prompt.length + lengths[2]! - 1);
      expectSameRun(runNext, await run(cold, { promptTokens: next, sampling: greedy }));
    }
  });

  it('a short first sequence leaves the rings as they are; best_of candidates over rings equal the full cache\'s', async () => {
    const prompt = tokens(30, 10);
    const request: SessionRequest = { promptTokens: prompt, sampling: greedy };
    // 10 tokens write positions 30..38: the rows of 25..29 stay, and the second sequence reads them as written.
    const [short, passes] = await counting(prompt, () => runSequences(generator(true), request, [10, 25]));
    expect(passes).toBe(1);
    expectExactRuns(short, await runSequences(cold, request, [10, 25]));
    const body = { model: 'random', prompt, n: 2, best_of: 4, max_tokens: 36, temperature: 1, seed: 3, logprobs: 1 };
    const want = (await createCompletion(cold, body)) as CompletionResponse;
    const got = (await createCompletion(generator(true), body)) as CompletionResponse;
    expect(got.choices.map((c) => c.text.length > 0)).toEqual([true, true]);
    expect(got.choices).toEqual(want.choices);
  });

  it('a sequence aborted while the prompt is prefilled again leaves the prefix cache what was rewritten', async () => {
    const g = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY, kvDType, PASS), { maxQueued: 8, prefillChunkTokens: 8 });
    made.push(g);
    const prompt = tokens(30, 11);
    const abort = new AbortController();
    const session = await g.openSession({ promptTokens: prompt, sampling: greedy, signal: abort.signal });
    const first: number[] = [];
    try {
      for await (const t of session.sequence({ index: 0, maxTokens: 40, stopTokenIds: [] })) first.push(t.id);
      // The second prefill from 0 aborts after its first chunk (positions 0..7).
      const forward = model.forward.bind(model);
      const spy = vi.spyOn(model, 'forward').mockImplementation(async (t, start, cache, options) => {
        const out = await forward(t, start, cache, options);
        if (start === 0) abort.abort();
        return out;
      });
      try {
        await expect(session.sequence({ index: 1, maxTokens: 6, stopTokenIds: [] }).next()).rejects.toThrow(/abort/i);
      } finally {
        spy.mockRestore();
      }
    } finally {
      session.close();
    }
    // The cache holds the prompt's first 8 tokens (the rings as rewritten), not the whole prompt nor the first sequence.
    const next = [...prompt, ...first.slice(0, 5), ...tokens(3, 12)];
    const runNext = await run(g, { promptTokens: next, sampling: greedy });
    expect(runNext.cached).toBe(8);
    expectSameRun(runNext, await run(cold, { promptTokens: next, sampling: greedy }));
  });

  it('a prefix within the window before a recent end is reused after a shorter request', async () => {
    const warm = generator(true);
    const a = tokens(40, 6);
    await run(warm, { promptTokens: a, sampling: greedy });
    // A prompt that is a's first 38 tokens and more: positions 33..37 are still in every ring.
    const c = [...a.slice(0, 38), ...tokens(6, 7)];
    const runC = await run(warm, { promptTokens: c, sampling: greedy });
    expect(runC.cached).toBe(38);
    expectSameRun(runC, await run(cold, { promptTokens: c, sampling: greedy }));
  });
});
