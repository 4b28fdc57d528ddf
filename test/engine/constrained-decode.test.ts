// The constrained decode loop (structured output) on random-weight models, against the CPU
// reference forward pass and the CPU sampler masked the same way: greedy and seeded sampling,
// forced tokens (jump-forward), the ends of a sequence, several sequences of a session, aborts,
// and both decode step shapes (a batched step's one row, set to its position, and a DecodeStep of
// its own encoding consecutive steps).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamaGenerator } from '../../src/engine/generator.ts';
import type { DecodeResources } from '../../src/engine/decode-pipeline.ts';
import type { FinishReason, GeneratedToken, GenerationSession, ModelInfo, SamplingParams, SequenceOptions, SessionRequest } from '../../src/engine/types.ts';
import { counterDelta, gpuCounters } from '../../src/gpu/counters.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { createRandomStream } from '../../src/sampling/random.ts';
import { logSoftmax } from '../../src/sampling/logprobs.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { allowAll, ScriptedConstraint, type ConstraintScript } from '../helpers/scripted-constraint.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { isAllowed, maskOf } from '../reference/mask.ts';
import { SequenceSampler } from '../reference/sampler.ts';
import { IdTokenizer } from '../helpers/id-tokenizer.ts';

const CAPACITY = 64;
const V = 97;
const STOP = 2; // IdTokenizer's EOS

const info: ModelInfo = { id: 'random', aliases: [], architecture: 'llama', contextLength: CAPACITY, vocabSize: V, format: 'gguf', created: 0 };

interface TestModel {
  generator: LlamaGenerator;
  reference: { config: LlamaConfig; weights: CpuLlamaWeights };
}

/** One row of the batched step (the default), and each sequence's DecodeStep of consecutive steps (batchStep 'separate', decode_layer.wgsl). */
let plain: TestModel;
let consecutive: TestModel;

async function testModel(intermediateSize: number, decodeLayer: boolean, seed: number): Promise<TestModel> {
  const ctx = await testGpu();
  const config = tinyConfig({ vocabSize: V, contextLength: 64, intermediateSize });
  const built = buildRandomModel(ctx, config, 'f32', seed);
  const model = await LlamaModel.create(ctx, config, built.gpu, decodeLayer ? { tuning: { decodeLayer: () => true } } : {});
  const generator = new LlamaGenerator(model, new IdTokenizer(V), info, model.createKvCache(CAPACITY), decodeLayer ? { batchStep: 'separate' } : {});
  return { generator, reference: { config, weights: built.cpu } };
}

async function decodeStepOf(g: LlamaGenerator) {
  return (await (g as unknown as { decodeResources(): Promise<DecodeResources> }).decodeResources()).decodeStep;
}

beforeAll(async () => {
  plain = await testModel(61, false, 5);
  consecutive = await testModel(60, true, 6);
  expect((await decodeStepOf(plain.generator)).consecutive).toBeUndefined();
  expect((await decodeStepOf(consecutive.generator)).consecutive).toBeDefined();
});

afterAll(() => {
  plain?.generator.destroy();
  consecutive?.generator.destroy();
});

const SHAPES = [
  ['a step with its own position', () => plain],
  ['consecutive steps', () => consecutive],
] as const;

const PROMPT = [1, 17, 42, 5, 88, 23, 9, 61];
const greedy: SamplingParams = { temperature: 0, topP: 1 };

interface Expected {
  tokens: { id: number; forced: boolean; raw: Float32Array }[];
  finish: FinishReason;
}

/**
 * The CPU reference of one constrained sequence: the CPU model's logits, the CPU sampler with the
 * script's masks (forced tokens drawn under a mask of their own, as the loop runs them), the
 * loop's ends. `countForced: false` leaves forced tokens out of the penalty history (a wrong
 * reference, to show that a test tells the difference).
 */
function cpuConstrained(
  model: TestModel,
  script: ConstraintScript,
  options: { sampling: SamplingParams; maxTokens: number; stream?: number; stops?: number[]; minTokens?: number; countForced?: boolean; prompt?: number[] },
): Expected {
  const prompt = options.prompt ?? PROMPT;
  const { config, weights } = model.reference;
  const cpu = new CpuLlama(config, weights, CAPACITY);
  let raw: Float32Array = cpu.forward(prompt, 0).slice((prompt.length - 1) * V);
  let unread: number | undefined; // the last token, not yet run through the model
  const logits = () => {
    if (unread !== undefined) raw = cpu.forward([unread], prompt.length + tokens.length - 1);
    unread = undefined;
    return raw;
  };
  const sampler = new SequenceSampler(V, options.sampling, prompt, createRandomStream(options.sampling.seed ?? 0, options.stream ?? 0));
  const constraint = new ScriptedConstraint(V, script);
  const stops = new Set(options.stops ?? [STOP]);
  const tokens: Expected['tokens'] = [];
  const draw = (mask: Uint32Array): number => sampler.sample(logits(), tokens.length < (options.minTokens ?? 0) ? stops : null, mask);
  const push = (id: number, forced: boolean) => {
    tokens.push({ id, forced, raw });
    if (!forced || options.countForced !== false) sampler.accept(id);
    unread = id;
  };
  for (;;) {
    if (tokens.length === options.maxTokens) return { tokens, finish: 'length' };
    for (let forced = constraint.forced(); forced.length > 0; forced = constraint.forced()) {
      for (const id of forced) {
        if (tokens.length === options.maxTokens) return { tokens, finish: 'length' };
        if (stops.has(id)) return { tokens, finish: 'stop' };
        expect(draw(maskOf(V, [id]))).toBe(id);
        push(id, true);
      }
    }
    if (tokens.length === options.maxTokens) return { tokens, finish: 'length' };
    const allowed = [...script.allowed(constraint.tokens)];
    if (!allowed.some((id) => id < V && !stops.has(id))) return { tokens, finish: 'stop' };
    const id = draw(maskOf(V, allowed));
    if (stops.has(id)) return { tokens, finish: 'stop' };
    expect(constraint.accept(id)).toBe(true);
    push(id, false);
  }
}

async function collect(seq: AsyncGenerator<GeneratedToken, FinishReason, void>): Promise<{ tokens: GeneratedToken[]; ids: number[]; finish: FinishReason }> {
  const tokens: GeneratedToken[] = [];
  for (;;) {
    const step = await seq.next();
    if (step.done) return { tokens, ids: tokens.map((t) => t.id), finish: step.value };
    tokens.push(step.value);
  }
}

/** `use` on a fresh session of PROMPT, closed whatever happens (a failed check must not keep the GPU from the next test). */
async function inSession<T>(model: TestModel, request: Partial<SessionRequest>, use: (session: GenerationSession) => Promise<T>): Promise<T> {
  const session = await model.generator.openSession({ promptTokens: PROMPT, sampling: greedy, ...request });
  try {
    return await use(session);
  } finally {
    session.close();
  }
}

/** One constrained sequence (index 0 unless told) of a fresh session; its constraint too. */
async function run(
  model: TestModel,
  script: ConstraintScript | null,
  request: Partial<SessionRequest> = {},
  options: Partial<SequenceOptions> = {},
): Promise<{ tokens: GeneratedToken[]; ids: number[]; finish: FinishReason; constraint: ScriptedConstraint | null }> {
  const constraint = script ? new ScriptedConstraint(V, script) : null;
  const result = await inSession(model, request, (session) =>
    collect(session.sequence({ index: 0, maxTokens: 12, stopTokenIds: [STOP], ...options, ...(constraint ? { constraint } : {}) })),
  );
  return { ...result, constraint };
}

/** The GPU's tokens against the reference: ids, forced flags, logprobs of the raw logits (and alternatives when asked). */
function expectReference(got: { tokens: GeneratedToken[]; finish: FinishReason }, want: Expected, logprobs?: number): void {
  expect(got.tokens.map((t) => t.id)).toEqual(want.tokens.map((t) => t.id));
  expect(got.tokens.map((t) => t.forced === true)).toEqual(want.tokens.map((t) => t.forced));
  expect(got.finish).toBe(want.finish);
  got.tokens.forEach((t, i) => {
    const lp = logSoftmax(want.tokens[i].raw);
    expect(Math.abs(t.logprob - lp[t.id]), `token ${i}`).toBeLessThan(1e-4);
    if (logprobs !== undefined) {
      const top = Array.from(lp.keys()).sort((a, b) => lp[b] - lp[a] || a - b).slice(0, logprobs);
      expect(t.topLogprobs!.map((a) => a.id), `token ${i} alternatives`).toEqual(top);
    }
  });
}

/** A grammar-like script: a window of 12 ids that moves with the last token (never the stop id). */
const window12: ConstraintScript = {
  allowed: (tokens) => {
    const lo = 3 + (((tokens.at(-1) ?? 0) * 7) % 80);
    return Array.from({ length: 12 }, (_, i) => lo + i);
  },
};

/** Forces [40, 41, 42] first, then [11, 12] after each sampled even token; otherwise window12. */
const withForced: ConstraintScript = {
  allowed: window12.allowed,
  forced: (tokens) => {
    if (tokens.length === 0) return [40, 41, 42];
    const last = tokens.at(-1)!;
    return last % 2 === 0 && last !== 12 && last !== 42 ? [11, 12] : [];
  },
};

for (const [shape, model] of SHAPES) {
  describe(`constrained sequences, ${shape}`, () => {
    it('greedy equals the CPU greedy decoding masked the same way; every token is allowed; logprobs are the raw ones', async () => {
      const got = await run(model(), window12, { logprobs: 3 }, { maxTokens: 14 });
      const want = cpuConstrained(model(), window12, { sampling: greedy, maxTokens: 14 });
      expectReference(got, want, 3);
      expect(got.finish).toBe('length');
      expect(got.constraint!.tokens).toEqual(got.ids);
      expect(got.constraint!.refused).toEqual([]);
      // The mask matters on this model: unconstrained greedy goes elsewhere.
      const free = await run(model(), null, {}, { maxTokens: 14 });
      expect(free.ids).not.toEqual(got.ids);
    });

    it('forced tokens are yielded with forced: true, scored and counted for the penalties as sampled ones, one read-back a round', async () => {
      // 40, forced first, is allowed after and biased up: only its count keeps greedy off it.
      const sampling: SamplingParams = { temperature: 0, topP: 1, frequencyPenalty: 30, logitBias: new Map([[40, 20]]) };
      const script: ConstraintScript = { ...withForced, allowed: (tokens) => [...window12.allowed(tokens), 40] };
      const device = model().generator.model.ctx.device;
      const constraint = new ScriptedConstraint(V, script);
      const { got, counts } = await inSession(model(), { sampling, logprobs: 2 }, async (session) => {
        const before = gpuCounters(device);
        const got = await collect(session.sequence({ index: 0, maxTokens: 16, stopTokenIds: [STOP], constraint }));
        return { got, counts: counterDelta(gpuCounters(device), before) };
      });
      const want = cpuConstrained(model(), script, { sampling, maxTokens: 16 });
      expectReference(got, want, 2);
      expect(got.tokens.slice(0, 3).map((t) => [t.id, t.forced])).toEqual([[40, true], [41, true], [42, true]]);
      expect(got.tokens.filter((t) => t.forced).length).toBeGreaterThan(4);
      // Forced tokens count: without them in the penalty history the reference goes elsewhere.
      expect(cpuConstrained(model(), script, { sampling, maxTokens: 16, countForced: false }).tokens[3].id).toBe(40);
      expect(got.ids[3]).not.toBe(40);
      // Each round is the forced tokens and the sampled step after them; the last may be forced tokens alone.
      const sampled = got.tokens.filter((t) => !t.forced).length;
      expect(counts.readBacks).toBe(sampled + (got.tokens.at(-1)!.forced ? 1 : 0));
      // After the first sequence (the test before), a token creates nothing on the GPU.
      expect([counts.buffersCreated, counts.bindGroupsCreated, counts.pipelinesCreated]).toEqual([0, 0, 0]);
    });

    it('a forced run longer than the record slots takes several rounds; maxTokens inside a run ends with length', async () => {
      const long = Array.from({ length: 40 }, (_, i) => 3 + ((i * 5) % 90));
      const script: ConstraintScript = { allowed: window12.allowed, forced: (tokens) => (tokens.length === 0 ? long : []) };
      const device = model().generator.model.ctx.device;
      const before = gpuCounters(device).readBacks;
      const got = await run(model(), script, {}, { maxTokens: 44 });
      const readBacks = gpuCounters(device).readBacks - before;
      expectReference(got, cpuConstrained(model(), script, { sampling: greedy, maxTokens: 44 }));
      expect(got.ids.slice(0, 40)).toEqual(long);
      expect(readBacks).toBe(1 + 4); // 32 forced; 8 forced and a sampled step; 3 sampled steps
      const cut = await run(model(), script, {}, { maxTokens: 35 });
      expect(cut.ids).toEqual(long.slice(0, 35));
      expect(cut.tokens.every((t) => t.forced)).toBe(true);
      expect(cut.finish).toBe('length');
    });
  });
}

describe('seeded sampling under a constraint', () => {
  const sampled: SamplingParams = { temperature: 1.2, topP: 0.95, topK: 40, seed: 77, presencePenalty: 0.5 };

  it('an all-allowing constraint gives exactly the free sequence: same Philox numbers, same penalties, same logprobs', async () => {
    for (const [shape, model] of SHAPES) {
      const free = await run(model(), null, { sampling: sampled, logprobs: 2 }, { maxTokens: 20, index: 3 });
      const all = await run(model(), allowAll(V), { sampling: sampled, logprobs: 2 }, { maxTokens: 20, index: 3 });
      expect(all.tokens, shape).toEqual(free.tokens);
      expect(new Set(free.ids).size, shape).toBeGreaterThan(5); // a sampled sequence, not one token again and again
    }
  });

  it('is reproducible and equals the CPU sampler masked the same way, with forced tokens taking their step numbers', async () => {
    for (const [shape, model] of SHAPES) {
      const a = await run(model(), withForced, { sampling: sampled }, { maxTokens: 16, index: 1 });
      const b = await run(model(), withForced, { sampling: sampled }, { maxTokens: 16, index: 1 });
      expect(b.tokens, shape).toEqual(a.tokens);
      expectReference(a, cpuConstrained(model(), withForced, { sampling: sampled, maxTokens: 16, stream: 1 }));
      const other = await run(model(), withForced, { sampling: sampled }, { maxTokens: 16, index: 2 });
      expect(other.ids, shape).not.toEqual(a.ids);
    }
  });
});

describe('the ends of a constrained sequence', () => {
  const after = (n: number, then: number[]): ConstraintScript => ({
    allowed: (tokens) => (tokens.length < n ? window12.allowed(tokens) : then),
  });

  it("stop when the mask allows nothing, or only stop ids, and the structure is whole (never sampled); a sampled stop id ends it unyielded", async () => {
    for (const [shape, model] of SHAPES) {
      const none = await run(model(), after(0, []), {}, { maxTokens: 12 });
      expect([none.ids, none.finish], shape).toEqual([[], 'stop']);
      const empty = await run(model(), after(3, []), {}, { maxTokens: 12 });
      expect([empty.ids.length, empty.finish], shape).toEqual([3, 'stop']);
      expect(empty.ids).toEqual(cpuConstrained(model(), after(3, []), { sampling: greedy, maxTokens: 12 }).tokens.map((t) => t.id));
      // Only stop ids, even with min_tokens and a bias that would pick the stop id: nothing is sampled.
      const onlyStops = await run(model(), after(4, [STOP, 90]), { sampling: { ...greedy, logitBias: new Map([[90, 50]]) } }, { maxTokens: 12, stopTokenIds: [STOP, 90], minTokens: 8 });
      expect([onlyStops.ids.length, onlyStops.finish], shape).toEqual([4, 'stop']);
      // A choice of the stop id and another, the stop id biased up: sampled, not yielded.
      const chosen = await run(model(), after(2, [STOP, 50]), { sampling: { ...greedy, logitBias: new Map([[STOP, 50]]) } }, { maxTokens: 12 });
      expect([chosen.ids.length, chosen.finish], shape).toEqual([2, 'stop']);
      expect(chosen.constraint!.tokens).toEqual(chosen.ids);
      // The same choice under min_tokens: the other id is sampled first.
      const held = await run(model(), after(2, [STOP, 50]), { sampling: { ...greedy, logitBias: new Map([[STOP, 50]]) } }, { maxTokens: 12, minTokens: 3 });
      expect(held.ids.slice(2), shape).toEqual([50]);
      expect(held.finish).toBe('stop');
      // A forced stop id ends the sequence: the forced tokens before it are yielded.
      const forcedStop: ConstraintScript = { allowed: window12.allowed, forced: (tokens) => (tokens.length === 1 ? [30, 31, STOP, 33] : []) };
      const forced = await run(model(), forcedStop, {}, { maxTokens: 12 });
      expect([forced.ids.slice(1), forced.finish], shape).toEqual([[30, 31], 'stop']);
      // A dead end (only stop ids allowed, the structure not whole): cut short, not stopped.
      const deadEnd = await run(model(), { ...after(3, [STOP]), complete: () => false }, {}, { maxTokens: 12 });
      expect([deadEnd.ids.length, deadEnd.finish], shape).toEqual([3, 'length']);
    }
  });

  it('a constraint with masks of another vocabulary, or one that refuses the sampled token, fails the sequence', async () => {
    const wrong = new ScriptedConstraint(V + 64, window12);
    const liar = new ScriptedConstraint(V, window12);
    liar.accept = () => false;
    await inSession(plain, {}, async (session) => {
      await expect(collect(session.sequence({ index: 0, maxTokens: 4, stopTokenIds: [], constraint: wrong }))).rejects.toThrow(/words/);
      await expect(collect(session.sequence({ index: 0, maxTokens: 4, stopTokenIds: [], constraint: liar }))).rejects.toThrow(/does not allow/);
    });
    // The generator still serves requests.
    const next = await run(plain, window12, {}, { maxTokens: 4 });
    expect(next.ids).toEqual(cpuConstrained(plain, window12, { sampling: greedy, maxTokens: 4 }).tokens.map((t) => t.id));
  });
});

describe('sessions, sequences and aborts', () => {
  it('each sequence of a session has its own constraint; the prefill is shared', async () => {
    const ranges = [10, 40, 70];
    const scripts = ranges.map((lo): ConstraintScript => ({ allowed: () => Array.from({ length: 20 }, (_, i) => lo + i) }));
    const sampled: SamplingParams = { temperature: 1, topP: 1, seed: 5 };
    for (const [shape, model] of SHAPES) {
      const constraints = scripts.map((s) => new ScriptedConstraint(V, s));
      const { results, free } = await inSession(model(), { sampling: sampled }, async (session) => {
        const results = [];
        for (let index = 0; index < 3; index++) {
          results.push(await collect(session.sequence({ index, maxTokens: 8, stopTokenIds: [STOP], constraint: constraints[index] })));
        }
        // The free sequence after them still starts from the prefill.
        return { results, free: await collect(session.sequence({ index: 0, maxTokens: 3, stopTokenIds: [STOP] })) };
      });
      results.forEach((r, index) => {
        expect(r.ids.every((id) => id >= ranges[index] && id < ranges[index] + 20), `${shape} sequence ${index}`).toBe(true);
        expect(constraints[index].tokens).toEqual(r.ids);
        expect(r.ids).toEqual(cpuConstrained(model(), scripts[index], { sampling: sampled, maxTokens: 8, stream: index }).tokens.map((t) => t.id));
      });
      expect(free.ids).toEqual((await run(model(), null, { sampling: sampled }, { maxTokens: 3 })).ids);
    }
  });

  it('abort mid-sequence throws AbortError at the next token; return() ends one early; the generator serves the next request', async () => {
    for (const [shape, model] of SHAPES) {
      const controller = new AbortController();
      await inSession(model(), { signal: controller.signal }, async (session) => {
        const seq = session.sequence({ index: 0, maxTokens: 12, stopTokenIds: [STOP], constraint: new ScriptedConstraint(V, withForced) });
        await seq.next();
        await seq.next();
        controller.abort();
        await expect(seq.next(), shape).rejects.toMatchObject({ name: 'AbortError' });
      });
      await inSession(model(), {}, async (session) => {
        const cut = session.sequence({ index: 0, maxTokens: 12, stopTokenIds: [STOP], constraint: new ScriptedConstraint(V, withForced) });
        for (let i = 0; i < 5; i++) expect((await cut.next()).done).toBe(false);
        expect(await cut.return('stop')).toEqual({ done: true, value: 'stop' });
      });

      const next = await run(model(), withForced, {}, { maxTokens: 10 });
      expectReference(next, cpuConstrained(model(), withForced, { sampling: greedy, maxTokens: 10 }));
    }
  });
});

describe('the helper script', () => {
  it('masks what it allows', async () => {
    const c = new ScriptedConstraint(V, window12);
    const mask = new Uint32Array(c.maskWords);
    await c.fillNextMask(mask);
    const allowed = [...window12.allowed([])];
    for (let id = 0; id < V; id++) expect(isAllowed(mask, id)).toBe(allowed.includes(id));
  });
});
