// Embeddings (LlamaGenerator.embed, src/engine/embed.ts) on a random-weight model against a float64
// CPU reference: the final norm's hidden states (CpuLlama.hiddenStates) pooled and normalised here.
// The model's q and k are scaled up so that attention is far from uniform: a vector that attended
// across inputs, or to the wrong positions, would differ.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LlamaGenerator } from '../../src/engine/generator.ts';
import type { EmbeddingInfo, ModelInfo } from '../../src/engine/types.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import type { GpuContext } from '../../src/gpu/device.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { IdTokenizer } from '../helpers/id-tokenizer.ts';

const CAPACITY = 48;
const config: LlamaConfig = tinyConfig({ vocabSize: 97, contextLength: 64 });
const V = config.vocabSize;
const D = config.hiddenSize;
/** How much q and k are scaled: attention logits of several units, so softmax is sharp. */
const SHARP = 3;

let ctx: GpuContext;
let model: LlamaModel;
let cpuWeights: CpuLlamaWeights;
const generators: LlamaGenerator[] = [];

function info(embedding: Omit<EmbeddingInfo, 'dimensions' | 'matryoshka' | 'source'>): ModelInfo {
  return {
    id: 'random', aliases: [], architecture: 'llama', contextLength: CAPACITY, vocabSize: V, format: 'gguf', created: 0,
    embedding: { ...embedding, dimensions: D, matryoshka: false, source: 'option' },
  };
}

function makeGenerator(embedding: Omit<EmbeddingInfo, 'dimensions' | 'matryoshka' | 'source'>, options: ConstructorParameters<typeof LlamaGenerator>[4] = {}): LlamaGenerator {
  const g = new LlamaGenerator(model, new IdTokenizer(V), info(embedding), model.createKvCache(CAPACITY, 'f16'), options);
  generators.push(g);
  return g;
}

beforeAll(async () => {
  ctx = await testGpu();
  const built = buildRandomModel(ctx, config, 'f32', 11);
  for (let l = 0; l < config.numLayers; l++) {
    const cpu = built.cpu.layers[l]!;
    const gpu = built.gpu.layers[l]!;
    for (const [w, m] of [[cpu.wq, gpu.wq], [cpu.wk, gpu.wk]] as const) {
      for (let i = 0; i < w.length; i++) w[i] *= SHARP;
      ctx.device.queue.writeBuffer(m.buffer, 0, new Float32Array(w));
    }
  }
  cpuWeights = built.cpu;
  model = await LlamaModel.create(ctx, config, built.gpu);
});

afterAll(() => {
  // Every generator shares the model: the last one's destroy() frees it.
  for (const g of generators) g.destroy();
});

/** The reference vector: float64 hidden states of the input alone, pooled, maybe normalised. */
function reference(tokens: number[], pooling: EmbeddingInfo['pooling'], normalize: boolean): Float64Array {
  const hidden = new CpuLlama(config, cpuWeights, CAPACITY, 'f16').hiddenStates(tokens, 0);
  const T = tokens.length;
  const v = new Float64Array(D);
  const rows = pooling === 'mean' ? [...Array(T).keys()] : [pooling === 'cls' ? 0 : T - 1];
  for (const r of rows) for (let i = 0; i < D; i++) v[i] += hidden[r * D + i]! / rows.length;
  if (normalize) {
    const n = Math.hypot(...v);
    for (let i = 0; i < D; i++) v[i] /= n;
  }
  return v;
}

function cosineDistance(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i]! * b[i]!;
    aa += a[i]! * a[i]!;
    bb += b[i]! * b[i]!;
  }
  return 1 - ab / Math.sqrt(aa * bb);
}

const norm = (v: ArrayLike<number>) => Math.hypot(...Array.from(v));

function randomInputs(count: number, seed: number, lengths: (i: number) => number): number[][] {
  const rand = mulberry32(seed);
  return Array.from({ length: count }, (_, i) => Array.from({ length: lengths(i) }, () => 3 + Math.floor(rand() * (V - 3))));
}

describe('embed() against the float64 reference', () => {
  const inputs = randomInputs(4, 7, (i) => [1, 5, 12, 30][i]!);
  for (const pooling of ['last', 'mean', 'cls'] as const) {
    for (const normalize of [true, false]) {
      it(`${pooling} pooling, ${normalize ? 'normalised' : 'not normalised'}: within 1e-4 cosine distance of the reference`, async () => {
        const g = makeGenerator({ pooling, normalize });
        const vectors = await g.embed(inputs);
        expect(vectors).toHaveLength(inputs.length);
        inputs.forEach((tokens, i) => {
          const want = reference(tokens, pooling, normalize);
          const got = vectors[i]!;
          expect(got).toBeInstanceOf(Float32Array);
          expect(got.length).toBe(D);
          expect(cosineDistance(got, want)).toBeLessThan(1e-4);
          if (normalize) expect(Math.abs(norm(got) - 1)).toBeLessThan(1e-6);
          else expect(Math.abs(norm(got) / norm(want) - 1)).toBeLessThan(1e-3);
        });
      });
    }
  }

  it('the hidden states are not uniform attention: the last token differs from a mean of the values (the sharpened model)', async () => {
    const tokens = inputs[3]!;
    expect(cosineDistance(reference(tokens, 'last', true), reference(tokens, 'mean', true))).toBeGreaterThan(1e-2);
  });
});

describe('batching', () => {
  it('a text alone and in a batch of 16 inputs of different lengths: the same vector', async () => {
    const g = makeGenerator({ pooling: 'last', normalize: true });
    const batch = randomInputs(16, 21, (i) => 1 + ((i * 7) % 40));
    const together = await g.embed(batch);
    for (const i of [0, 5, 15]) {
      const [alone] = await g.embed([batch[i]!]);
      for (let k = 0; k < D; k++) expect(Math.abs(alone![k]! - together[i]![k]!)).toBeLessThan(1e-6);
    }
    // And each against the reference.
    batch.forEach((tokens, i) => expect(cosineDistance(together[i]!, reference(tokens, 'last', true))).toBeLessThan(1e-4));
  });

  it('long inputs in passes of 3 tokens (mean pooling reads every pass): the same vectors as in one pass', async () => {
    const whole = makeGenerator({ pooling: 'mean', normalize: false });
    const chunked = makeGenerator({ pooling: 'mean', normalize: false }, { prefillChunkTokens: 3 });
    const batch = randomInputs(5, 33, (i) => [2, 7, 9, 40, 1][i]!);
    const a = await whole.embed(batch);
    const b = await chunked.embed(batch);
    batch.forEach((tokens, i) => {
      for (let k = 0; k < D; k++) expect(Math.abs(a[i]![k]! - b[i]![k]!)).toBeLessThan(1e-5);
      expect(cosineDistance(b[i]!, reference(tokens, 'mean', false))).toBeLessThan(1e-4);
    });
  });

  it('last pooling over passes of 3 tokens (groups whose passes read back no row)', async () => {
    const g = makeGenerator({ pooling: 'last', normalize: true }, { prefillChunkTokens: 3 });
    const batch = randomInputs(3, 34, (i) => [45, 4, 1][i]!);
    const vectors = await g.embed(batch);
    batch.forEach((tokens, i) => expect(cosineDistance(vectors[i]!, reference(tokens, 'last', true))).toBeLessThan(1e-4));
  });
});

describe('packing', () => {
  /** The packed passes (HiddenPass.inputs) of what `run` embeds: their input counts. */
  async function packedPasses<T>(run: () => Promise<T>): Promise<{ result: T; packed: number[] }> {
    const spy = vi.spyOn(model, 'hiddenStates');
    try {
      const result = await run();
      const packed = spy.mock.calls.flatMap(([passes]) => passes.filter((p) => p.inputs).map((p) => p.inputs!.length));
      return { result, packed };
    } finally {
      spy.mockRestore();
    }
  }

  const batch = randomInputs(16, 70, (i) => 1 + ((i * 5) % 17));
  for (const pooling of ['last', 'mean', 'cls'] as const) {
    it(`${pooling} pooling: 16 inputs of different lengths packed into a few passes give each input's vector alone (1e-5) and the reference's`, async () => {
      const g = makeGenerator({ pooling, normalize: false });
      const { result: together, packed } = await packedPasses(() => g.embed(batch));
      // Several passes, each of several whole inputs (within the 48 rows of the cache).
      expect(packed.length).toBeGreaterThan(1);
      expect(packed.reduce((a, n) => a + n, 0)).toBe(batch.length);
      for (let i = 0; i < batch.length; i++) {
        const { result: [alone], packed: none } = await packedPasses(() => g.embed([batch[i]!]));
        expect(none).toEqual([]); // an input alone runs the plain kernels
        for (let k = 0; k < D; k++) expect(Math.abs(alone![k]! - together[i]![k]!)).toBeLessThan(1e-5);
        expect(cosineDistance(together[i]!, reference(batch[i]!, pooling, false))).toBeLessThan(1e-4);
      }
    });
  }

  it('inputs longer than a pass run alone in passes of the chunk, the short ones between them packed', async () => {
    const g = makeGenerator({ pooling: 'mean', normalize: true }, { prefillChunkTokens: 8 });
    const mixed = randomInputs(7, 71, (i) => [3, 20, 2, 5, 1, 12, 4][i]!);
    const { result, packed } = await packedPasses(() => g.embed(mixed));
    // 3 alone (20 follows), 20 in passes of 8, 2 + 5 + 1 packed (8 tokens), 12 in passes, 4 alone.
    expect(packed).toEqual([3]);
    mixed.forEach((tokens, i) => expect(cosineDistance(result[i]!, reference(tokens, 'mean', true))).toBeLessThan(1e-4));
  });

  it('a model with sliding-window rings packs nothing: each input alone, as the reference', async () => {
    const windowed = tinyConfig({ vocabSize: 97, contextLength: 64, slidingWindow: 6 });
    const built = buildRandomModel(ctx, windowed, 'f32', 12);
    const ringModel = await LlamaModel.create(ctx, windowed, built.gpu);
    const cache = ringModel.createKvCache(CAPACITY, 'f16', 8);
    expect(cache.rings.some((r) => r)).toBe(true);
    const g = new LlamaGenerator(ringModel, new IdTokenizer(V), info({ pooling: 'mean', normalize: false }), cache, { prefillChunkTokens: 8 });
    try {
      const inputs = randomInputs(5, 74, (i) => [3, 2, 11, 1, 4][i]!);
      const spy = vi.spyOn(ringModel, 'hiddenStates');
      const vectors = await g.embed(inputs);
      expect(spy.mock.calls.flatMap(([passes]) => passes.filter((p) => p.inputs))).toEqual([]);
      inputs.forEach((tokens, i) => {
        const hidden = new CpuLlama(windowed, built.cpu, CAPACITY, 'f16').hiddenStates(tokens, 0);
        const want = new Float64Array(D);
        for (let r = 0; r < tokens.length; r++) for (let k = 0; k < D; k++) want[k] += hidden[r * D + k]! / tokens.length;
        expect(cosineDistance(vectors[i]!, want)).toBeLessThan(1e-4);
      });
    } finally {
      g.destroy();
    }
  });

  it('no input sees another: changing the first input of a packed pass leaves the others bit for bit', async () => {
    const g = makeGenerator({ pooling: 'mean', normalize: false });
    const inputs = randomInputs(4, 72, (i) => [9, 7, 1, 11][i]!);
    const changed = [randomInputs(1, 73, () => 9)[0]!, ...inputs.slice(1)];
    const { result: a, packed } = await packedPasses(() => g.embed(inputs));
    expect(packed).toEqual([4]);
    const b = await g.embed(changed);
    expect(cosineDistance(a[0]!, b[0]!)).toBeGreaterThan(1e-3); // the first input's vector does change
    for (let i = 1; i < inputs.length; i++) expect(Array.from(b[i]!)).toEqual(Array.from(a[i]!));
  });
});

describe('beside chat requests', () => {
  const greedy = { temperature: 0, topP: 1 };

  async function chat(g: LlamaGenerator, prompt: number[], maxTokens: number): Promise<{ tokens: number[]; cached: number }> {
    const session = await g.openSession({ promptTokens: prompt, sampling: greedy });
    try {
      const tokens: number[] = [];
      for await (const t of session.sequence({ index: 0, maxTokens, stopTokenIds: [] })) tokens.push(t.id);
      return { tokens, cached: session.cachedTokens };
    } finally {
      session.close();
    }
  }

  for (const concurrent of [8, 1]) {
    it(`an embed between two turns of a chat does not change the chat's output, and the chat's prefix is still reused (maxConcurrentSequences ${concurrent})`, async () => {
      const plain = makeGenerator({ pooling: 'last', normalize: true }, { maxConcurrentSequences: concurrent });
      const withEmbed = makeGenerator({ pooling: 'mean', normalize: true }, { maxConcurrentSequences: concurrent });
      const [turn1] = randomInputs(1, 40, () => 20);
      const results: { tokens: number[]; cached: number }[][] = [];
      for (const g of [plain, withEmbed]) {
        const first = await chat(g, turn1!, 6);
        if (g === withEmbed) await g.embed(randomInputs(6, 41, (i) => 3 + i * 5));
        const turn2 = [...turn1!, ...first.tokens, 50, 51, 52];
        const second = await chat(g, turn2, 6);
        results.push([first, second]);
      }
      expect(results[1]![0]!.tokens).toEqual(results[0]![0]!.tokens);
      expect(results[1]![1]!.tokens).toEqual(results[0]![1]!.tokens);
      // The first turn's K/V was saved before the embed wrote the working cache, and restored.
      expect(results[1]![1]!.cached).toBeGreaterThanOrEqual(turn1!.length);
    });
  }

  it('an embed while a chat decodes (short groups, each awaited): both as alone', async () => {
    const alone = makeGenerator({ pooling: 'mean', normalize: true });
    const busy = makeGenerator({ pooling: 'mean', normalize: true }, { prefillChunkTokens: 5 });
    const prompt = randomInputs(1, 60, () => 12)[0]!;
    const want = await chat(alone, prompt, 24);
    const batch = randomInputs(8, 61, (i) => 10 + i * 3);
    const session = await busy.openSession({ promptTokens: prompt, sampling: greedy });
    let vectors: Float32Array[] | undefined;
    try {
      const tokens: number[] = [];
      for await (const t of session.sequence({ index: 0, maxTokens: 24, stopTokenIds: [] })) {
        tokens.push(t.id);
        if (tokens.length === 2) {
          expect(busy.decoding).toBe(1);
          vectors = await busy.embed(batch);
        }
      }
      expect(tokens).toEqual(want.tokens);
    } finally {
      session.close();
    }
    batch.forEach((tokens, i) => expect(cosineDistance(vectors![i]!, reference(tokens, 'mean', true))).toBeLessThan(1e-4));
  });

  it('embeds wait their turn: many at once beside a chat all finish, each with its own vectors', async () => {
    const g = makeGenerator({ pooling: 'last', normalize: true });
    const sets = [randomInputs(3, 50, (i) => 4 + i), randomInputs(2, 51, (i) => 9 - i), randomInputs(4, 52, () => 6)];
    const [embedded, talk] = await Promise.all([Promise.all(sets.map((s) => g.embed(s))), chat(g, randomInputs(1, 53, () => 10)[0]!, 8)]);
    expect(talk.tokens).toHaveLength(8);
    embedded.forEach((vectors, j) => sets[j]!.forEach((tokens, i) => expect(cosineDistance(vectors[i]!, reference(tokens, 'last', true))).toBeLessThan(1e-4)));
  });
});

describe('requests', () => {
  it('refuses bad inputs before waiting: none, an empty input, ids outside the vocabulary, an input longer than the context', async () => {
    const g = makeGenerator({ pooling: 'last', normalize: true });
    await expect(g.embed([])).rejects.toThrow(/at least one input/);
    await expect(g.embed([[5], []])).rejects.toThrow(/input 1 has no tokens/);
    await expect(g.embed([[5, V]])).rejects.toThrow(/input 0: token id 97 is outside/);
    await expect(g.embed([[5, 1.5]])).rejects.toThrow(/outside the vocabulary/);
    await expect(g.embed([Array(CAPACITY + 1).fill(5)])).rejects.toThrow(/input 0 has 49 tokens; the context holds 48/);
  });

  it('an aborted signal ends the request with an AbortError, and the next one runs', async () => {
    const g = makeGenerator({ pooling: 'last', normalize: true });
    const controller = new AbortController();
    controller.abort();
    await expect(g.embed([[5, 6]], { signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
    const [v] = await g.embed([[5, 6]]);
    expect(cosineDistance(v!, reference([5, 6], 'last', true))).toBeLessThan(1e-4);
  });

  it('a model without info.embedding embeds with the last token, normalised', async () => {
    const g = new LlamaGenerator(model, new IdTokenizer(V), { ...info({ pooling: 'mean', normalize: false }), embedding: undefined }, model.createKvCache(CAPACITY, 'f16'));
    generators.push(g);
    const [v] = await g.embed([[7, 8, 9]]);
    expect(cosineDistance(v!, reference([7, 8, 9], 'last', true))).toBeLessThan(1e-4);
    expect(Math.abs(norm(v!) - 1)).toBeLessThan(1e-6);
  });
});
