// The generation engine (sessions, sequences, logprobs, sampling, scheduling) on a random-weight
// model, against the CPU reference forward pass.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DEFAULT_PREFILL_CHUNK_TOKENS, LlamaGenerator } from '../../src/engine/generator.ts';
import { QueueFullError } from '../../src/engine/scheduler.ts';
import type { FinishReason, GeneratedToken, GenerationSession, ModelInfo, SamplingParams, SequenceOptions, SessionRequest } from '../../src/engine/types.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { IdTokenizer } from '../helpers/id-tokenizer.ts';

const CAPACITY = 40;
const config: LlamaConfig = tinyConfig({ vocabSize: 97, contextLength: 64 });
const V = config.vocabSize;

const info: ModelInfo = { id: 'random', aliases: [], architecture: 'llama', contextLength: CAPACITY, vocabSize: V, format: 'gguf', created: 0 };

let model: LlamaModel;
let cpuWeights: CpuLlamaWeights;
/** The generator under test (prefill in one pass) and one whose prefill runs in chunks of 3. */
let generator: LlamaGenerator;
let chunked: LlamaGenerator;
/** One request at a time (maxConcurrentSequences 1): a session keeps the GPU until it closes. */
let serial: LlamaGenerator;

beforeAll(async () => {
  const ctx = await testGpu();
  const built = buildRandomModel(ctx, config, 'f32', 5);
  cpuWeights = built.cpu;
  model = await LlamaModel.create(ctx, config, built.gpu);
  generator = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY), { maxQueued: 4 });
  chunked = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY), { prefillChunkTokens: 3 });
  serial = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY), { maxQueued: 4, maxConcurrentSequences: 1 });
});

afterAll(() => {
  generator?.destroy(); // destroys the shared model too
});

const PROMPT = [1, 17, 42, 5, 88, 23, 9, 61];
const greedy: SamplingParams = { temperature: 0, topP: 1 };

/** log-softmax in float64 (the reference). */
function logSoftmax(row: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) max = Math.max(max, row[i]);
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(row, (x) => x - lse);
}

function argmax(row: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/**
 * The CPU reference: greedy decoding with the sampling formulas written out here (bias,
 * repetition over prompt + generated, presence/frequency over generated). Returns the tokens and
 * the raw logits each was chosen from.
 */
function cpuGreedy(
  prompt: number[],
  steps: number,
  s: Partial<SamplingParams> = {},
  reference: { config: LlamaConfig; weights: CpuLlamaWeights; vocab?: number } = { config, weights: cpuWeights },
): { tokens: number[]; raws: Float32Array[] } {
  const cpu = new CpuLlama(reference.config, reference.weights, CAPACITY);
  let raw: Float32Array = cpu.forward(prompt, 0).slice((prompt.length - 1) * V);
  const tokens: number[] = [];
  const raws: Float32Array[] = [];
  for (let step = 0; step < steps; step++) {
    const x = Array.from(raw);
    for (const [id, b] of s.logitBias ?? []) x[id] += b;
    const r = s.repetitionPenalty ?? 1;
    for (const id of new Set([...prompt, ...tokens])) x[id] = x[id] > 0 ? x[id] / r : x[id] * r;
    const counts = new Map<number, number>();
    for (const id of tokens) counts.set(id, (counts.get(id) ?? 0) + 1);
    for (const [id, c] of counts) x[id] -= c * (s.frequencyPenalty ?? 0) + (s.presencePenalty ?? 0);
    const id = argmax(x.slice(0, reference.vocab ?? V));
    tokens.push(id);
    raws.push(raw);
    raw = cpu.forward([id], prompt.length + step);
  }
  return { tokens, raws };
}

/**
 * A random f32 model whose decode step takes decode_layer.wgsl (FFN 60: the shape fits, so the f32
 * arena with the logits folded in), and its CPU reference.
 */
async function layeredModel(overrides: Partial<LlamaConfig> = {}, seed = 6): Promise<{ model: LlamaModel; reference: { config: LlamaConfig; weights: CpuLlamaWeights } }> {
  const ctx = await testGpu();
  const layered = tinyConfig({ vocabSize: 97, contextLength: 64, intermediateSize: 60, ...overrides });
  const built = buildRandomModel(ctx, layered, 'f32', seed);
  const model = await LlamaModel.create(ctx, layered, built.gpu, { tuning: { decodeLayer: () => true } });
  return { model, reference: { config: layered, weights: built.cpu } };
}

async function collect(
  seq: AsyncGenerator<GeneratedToken, FinishReason, void>,
): Promise<{ tokens: GeneratedToken[]; ids: number[]; finish: FinishReason }> {
  const tokens: GeneratedToken[] = [];
  for (;;) {
    const step = await seq.next();
    if (step.done) return { tokens, ids: tokens.map((t) => t.id), finish: step.value };
    tokens.push(step.value);
  }
}

async function run(
  g: LlamaGenerator,
  request: SessionRequest,
  options: Partial<SequenceOptions> = {},
): Promise<{ tokens: GeneratedToken[]; ids: number[]; finish: FinishReason; session: GenerationSession }> {
  const session = await g.openSession(request);
  try {
    const result = await collect(session.sequence({ index: 0, maxTokens: 10, stopTokenIds: [], ...options }));
    return { ...result, session };
  } finally {
    session.close();
  }
}

async function ids(g: LlamaGenerator, request: Parameters<LlamaGenerator['generate']>[0]): Promise<{ ids: number[]; finish: FinishReason }> {
  const out: number[] = [];
  const it = g.generate(request);
  for (;;) {
    const step = await it.next();
    if (step.done) return { ids: out, finish: step.value };
    out.push(step.value);
  }
}

describe('sessions against the CPU reference', () => {
  it('greedy sequences equal the CPU greedy decoding, with logprobs of the raw logits', async () => {
    const want = cpuGreedy(PROMPT, 12);
    const { tokens, finish } = await run(generator, { promptTokens: PROMPT, sampling: greedy, logprobs: 3 }, { maxTokens: 12 });
    expect(finish).toBe('length');
    expect(tokens.map((t) => t.id)).toEqual(want.tokens);
    tokens.forEach((t, i) => {
      const lp = logSoftmax(want.raws[i]);
      expect(Math.abs(t.logprob - lp[t.id])).toBeLessThan(1e-4);
      const top = Array.from(lp.keys()).sort((a, b) => lp[b] - lp[a] || a - b).slice(0, 3);
      expect(t.topLogprobs!.map((a) => a.id)).toEqual(top);
      t.topLogprobs!.forEach((a) => expect(Math.abs(a.logprob - lp[a.id])).toBeLessThan(1e-4));
    });
    // generate() is the same loop
    expect(await ids(generator, { promptTokens: PROMPT, maxTokens: 12, sampling: greedy, stopTokenIds: [] })).toEqual({ ids: want.tokens, finish: 'length' });
  });

  it('a plain greedy sequence, picked by the decode step itself (no sampler dispatch), equals the CPU greedy decoding', async () => {
    const { model: m, reference } = await layeredModel();
    const g = new LlamaGenerator(m, new IdTokenizer(V), info, m.createKvCache(CAPACITY));
    try {
      const step = await g.batchStep();
      expect(step.greedy ?? step.greedyRecords?.(0)).toBeDefined();
      const want = cpuGreedy(PROMPT, 20, {}, reference);
      const plain = await run(g, { promptTokens: PROMPT, sampling: greedy }, { maxTokens: 20 });
      expect(plain.ids).toEqual(want.tokens);
      plain.tokens.forEach((t, i) => expect(Math.abs(t.logprob - logSoftmax(want.raws[i])[t.id])).toBeLessThan(1e-4));
      // logprobs 0 takes the sampler's dispatch: the same tokens.
      expect((await run(g, { promptTokens: PROMPT, sampling: greedy, logprobs: 0 }, { maxTokens: 20 })).ids).toEqual(want.tokens);
    } finally {
      g.destroy();
    }
  });

  it('two models whose last decode dispatches have the same shape but not the same layer count each pick their own greedy tokens (pipelines are shared per device)', async () => {
    // 5 and 9 layers: the last dispatch runs one layer in both, but the greedy records sit past every layer's constants.
    for (const numLayers of [5, 9, 5]) {
      const { model: m, reference } = await layeredModel({ numLayers }, numLayers);
      const g = new LlamaGenerator(m, new IdTokenizer(V), info, m.createKvCache(CAPACITY));
      try {
        const plain = await run(g, { promptTokens: PROMPT, sampling: greedy }, { maxTokens: 12 });
        expect(plain.ids, `${numLayers} layers`).toEqual(cpuGreedy(PROMPT, 12, {}, reference).tokens);
      } finally {
        g.destroy();
      }
    }
  });

  it('samples and scores only the ids its tokenizer knows, when the model has more logit rows (padding)', async () => {
    const { model: m, reference } = await layeredModel();
    const known = 48;
    const g = new LlamaGenerator(m, new IdTokenizer(known), info, m.createKvCache(CAPACITY));
    const prompt = [1, 17, 42, 5, 23, 9];
    try {
      expect(cpuGreedy(prompt, 20, {}, reference).tokens.some((id) => id >= known)).toBe(true); // the padding rows would be picked
      const want = cpuGreedy(prompt, 20, {}, { ...reference, vocab: known });
      const plain = await run(g, { promptTokens: prompt, sampling: greedy }, { maxTokens: 20 });
      expect(plain.ids).toEqual(want.tokens);
      plain.tokens.forEach((t, i) => expect(Math.abs(t.logprob - logSoftmax(want.raws[i].slice(0, known))[t.id])).toBeLessThan(1e-4));
      const sampled = await run(g, { promptTokens: prompt, sampling: { temperature: 2, topP: 1, seed: 3 } }, { maxTokens: 30 });
      expect(Math.max(...sampled.ids)).toBeLessThan(known);
      const scored = await run(g, { promptTokens: prompt, sampling: greedy, logprobs: 5, promptLogprobs: true }, { maxTokens: 3 });
      const alternatives = [...scored.tokens, ...scored.session.promptLogprobs!.filter((t) => t !== null)].flatMap((t) => t.topLogprobs!);
      expect(alternatives.length).toBeGreaterThan(0);
      for (const a of alternatives) expect(a.id).toBeLessThan(known);
      await expect(g.openSession({ promptTokens: [1, known], sampling: greedy })).rejects.toThrow(/outside the vocabulary/);
    } finally {
      g.destroy();
    }
  });

  it('a prompt longer than DEFAULT_PREFILL_CHUNK_TOKENS is prefilled in passes of at most that many tokens', async () => {
    const long = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(DEFAULT_PREFILL_CHUNK_TOKENS + 100));
    const passes: number[] = [];
    const forward = model.forward.bind(model);
    const spy = vi.spyOn(model, 'forward').mockImplementation(((tokens: readonly number[], ...rest: unknown[]) => {
      passes.push(tokens.length);
      return (forward as (...args: unknown[]) => Promise<Float32Array | null>)(tokens, ...rest);
    }) as typeof model.forward);
    try {
      const prompt = Array.from({ length: DEFAULT_PREFILL_CHUNK_TOKENS + 50 }, (_, i) => 3 + (i % 90));
      (await long.openSession({ promptTokens: prompt, sampling: greedy })).close();
      expect(passes).toEqual([DEFAULT_PREFILL_CHUNK_TOKENS, 50]);
    } finally {
      spy.mockRestore();
    }
  });

  it('prompt logprobs equal the CPU log-softmax (first null), in one pass or in chunks', async () => {
    const cpu = new CpuLlama(config, cpuWeights, CAPACITY);
    const all = cpu.forward(PROMPT, 0);
    for (const g of [generator, chunked]) {
      for (const logprobs of [undefined, 0, 4]) {
        const session = await g.openSession({ promptTokens: PROMPT, sampling: greedy, promptLogprobs: true, ...(logprobs !== undefined ? { logprobs } : {}) });
        const scored = session.promptLogprobs!;
        const first = await collect(session.sequence({ index: 0, maxTokens: 4, stopTokenIds: [] }));
        session.close();
        expect(scored.length).toBe(PROMPT.length);
        expect(scored[0]).toBeNull();
        for (let i = 1; i < PROMPT.length; i++) {
          const lp = logSoftmax(all.subarray((i - 1) * V, i * V));
          const entry = scored[i]!;
          expect(entry.id).toBe(PROMPT[i]);
          expect(Math.abs(entry.logprob - lp[PROMPT[i]])).toBeLessThan(1e-4);
          if (logprobs === undefined) expect(entry.topLogprobs).toBeUndefined();
          else {
            const top = Array.from(lp.keys()).sort((a, b) => lp[b] - lp[a] || a - b).slice(0, logprobs);
            expect(entry.topLogprobs!.map((a) => a.id)).toEqual(top);
            entry.topLogprobs!.forEach((a) => expect(Math.abs(a.logprob - lp[a.id])).toBeLessThan(1e-4));
          }
        }
        // decoding continues from the (chunked) prefill exactly like the CPU
        expect(first.ids).toEqual(cpuGreedy(PROMPT, 4).tokens);
      }
    }
    // without promptLogprobs there are none
    const plain = await generator.openSession({ promptTokens: PROMPT, sampling: greedy });
    expect(plain.promptLogprobs).toBeUndefined();
    plain.close();
  });

  it('echo scoring: max_tokens 0 yields nothing and returns length', async () => {
    const session = await generator.openSession({ promptTokens: PROMPT, sampling: greedy, promptLogprobs: true, logprobs: 0 });
    const result = await collect(session.sequence({ index: 0, maxTokens: 0, stopTokenIds: [] }));
    session.close();
    expect(result).toEqual({ tokens: [], ids: [], finish: 'length' });
    expect(session.promptLogprobs![1]!.topLogprobs).toEqual([]);
    // a one-token prompt has only the null entry
    const one = await generator.openSession({ promptTokens: [7], sampling: greedy, promptLogprobs: true });
    expect(one.promptLogprobs).toEqual([null]);
    one.close();
  });

  it('logit bias, repetition, presence and frequency penalties change greedy decoding as the formulas say', async () => {
    const settings: Partial<SamplingParams>[] = [
      { frequencyPenalty: 1.5 },
      { presencePenalty: 2 },
      { repetitionPenalty: 1.8 },
      { logitBias: new Map([[33, 4], [want0(), -100]]) },
      { logitBias: new Map([[50, 1]]), repetitionPenalty: 1.3, presencePenalty: 0.5, frequencyPenalty: 0.7 },
    ];
    const base = cpuGreedy(PROMPT, 10).tokens;
    for (const s of settings) {
      const want = cpuGreedy(PROMPT, 10, s).tokens;
      expect(want).not.toEqual(base); // the setting matters on this model
      const { ids: got } = await run(generator, { promptTokens: PROMPT, sampling: { ...greedy, ...s } }, { maxTokens: 10 });
      expect(got, JSON.stringify(s, (_k, v) => (v instanceof Map ? [...v] : v))).toEqual(want);
    }
    // +100 forces a token at every step
    const forced = await run(generator, { promptTokens: PROMPT, sampling: { temperature: 1, topP: 1, seed: 3, logitBias: new Map([[71, 100]]) } }, { maxTokens: 6 });
    expect(forced.ids).toEqual([71, 71, 71, 71, 71, 71]);
    // the logprobs stay those of the raw logits: a forced token keeps its (low) model logprob
    const raw = cpuGreedy(PROMPT, 1).raws[0];
    expect(Math.abs(forced.tokens[0].logprob - logSoftmax(raw)[71])).toBeLessThan(1e-4);
  });

  function want0(): number {
    return cpuGreedy(PROMPT, 1).tokens[0];
  }
});

describe('sequences of a session', () => {
  const sampled: SamplingParams = { temperature: 1, topP: 0.95, topK: 60, seed: 1234 };

  it('share one prefill: same seed + index -> same tokens (also in a fresh session); indices differ', async () => {
    const session = await generator.openSession({ promptTokens: PROMPT, sampling: sampled, logprobs: 1 });
    const a0 = await collect(session.sequence({ index: 0, maxTokens: 15, stopTokenIds: [] }));
    const a1 = await collect(session.sequence({ index: 1, maxTokens: 15, stopTokenIds: [] }));
    const a2 = await collect(session.sequence({ index: 2, maxTokens: 15, stopTokenIds: [] }));
    const a0again = await collect(session.sequence({ index: 0, maxTokens: 15, stopTokenIds: [] }));
    session.close();
    expect(a0again.tokens).toEqual(a0.tokens); // sequence 1 and 2 overwrote positions >= P only
    expect(a1.ids).not.toEqual(a0.ids);
    expect(a2.ids).not.toEqual(a1.ids);
    const fresh = await generator.openSession({ promptTokens: PROMPT, sampling: sampled, logprobs: 1 });
    const f1 = await collect(fresh.sequence({ index: 1, maxTokens: 15, stopTokenIds: [] }));
    fresh.close();
    expect(f1.tokens).toEqual(a1.tokens);
    // generate() is sequence 0
    expect((await ids(generator, { promptTokens: PROMPT, maxTokens: 15, sampling: sampled, stopTokenIds: [] })).ids).toEqual(a0.ids);
    // every token carries its logprob, alternatives when asked for
    for (const t of a1.tokens) {
      expect(Number.isFinite(t.logprob)).toBe(true);
      expect(t.topLogprobs).toHaveLength(1);
      expect(t.logprob).toBeLessThanOrEqual(t.topLogprobs![0].logprob);
    }
  });

  it('sampled logprobs match the CPU along the sampled path', async () => {
    const { tokens } = await run(generator, { promptTokens: PROMPT, sampling: sampled }, { maxTokens: 8 });
    expect(tokens[0].topLogprobs).toBeUndefined();
    const cpu = new CpuLlama(config, cpuWeights, CAPACITY);
    let raw: Float32Array = cpu.forward(PROMPT, 0).slice((PROMPT.length - 1) * V);
    tokens.forEach((t, i) => {
      expect(Math.abs(t.logprob - logSoftmax(raw)[t.id])).toBeLessThan(1e-4);
      raw = cpu.forward([t.id], PROMPT.length + i);
    });
  });

  it('without a seed, a session picks one base seed: runs vary, sequences of a session differ', async () => {
    const noSeed: SamplingParams = { temperature: 1.5, topP: 1 };
    const runs = new Set<string>();
    for (let i = 0; i < 3; i++) runs.add((await run(generator, { promptTokens: PROMPT, sampling: noSeed }, { maxTokens: 12 })).ids.join());
    expect(runs.size).toBeGreaterThan(1);
    const session = await generator.openSession({ promptTokens: PROMPT, sampling: noSeed });
    const s0 = await collect(session.sequence({ index: 0, maxTokens: 12, stopTokenIds: [] }));
    const s1 = await collect(session.sequence({ index: 1, maxTokens: 12, stopTokenIds: [] }));
    const s0again = await collect(session.sequence({ index: 0, maxTokens: 12, stopTokenIds: [] }));
    session.close();
    expect(s1.ids).not.toEqual(s0.ids);
    expect(s0again.ids).toEqual(s0.ids);
  });

  it('stop ids end the sequence without being yielded; min_tokens holds them back', async () => {
    const [first, second] = cpuGreedy(PROMPT, 2).tokens;
    const stopped = await run(generator, { promptTokens: PROMPT, sampling: greedy }, { stopTokenIds: [first] });
    expect(stopped.ids).toEqual([]);
    expect(stopped.finish).toBe('stop');
    const held = await run(generator, { promptTokens: PROMPT, sampling: greedy }, { stopTokenIds: [first], minTokens: 1, maxTokens: 3 });
    const want = cpuGreedy(PROMPT, 3, { logitBias: new Map([[first, -Infinity]]) }).tokens;
    expect(held.ids[0]).toBe(want[0]);
    expect(held.ids[0]).not.toBe(first);
    const later = await run(generator, { promptTokens: PROMPT, sampling: greedy }, { stopTokenIds: [second] });
    if (second !== first) {
      expect(later.ids).toEqual([first]);
      expect(later.finish).toBe('stop');
    }
  });

  it('ends with length when prompt + completion fills the context', async () => {
    const prompt = Array.from({ length: CAPACITY - 3 }, (_, i) => (i * 7 + 3) % V);
    const r = await run(generator, { promptTokens: prompt, sampling: greedy }, { maxTokens: 100 });
    expect(r.ids).toHaveLength(3);
    expect(r.finish).toBe('length');
    expect(r.ids).toEqual(cpuGreedy(prompt, 3).tokens);
    const full = Array.from({ length: CAPACITY }, (_, i) => (i * 5 + 1) % V);
    const none = await run(generator, { promptTokens: full, sampling: greedy, promptLogprobs: true }, { maxTokens: 100 });
    expect(none.ids).toEqual([]);
    expect(none.finish).toBe('length');
    expect(none.session.promptLogprobs).toHaveLength(CAPACITY);
  });

  it('rejects bad prompts and settings before queueing', async () => {
    const bad: SessionRequest[] = [
      { promptTokens: [], sampling: greedy },
      { promptTokens: Array.from({ length: CAPACITY + 1 }, () => 3), sampling: greedy },
      { promptTokens: [1, V], sampling: greedy },
      { promptTokens: [1, -1], sampling: greedy },
      { promptTokens: [1, 2.5], sampling: greedy },
      { promptTokens: [1], sampling: { temperature: -1, topP: 1 } },
      { promptTokens: [1], sampling: { temperature: 1, topP: -0.1 } },
      { promptTokens: [1], sampling: { temperature: 1, topP: NaN } },
      { promptTokens: [1], sampling: { temperature: 1, topP: 1, topK: 1.5 } },
      { promptTokens: [1], sampling: { temperature: 1, topP: 1, logitBias: new Map([[V, 1]]) } },
      { promptTokens: [1], sampling: { temperature: 1, topP: 1, repetitionPenalty: 0 } },
      { promptTokens: [1], sampling: greedy, logprobs: -1 },
    ];
    for (const request of bad) await expect(generator.openSession(request)).rejects.toThrow(RangeError);
    // nothing was left holding the GPU
    const ok = await generator.openSession({ promptTokens: [1], sampling: greedy });
    await expect(collect(ok.sequence({ index: -1, maxTokens: 1, stopTokenIds: [] }))).rejects.toThrow(RangeError);
    await expect(collect(ok.sequence({ index: 0, maxTokens: 1.5, stopTokenIds: [] }))).rejects.toThrow(RangeError);
    ok.close();
  });
});

describe('lifecycle and scheduling, one request at a time', () => {
  it('close() is safe twice; a closed session refuses sequences; the next session runs', async () => {
    const session = await serial.openSession({ promptTokens: PROMPT, sampling: greedy });
    session.close();
    session.close();
    await expect(collect(session.sequence({ index: 0, maxTokens: 2, stopTokenIds: [] }))).rejects.toThrow(/closed/);
    const next = await run(serial, { promptTokens: PROMPT, sampling: greedy }, { maxTokens: 5 });
    expect(next.ids).toEqual(cpuGreedy(PROMPT, 5).tokens);
  });

  it('a session with one slot runs its sequences one at a time: the next waits until return() ends the first', async () => {
    const session = await serial.openSession({ promptTokens: PROMPT, sampling: greedy });
    const a = session.sequence({ index: 0, maxTokens: 10, stopTokenIds: [] });
    const firstA = await a.next();
    expect(firstA.done).toBe(false);
    const b = session.sequence({ index: 2, maxTokens: 6, stopTokenIds: [] });
    let bStarted = false;
    const bFirst = b.next().then((step) => {
      bStarted = true;
      return step;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(bStarted).toBe(false);
    expect(await a.return('stop')).toEqual({ done: true, value: 'stop' });
    const first = await bFirst;
    const rest = await collect(b);
    expect([(first.value as GeneratedToken).id, ...rest.ids]).toEqual(cpuGreedy(PROMPT, 6).tokens);
    session.close();
    // the GPU was released: another session gets it at once
    const again = await serial.openSession({ promptTokens: [3], sampling: greedy });
    again.close();
  });

  it('a sequence of a session closed while it was suspended fails at its next step', async () => {
    const session = await serial.openSession({ promptTokens: PROMPT, sampling: greedy });
    const seq = session.sequence({ index: 0, maxTokens: 10, stopTokenIds: [] });
    await seq.next();
    session.close();
    await expect(seq.next()).rejects.toThrow(/closed/);
  });

  it('close() with a sequence left suspended at a token (never returned) frees the GPU for the next session', async () => {
    const session = await serial.openSession({ promptTokens: PROMPT, sampling: greedy });
    const seq = session.sequence({ index: 0, maxTokens: 10, stopTokenIds: [] });
    await seq.next(); // the caller stops here and never calls next() or return()
    session.close();
    const next = await run(serial, { promptTokens: PROMPT, sampling: greedy }, { maxTokens: 4 });
    expect(next.ids).toEqual(cpuGreedy(PROMPT, 4).tokens);
    await expect(seq.next()).rejects.toThrow(/closed/);
  });

  it('close() during a decode step frees the GPU only when the step is done', async () => {
    const session = await serial.openSession({ promptTokens: PROMPT, sampling: greedy });
    const seq = session.sequence({ index: 0, maxTokens: 10, stopTokenIds: [] });
    await seq.next();
    const pending = seq.next(); // submits the forward pass of the first token
    const other = serial.openSession({ promptTokens: [5, 6], sampling: greedy }); // waits
    expect(serial.queued).toBe(1);
    session.close();
    expect(serial.queued).toBe(1); // still waiting: the step is in flight
    await expect(pending).rejects.toThrow(/closed/);
    expect(serial.queued).toBe(0);
    (await other).close();
  });

  it('abort: the running request throws AbortError at the next token; the next request runs normally', async () => {
    const controller = new AbortController();
    const session = await serial.openSession({ promptTokens: PROMPT, sampling: greedy, signal: controller.signal });
    const seq = session.sequence({ index: 0, maxTokens: 10, stopTokenIds: [] });
    await seq.next();
    await seq.next();
    controller.abort();
    await expect(seq.next()).rejects.toMatchObject({ name: 'AbortError' });
    session.close();

    // generate() closes its session itself
    const controller2 = new AbortController();
    const it2 = serial.generate({ promptTokens: PROMPT, maxTokens: 10, sampling: greedy, stopTokenIds: [], signal: controller2.signal });
    await it2.next();
    controller2.abort();
    await expect(it2.next()).rejects.toMatchObject({ name: 'AbortError' });

    // an already-aborted signal never gets the GPU
    await expect(serial.openSession({ promptTokens: PROMPT, sampling: greedy, signal: AbortSignal.abort() })).rejects.toMatchObject({ name: 'AbortError' });

    const next = await run(serial, { promptTokens: PROMPT, sampling: greedy }, { maxTokens: 6 });
    expect(next.ids).toEqual(cpuGreedy(PROMPT, 6).tokens);
  });

  it('queue: first come, first served; an aborted waiter leaves the queue; a full queue refuses', async () => {
    const holder = await serial.openSession({ promptTokens: PROMPT, sampling: greedy });
    const order: string[] = [];
    const waiter = (name: string, signal?: AbortSignal) =>
      serial.openSession({ promptTokens: [1, 2, 3], sampling: greedy, ...(signal ? { signal } : {}) }).then(
        (s) => {
          order.push(name);
          return s;
        },
        (err: Error) => {
          order.push(`${name}:${err.name}`);
          return null;
        },
      );
    const controller = new AbortController();
    const b = waiter('b');
    const c = waiter('c', controller.signal);
    const d = waiter('d');
    const e = waiter('e');
    await expect(serial.openSession({ promptTokens: [1], sampling: greedy })).rejects.toThrow(QueueFullError); // maxQueued 4
    expect(serial.queued).toBe(4);
    controller.abort();
    await c;
    expect(order).toEqual(['c:AbortError']);
    holder.close();
    (await b)!.close();
    (await d)!.close();
    (await e)!.close();
    expect(order).toEqual(['c:AbortError', 'b', 'd', 'e']);
  });

});

describe('many requests at once', () => {
  it('concurrent requests with distinct seeds each match their own sequential run', async () => {
    const request = (seed: number) => ({ promptTokens: PROMPT, maxTokens: 8, sampling: { temperature: 1, topP: 1, seed }, stopTokenIds: [] });
    const alone: number[][] = [];
    for (let seed = 0; seed < 4; seed++) alone.push((await ids(generator, request(seed))).ids);
    const together = await Promise.all([0, 1, 2, 3].map((seed) => ids(generator, request(seed))));
    expect(together.map((r) => r.ids)).toEqual(alone);
    expect(new Set(alone.map((a) => a.join())).size).toBeGreaterThan(1);
  });

  it('breaking out of generate() frees the GPU', async () => {
    for await (const _ of generator.generate({ promptTokens: PROMPT, maxTokens: 10, sampling: greedy, stopTokenIds: [] })) break;
    const next = await run(generator, { promptTokens: PROMPT, sampling: greedy }, { maxTokens: 3 });
    expect(next.ids).toEqual(cpuGreedy(PROMPT, 3).tokens);
  });
});
