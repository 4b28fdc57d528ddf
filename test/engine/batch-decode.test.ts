// Continuous batching (src/engine/batch-decode.ts, LlamaGenerator's slots): many requests decode
// at once, and each one's tokens and logprobs are bit for bit what it gives alone, whatever runs
// beside it, in whatever order and whenever it joins; rows join and leave between rounds; a request
// that finds no free slot waits; n sequences of a prompt are rows of the same batch; requests
// sharing a prefix reuse its K/V while others decode; constrained sequences run beside the batch.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamaGenerator } from '../../src/engine/generator.ts';
import type { FinishReason, GeneratedToken, ModelInfo, SamplingParams, SessionRequest, TokenConstraint } from '../../src/engine/types.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import type { KvDType } from '../../src/model/kv-cache.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { IdTokenizer } from '../helpers/id-tokenizer.ts';
import { ScriptedConstraint, type ConstraintScript } from '../helpers/scripted-constraint.ts';
import { createCompletion, type CompletionChunk } from '../../src/api/completions.ts';

const CAPACITY = 64;
/** FFN a multiple of 4: the decode layer kernel takes it (its rows variant runs the batch on this CPU adapter). */
const config: LlamaConfig = tinyConfig({ vocabSize: 97, contextLength: 64, intermediateSize: 64 });
const V = config.vocabSize;
const info: ModelInfo = { id: 'random', aliases: [], architecture: 'llama', contextLength: CAPACITY, vocabSize: V, format: 'gguf', created: 0 };

interface Run {
  ids: number[];
  tokens: GeneratedToken[];
  finish: FinishReason;
  cached: number;
  /** performance.now() when its first token came. */
  firstAt: number;
  endAt: number;
}

interface Job {
  request: SessionRequest;
  maxTokens: number;
  constraint?: () => TokenConstraint;
}

function prompt(n: number, seed: number): number[] {
  let x = seed * 7919 + 13;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return 1 + (x % (V - 1));
  });
}

async function run(g: LlamaGenerator, job: Job, onToken?: (i: number) => void): Promise<Run> {
  const session = await g.openSession(job.request);
  const tokens: GeneratedToken[] = [];
  let firstAt = 0;
  try {
    const seq = session.sequence({ index: 0, maxTokens: job.maxTokens, stopTokenIds: [], ...(job.constraint ? { constraint: job.constraint() } : {}) });
    for (;;) {
      const step = await seq.next();
      if (step.done) return { ids: tokens.map((t) => t.id), tokens, finish: step.value, cached: session.cachedTokens, firstAt, endAt: performance.now() };
      if (tokens.length === 0) firstAt = performance.now();
      tokens.push(step.value);
      onToken?.(tokens.length);
    }
  } finally {
    session.close();
  }
}

/** Tokens, finish and every logprob (top alternatives included), bit for bit. */
function expectSame(got: Run, want: Run, label: string): void {
  expect(got.ids, label).toEqual(want.ids);
  expect(got.finish, label).toBe(want.finish);
  expect(got.tokens, label).toEqual(want.tokens);
}

const greedy: SamplingParams = { temperature: 0, topP: 1 };
/** Eight requests unlike each other: prompt lengths, greedy (plain and with logprobs) and seeded sampling, penalties, lengths. */
const JOBS: Job[] = [
  { request: { promptTokens: prompt(5, 1), sampling: greedy, cachePrompt: false }, maxTokens: 12 },
  { request: { promptTokens: prompt(17, 2), sampling: { temperature: 0.9, topP: 0.95, seed: 3 }, logprobs: 2, cachePrompt: false }, maxTokens: 9 },
  { request: { promptTokens: prompt(3, 3), sampling: greedy, logprobs: 0, cachePrompt: false }, maxTokens: 14 },
  { request: { promptTokens: prompt(11, 4), sampling: { temperature: 1.2, topP: 1, topK: 20, seed: 5, frequencyPenalty: 0.5 }, cachePrompt: false }, maxTokens: 7 },
  { request: { promptTokens: prompt(8, 5), sampling: { temperature: 0.7, topP: 0.8, seed: 9 }, logprobs: 3, cachePrompt: false }, maxTokens: 13 },
  { request: { promptTokens: prompt(20, 6), sampling: greedy, cachePrompt: false }, maxTokens: 5 },
  { request: { promptTokens: prompt(2, 7), sampling: { temperature: 1, topP: 0.9, seed: 11, repetitionPenalty: 1.3 }, cachePrompt: false }, maxTokens: 11 },
  { request: { promptTokens: prompt(14, 8), sampling: { temperature: 0.5, topP: 1, minP: 0.05, seed: 13 }, logprobs: 1, cachePrompt: false }, maxTokens: 10 },
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type BatchKind = 'auto' | 'fused' | 'separate';
/** The batch's step: the decode layer kernel's rows (auto, here), the fused kernels' batched step, a DecodeStep a row. */
const KINDS: [KvDType, BatchKind][] = [
  ['f32', 'auto'],
  ['f16', 'auto'],
  ['f16', 'fused'],
  ['f32', 'separate'],
];

describe.each(KINDS)('many requests at once (%s KV, %s batch step)', (kvDType, batchStep) => {
  let model: LlamaModel;
  let g: LlamaGenerator;
  const made: LlamaGenerator[] = [];
  let alone: Run[];

  function generator(options: ConstructorParameters<typeof LlamaGenerator>[4] = {}): LlamaGenerator {
    const made1 = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY, kvDType), { maxQueued: 16, batchStep, ...options });
    made.push(made1);
    return made1;
  }

  beforeAll(async () => {
    const ctx = await testGpu();
    model = await LlamaModel.create(ctx, config, buildRandomModel(ctx, config, 'f32', 21).gpu);
    g = generator();
    alone = [];
    for (const job of JOBS) alone.push(await run(g, job));
  });

  afterAll(() => {
    made[0]?.destroy();
  });

  it('each request gives alone, bit for bit, what it gives beside 1..7 others, at any place in the batch', async () => {
    // One kernel runs every row, or each row its own step.
    expect(g.slotStats.batched).toBe(batchStep !== 'separate');
    for (const size of [2, 5, 8]) {
      const together = await Promise.all(JOBS.slice(0, size).map((job) => run(g, job)));
      together.forEach((r, i) => expectSame(r, alone[i]!, `batch of ${size}, request ${i}`));
    }
    // Reversed: other slots, other rows.
    const reversed = await Promise.all([...JOBS].reverse().map((job) => run(g, job)));
    reversed.reverse().forEach((r, i) => expectSame(r, alone[i]!, `reversed, request ${i}`));
    expect(g.decoding).toBe(0);
  });

  it('requests that join while others decode, and leave before them, give the same', async () => {
    const runs: Promise<Run>[] = [];
    for (const [i, job] of JOBS.entries()) {
      runs.push(run(g, job));
      await sleep(3 * (i % 3)); // joins between rounds of the others
    }
    (await Promise.all(runs)).forEach((r, i) => expectSame(r, alone[i]!, `staggered, request ${i}`));
  });

  it('a request aborted mid-batch leaves at once; the others are unchanged; its slot serves the next', async () => {
    const abort = new AbortController();
    const victim: Job = { request: { ...JOBS[2]!.request, signal: abort.signal }, maxTokens: 40 };
    const others = [0, 1, 4].map((i) => run(g, JOBS[i]!));
    const aborted = run(g, victim, (n) => n === 2 && abort.abort());
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    (await Promise.all(others)).forEach((r, k) => expectSame(r, alone[[0, 1, 4][k]!]!, `beside the aborted one, request ${k}`));
    expectSame(await run(g, JOBS[3]!), alone[3]!, 'after the abort');
    expect(g.decoding).toBe(0);
  });

  it('a request that finds no free slot waits until one ends, then gives the same', async () => {
    const two = generator({ maxConcurrentSequences: 2 });
    const long: Job = { ...JOBS[0]!, maxTokens: 12 };
    const runs = await Promise.all([run(two, long), run(two, JOBS[2]!), run(two, JOBS[5]!)]);
    runs.forEach((r, i) => expectSame(r, alone[[0, 2, 5][i]!]!, `two slots, request ${i}`));
    // The third started only after one of the first two had ended.
    expect(runs[2]!.firstAt).toBeGreaterThanOrEqual(Math.min(runs[0]!.endAt, runs[1]!.endAt));
    expect(two.slotStats.made).toBe(2);
  });

  it('the n sequences of one prompt decode at once, each as it does alone', async () => {
    const request: SessionRequest = { promptTokens: prompt(9, 30), sampling: { temperature: 1, topP: 0.9, seed: 4 }, logprobs: 1, cachePrompt: false };
    const serial = generator({ maxConcurrentSequences: 1 });
    const one = async (gen: LlamaGenerator, index: number) => {
      const session = await gen.openSession(request);
      try {
        const tokens: GeneratedToken[] = [];
        for await (const t of session.sequence({ index, maxTokens: 8, stopTokenIds: [] })) tokens.push(t);
        return tokens;
      } finally {
        session.close();
      }
    };
    const want = [];
    for (let j = 0; j < 3; j++) want.push(await one(serial, j));
    const session = await g.openSession({ ...request, sequences: 3 });
    try {
      const collect = async (index: number) => {
        const tokens: GeneratedToken[] = [];
        for await (const t of session.sequence({ index, maxTokens: 8, stopTokenIds: [] })) tokens.push(t);
        return tokens;
      };
      expect(await Promise.all([0, 1, 2].map(collect))).toEqual(want);
    } finally {
      session.close();
    }
    expect(new Set(want.map((w) => w.map((t) => t.id).join())).size).toBeGreaterThan(1);
  });

  it('a request sharing a prefix with one that decodes reuses its K/V, and gives what it gives without the cache', async () => {
    const shared = prompt(24, 40);
    const a: Job = { request: { promptTokens: [...shared, 5, 6], sampling: greedy }, maxTokens: 20 };
    const b: Job = { request: { promptTokens: [...shared, 7, 8, 9], sampling: { temperature: 0.8, topP: 1, seed: 2 }, logprobs: 2 }, maxTokens: 8 };
    const cold = generator({ prefixCache: { enabled: false } });
    const wantA = await run(cold, a);
    const wantB = await run(cold, b);
    const warm = generator();
    let started!: () => void;
    const aDecoding = new Promise<void>((resolve) => (started = resolve));
    const runA = run(warm, a, (n) => n === 1 && started());
    await aDecoding;
    const runB = await run(warm, b);
    expect(runB.cached).toBe(shared.length);
    expectSame(runB, wantB, 'b');
    expectSame(await runA, wantA, 'a');
  });

  it('constrained sequences run beside the batch, and both give what they give alone', async () => {
    const window: ConstraintScript = { allowed: (tokens) => Array.from({ length: 12 }, (_, i) => (((tokens.at(-1) ?? 7) + i) % (V - 1)) + 1) };
    const constrained: Job = { request: { promptTokens: prompt(6, 50), sampling: { temperature: 0.9, topP: 1, seed: 8 }, logprobs: 2, cachePrompt: false }, maxTokens: 10, constraint: () => new ScriptedConstraint(V, window) };
    const wantC = await run(g, constrained);
    const together = await Promise.all([run(g, constrained), run(g, JOBS[1]!), run(g, JOBS[4]!), run(g, constrained)]);
    expectSame(together[0]!, wantC, 'constrained');
    expectSame(together[3]!, wantC, 'constrained, second');
    expectSame(together[1]!, alone[1]!, 'free, beside it');
    expectSame(together[2]!, alone[4]!, 'free, beside it');
  });
});

describe('slots shared between sessions (f32 KV)', () => {
  let model: LlamaModel;
  const made: LlamaGenerator[] = [];
  const generator = (options: ConstructorParameters<typeof LlamaGenerator>[4] = {}) => {
    const g = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY, 'f32'), { maxQueued: 16, ...options });
    made.push(g);
    return g;
  };
  const request: SessionRequest = { promptTokens: prompt(9, 60), sampling: { temperature: 1, topP: 0.9, seed: 6 }, logprobs: 1 };
  const collect = async (session: Awaited<ReturnType<LlamaGenerator['openSession']>>, index: number, maxTokens = 8) => {
    const tokens: GeneratedToken[] = [];
    for await (const t of session.sequence({ index, maxTokens, stopTokenIds: [] })) tokens.push(t);
    return tokens;
  };
  /** Sequence j of `request`, each alone in a generator of one slot. */
  let want: GeneratedToken[][];
  const within = <T>(p: Promise<T>, ms: number, what: string) =>
    Promise.race([p, sleep(ms).then(() => Promise.reject(new Error(`${what}: still waiting after ${ms} ms`)))]);

  beforeAll(async () => {
    const ctx = await testGpu();
    model = await LlamaModel.create(ctx, config, buildRandomModel(ctx, config, 'f32', 22).gpu);
    const serial = generator({ maxConcurrentSequences: 1 });
    want = [];
    for (let j = 0; j < 4; j++) {
      const session = await serial.openSession(request);
      try {
        want.push(await collect(session, j));
      } finally {
        session.close();
      }
    }
  });

  afterAll(() => {
    made[0]?.destroy();
  });

  it('an open session keeps its idle slots for its next sequence only until another request waits for one', async () => {
    const two = generator({ maxConcurrentSequences: 2 });
    const session = await two.openSession({ ...request, sequences: 2 });
    try {
      expect(await Promise.all([0, 1].map((j) => collect(session, j)))).toEqual(want.slice(0, 2));
      // Both slots idle in the open session: a newcomer gets them, and runs as it does alone.
      const job = JOBS[2]!;
      const aloneRun = await run(generator({ maxConcurrentSequences: 1 }), job);
      expectSame(await within(run(two, job), 10_000, 'the newcomer'), aloneRun, 'the newcomer');
      // The session's next sequence runs in a slot it takes again, its prompt brought back.
      expect(await collect(session, 2)).toEqual(want[2]);
    } finally {
      session.close();
    }
    expect(two.slotStats.free).toBe(2);
  });

  it('a request for n sequences starts with the slots that are free; its others take slots as they free', async () => {
    const two = generator({ maxConcurrentSequences: 2 });
    let started!: () => void;
    const decoding = new Promise<void>((resolve) => (started = resolve));
    const long = run(two, { request: { promptTokens: prompt(7, 61), sampling: greedy, cachePrompt: false }, maxTokens: 40 }, (n) => n === 1 && started());
    await decoding;
    const session = await two.openSession({ ...request, sequences: 4 });
    const opened = performance.now();
    try {
      expect(await Promise.all([0, 1, 2, 3].map((j) => collect(session, j)))).toEqual(want);
    } finally {
      session.close();
    }
    // It did not wait for the long request to end.
    expect((await long).endAt).toBeGreaterThan(opened);
  });

  it('a streamed request for n sequences that its reader stops early ends them all, with nothing left unhandled', async () => {
    const g = generator();
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const body = { model: 'random', prompt: prompt(6, 62), n: 3, max_tokens: 30, temperature: 1, seed: 5, stream: true };
      const chunks = (await createCompletion(g, body)) as AsyncIterable<CompletionChunk>;
      for await (const _ of chunks) break; // the client disconnects after its first chunk
      await sleep(300);
      expect(g.decoding).toBe(0);
      expect(g.slotStats.free).toBe(g.slotStats.made);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('one at a time: a constrained sequence after others runs at its own positions', async () => {
    const window: ConstraintScript = { allowed: (tokens) => Array.from({ length: 12 }, (_, i) => (((tokens.at(-1) ?? 7) + i) % (V - 1)) + 1) };
    const constrained = (promptTokens: number[]): Job => ({
      request: { promptTokens, sampling: { temperature: 0.9, topP: 1, seed: 8 }, cachePrompt: false },
      maxTokens: 10,
      constraint: () => new ScriptedConstraint(V, window),
    });
    // The first ends after its step at position 6 + 8; the third's first step is at position 15.
    const third = constrained(prompt(15, 64));
    const want = await run(generator({ maxConcurrentSequences: 1 }), third);
    const serial = generator({ maxConcurrentSequences: 1 });
    await run(serial, constrained(prompt(6, 63)));
    await run(serial, { request: { promptTokens: prompt(4, 65), sampling: greedy, cachePrompt: false }, maxTokens: 20 });
    expectSame(await run(serial, third), want, 'the third');
  });

  it('a reader that lags far behind while others come and go still gets its own tokens', async () => {
    const g = generator();
    const slow: Job = { request: { promptTokens: prompt(5, 66), sampling: { temperature: 0.8, topP: 1, seed: 12 }, logprobs: 1, cachePrompt: false }, maxTokens: 55 };
    const want = await run(generator({ maxConcurrentSequences: 1 }), slow);
    const others = [JOBS[0]!, JOBS[3]!, JOBS[5]!];
    const wantOthers = await Promise.all(others.map((job) => run(generator({ maxConcurrentSequences: 1 }), job)));
    let paused!: () => void;
    const pausedAt = new Promise<void>((resolve) => (paused = resolve));
    let resume!: () => void;
    const resumed = new Promise<void>((resolve) => (resume = resolve));
    const slowRun = (async () => {
      const session = await g.openSession(slow.request);
      try {
        const tokens: GeneratedToken[] = [];
        for await (const t of session.sequence({ index: 0, maxTokens: slow.maxTokens, stopTokenIds: [] })) {
          tokens.push(t);
          if (tokens.length === 1) {
            paused();
            await resumed; // the batch runs on without this reader
          }
        }
        return tokens;
      } finally {
        session.close();
      }
    })();
    await pausedAt;
    // Rows join after it, and leave, while it reads nothing.
    const got = [];
    for (const job of others) got.push(await run(g, job));
    got.forEach((r, i) => expectSame(r, wantOthers[i]!, `beside the slow reader, request ${i}`));
    resume();
    expect(await slowRun).toEqual(want.tokens);
  });
});
