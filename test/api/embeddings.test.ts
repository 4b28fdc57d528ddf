// POST /v1/embeddings against a fake generator whose vectors are a pure function of the token ids
// (test/helpers/embedding-fakes.ts): OpenAI's four input forms, the tokenization rule, base64,
// Matryoshka truncation, usage, vLLM's truncate_prompt_tokens, every 400, and Engine.embed
// counted in flight.
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/api/engine.ts';
import { ApiError } from '../../src/api/errors.ts';
import { handleApiRequest } from '../../src/api/handler.ts';
import { MAX_EMBEDDING_INPUTS, truncateVector, vectorBase64 } from '../../src/api/embeddings.ts';
import { expectError, json, post } from '../helpers/api-requests.ts';
import { decodeBase64Vector, embeddingEngine, EmbeddingFakeGenerator, fakeVector } from '../helpers/embedding-fakes.ts';
import { BOS, EOS } from '../helpers/fake-generator.ts';

const URL = '/v1/embeddings';
const MODEL = 'fake-llama';

function embed(engine: ReturnType<typeof embeddingEngine>, body: Record<string, unknown>) {
  return post(engine, { model: MODEL, ...body }, URL);
}

/** The vector the fake returns for `tokens`, as JSON carries it (float32 values as numbers). */
function expected(tokens: readonly number[], dimensions = 8, normalize = true): number[] {
  return Array.from(fakeVector(tokens, dimensions, normalize));
}

function norm(vector: readonly number[]): number {
  return Math.hypot(...vector);
}

describe('POST /v1/embeddings: the four input forms', () => {
  it('a string: one vector of its tokens (BOS as the tokenizer adds it), usage counting them', async () => {
    const engine = embeddingEngine();
    const tokens = engine.generator.tokenizer.encode('Once upon a time');
    expect(tokens[0]).toBe(BOS);
    const body = json(await embed(engine, { input: 'Once upon a time' }));
    expect(body).toEqual({
      object: 'list',
      data: [{ object: 'embedding', index: 0, embedding: expected(tokens) }],
      model: MODEL,
      usage: { prompt_tokens: tokens.length, total_tokens: tokens.length },
    });
    expect(engine.generator.embedCalls).toEqual([[tokens]]);
  });

  it('an array of strings: one vector each, in order, all in one embed() call', async () => {
    const engine = embeddingEngine();
    const texts = ['Hello world', 'The cat sat on the mat.', 'a'];
    const body = json(await embed(engine, { input: texts }));
    const tokens = texts.map((t) => engine.generator.tokenizer.encode(t));
    expect(body.data.map((d: { index: number }) => d.index)).toEqual([0, 1, 2]);
    expect(body.data.map((d: { embedding: number[] }) => d.embedding)).toEqual(tokens.map((t) => expected(t)));
    const count = tokens.reduce((sum, t) => sum + t.length, 0);
    expect(body.usage).toEqual({ prompt_tokens: count, total_tokens: count });
    expect(engine.generator.embedCalls).toEqual([tokens]);
  });

  it('an array of token ids: one input, used as given', async () => {
    const engine = embeddingEngine();
    const body = json(await embed(engine, { input: [5, 6, 7] }));
    expect(body.data).toEqual([{ object: 'embedding', index: 0, embedding: expected([5, 6, 7]) }]);
    expect(body.usage.prompt_tokens).toBe(3);
  });

  it('an array of token-id arrays: one vector each', async () => {
    const engine = embeddingEngine();
    const body = json(await embed(engine, { input: [[5], [6, 7], [8, 9, 10]] }));
    expect(body.data.map((d: { embedding: number[] }) => d.embedding)).toEqual([expected([5]), expected([6, 7]), expected([8, 9, 10])]);
    expect(body.usage).toEqual({ prompt_tokens: 6, total_tokens: 6 });
  });

  it('the model named by an alias answers with its id; user is accepted', async () => {
    const body = json(await post(embeddingEngine(), { model: 'fake', input: 'a', user: 'someone' }, URL));
    expect(body.model).toBe(MODEL);
  });

  it("text gets the post-processor's suffix (Qwen3-Embedding's <|endoftext|>); add_special_tokens false leaves BOS and suffix out", async () => {
    const engine = embeddingEngine({ suffixIds: [EOS] });
    const pieces = engine.generator.tokenizer.encode('Hello world', { addBos: false });
    let body = json(await embed(engine, { input: 'Hello world' }));
    expect(engine.generator.embedCalls.at(-1)).toEqual([[BOS, ...pieces, EOS]]);
    expect(body.usage.prompt_tokens).toBe(pieces.length + 2);
    body = json(await embed(engine, { input: 'Hello world', extra_body: { add_special_tokens: false } }));
    expect(engine.generator.embedCalls.at(-1)).toEqual([pieces]);
    expect(body.data[0].embedding).toEqual(expected(pieces));
    // Token ids are used as given: no suffix.
    await embed(engine, { input: [5, 6] });
    expect(engine.generator.embedCalls.at(-1)).toEqual([[5, 6]]);
  });
});

describe('encoding_format', () => {
  it("'base64' is the float32 vector's little-endian bytes, and decodes to the 'float' answer", async () => {
    const engine = embeddingEngine();
    const floats = json(await embed(engine, { input: ['Hello', 'world'], encoding_format: 'float' }));
    const base64 = json(await embed(engine, { input: ['Hello', 'world'], encoding_format: 'base64' }));
    for (const [i, d] of base64.data.entries()) {
      expect(typeof d.embedding).toBe('string');
      expect(d.embedding.length).toBe(Math.ceil((8 * 4) / 3) * 4);
      expect(Array.from(decodeBase64Vector(d.embedding))).toEqual(floats.data[i].embedding);
    }
    expect(base64.usage).toEqual(floats.usage);
  });

  it('base64 of every length pads as Buffer does', () => {
    for (let n = 0; n < 7; n++) {
      const vector = Float32Array.from({ length: n }, (_, i) => (i - 2.5) / 3);
      expect(vectorBase64(vector)).toBe(Buffer.from(vector.buffer).toString('base64'));
    }
  });

  it('null is the default (float)', async () => {
    const body = json(await embed(embeddingEngine(), { input: 'a', encoding_format: null }));
    expect(Array.isArray(body.data[0].embedding)).toBe(true);
  });
});

describe('dimensions (Matryoshka)', () => {
  const matryoshka = () => embeddingEngine({ embedding: { matryoshka: true, dimensions: 8 } });

  it('keeps the first k components, renormalised', async () => {
    const engine = matryoshka();
    const tokens = [5, 6, 7];
    for (const k of [1, 3, 8]) {
      const body = json(await embed(engine, { input: tokens, dimensions: k }));
      const vector = body.data[0].embedding as number[];
      expect(vector.length).toBe(k);
      expect(norm(vector)).toBeCloseTo(1, 6);
      const prefix = fakeVector(tokens, 8, true).slice(0, k);
      const scale = 1 / Math.hypot(...prefix);
      vector.forEach((x, i) => expect(x).toBeCloseTo(prefix[i]! * scale, 6));
    }
    const base64 = json(await embed(engine, { input: tokens, dimensions: 3, encoding_format: 'base64' }));
    expect(decodeBase64Vector(base64.data[0].embedding).length).toBe(3);
  });

  it('a model whose vectors are not normalised keeps the prefix as it is', () => {
    const full = Float32Array.from([3, 4, 12]);
    expect(Array.from(truncateVector(full, 2, false))).toEqual([3, 4]);
    expect(Array.from(truncateVector(full, 2, true))).toEqual([0.6000000238418579, 0.800000011920929]);
    expect(Array.from(truncateVector(new Float32Array(3), 2, true))).toEqual([0, 0]);
  });

  it('a 400 for a model not trained for it, even at its full size (as vLLM answers)', async () => {
    const engine = embeddingEngine();
    for (const dimensions of [4, 8]) {
      const error = await expectError(embed(engine, { input: 'a', dimensions }), 400, 'dimensions', 'invalid_value');
      expect(error.message).toMatch(/does not support matryoshka/);
    }
    expect(engine.generator.embedCalls).toEqual([]);
  });

  it('a model trained for some sizes (config.json matryoshka_dimensions) takes those and its full size only', async () => {
    const engine = embeddingEngine({ embedding: { matryoshka: true, dimensions: 8, matryoshkaDimensions: [2, 4] } });
    for (const k of [2, 4, 8]) expect(json(await embed(engine, { input: [5, 6], dimensions: k })).data[0].embedding.length).toBe(k);
    const error = await expectError(embed(engine, { input: [5, 6], dimensions: 3 }), 400, 'dimensions', 'invalid_value');
    expect(error.message).toMatch(/trained for 2, 4, 8 dimensions, not 3/);
  });

  it('a 400 for a size out of 1..dimensions, or not an integer', async () => {
    const engine = matryoshka();
    await expectError(embed(engine, { input: 'a', dimensions: 9 }), 400, 'dimensions', 'value_above_maximum');
    await expectError(embed(engine, { input: 'a', dimensions: 0 }), 400, 'dimensions', 'value_below_minimum');
    await expectError(embed(engine, { input: 'a', dimensions: -3 }), 400, 'dimensions', 'value_below_minimum');
    await expectError(embed(engine, { input: 'a', dimensions: 2.5 }), 400, 'dimensions', 'invalid_type');
    await expectError(embed(engine, { input: 'a', dimensions: '4' }), 400, 'dimensions', 'invalid_type');
    expect(json(await embed(engine, { input: 'a', dimensions: null })).data[0].embedding.length).toBe(8);
  });
});

describe('truncate_prompt_tokens (vLLM)', () => {
  it('keeps the last k tokens of each input; -1 is the context length', async () => {
    const engine = embeddingEngine({ contextLength: 16 });
    const long = Array.from({ length: 20 }, (_, i) => 5 + i);
    let body = json(await embed(engine, { input: [long, [5, 6]], truncate_prompt_tokens: 3 }));
    expect(engine.generator.embedCalls.at(-1)).toEqual([long.slice(-3), [5, 6]]);
    expect(body.data[0].embedding).toEqual(expected(long.slice(-3)));
    expect(body.usage.prompt_tokens).toBe(5);
    body = json(await embed(engine, { input: long, extra_body: { truncate_prompt_tokens: -1 } }));
    expect(engine.generator.embedCalls.at(-1)).toEqual([long.slice(-16)]);
    // A text keeps its special tokens (BOS) and loses its first words (the tokenizer's left truncation).
    const text = engine.generator.tokenizer.encode('Once upon a time there was');
    const bare = engine.generator.tokenizer.encode('Once upon a time there was', { addBos: false });
    expect(text.length).toBe(bare.length + 1);
    await embed(engine, { input: 'Once upon a time there was', truncate_prompt_tokens: 3 });
    expect(engine.generator.embedCalls.at(-1)).toEqual([[text[0], ...bare.slice(-2)]]);
    await embed(engine, { input: 'Once upon a time there was', truncate_prompt_tokens: 3, add_special_tokens: false });
    expect(engine.generator.embedCalls.at(-1)).toEqual([bare.slice(-3)]);
  });

  it('one array of token ids is one input, however many ids (the context bounds it, not the inputs limit)', async () => {
    const engine = embeddingEngine({ contextLength: 4096 });
    const ids = Array.from({ length: 3000 }, (_, i) => 5 + (i % 200));
    const body = json(await embed(engine, { input: ids }));
    expect(body.data).toHaveLength(1);
    expect(body.usage.prompt_tokens).toBe(3000);
    await expectError(embed(engine, { input: Array.from({ length: 2049 }, () => [5]) }), 400, 'input', 'array_above_max_length');
  });

  it('0, a value above the context, or below -1 is a 400', async () => {
    const engine = embeddingEngine({ contextLength: 16 });
    await expectError(embed(engine, { input: 'a', truncate_prompt_tokens: 0 }), 400, 'truncate_prompt_tokens', 'invalid_value');
    await expectError(embed(engine, { input: 'a', truncate_prompt_tokens: 17 }), 400, 'truncate_prompt_tokens', 'value_above_maximum');
    await expectError(embed(engine, { input: 'a', extra_body: { truncate_prompt_tokens: 17 } }), 400, 'extra_body.truncate_prompt_tokens', 'value_above_maximum');
    await expectError(embed(engine, { input: 'a', truncate_prompt_tokens: -2 }), 400, 'truncate_prompt_tokens', 'value_below_minimum');
  });
});

describe('errors: 400s in the OpenAI shape, before anything reaches the model', () => {
  const cases: [string, Record<string, unknown>, string | null, string][] = [
    ['an empty string', { input: '' }, 'input', 'invalid_value'],
    ['an empty array', { input: [] }, 'input', 'invalid_value'],
    ['an empty string in an array', { input: ['a', ''] }, 'input', 'invalid_value'],
    ['an empty token-id array', { input: [[5], []] }, 'input', 'invalid_value'],
    ['a mix of strings and ids', { input: ['a', 5] }, 'input', 'invalid_type'],
    ['a mix of ids and arrays', { input: [5, [6]] }, 'input', 'invalid_type'],
    ['a negative id', { input: [5, -1] }, 'input', 'invalid_type'],
    ['a non-integer id', { input: [5, 1.5] }, 'input', 'invalid_type'],
    ['a non-integer id in a nested array', { input: [[5], [1.5]] }, 'input', 'invalid_type'],
    ['an id outside the vocabulary', { input: [5, 100_000] }, 'input', 'invalid_value'],
    ['an id outside the vocabulary in the second input', { input: [[5], [100_000]] }, 'input', 'invalid_value'],
    ['a number as input', { input: 5 }, 'input', 'invalid_type'],
    ['an object as input', { input: { text: 'a' } }, 'input', 'invalid_type'],
    ['null as input', { input: null }, 'input', 'missing_required_parameter'],
    ['no input', { input: undefined }, 'input', 'missing_required_parameter'],
    ['an unknown encoding_format', { input: 'a', encoding_format: 'int8' }, 'encoding_format', 'invalid_value'],
    ['a number as encoding_format', { input: 'a', encoding_format: 1 }, 'encoding_format', 'invalid_type'],
    ['user not a string', { input: 'a', user: 5 }, 'user', 'invalid_type'],
    ['an unknown parameter', { input: 'a', temperature: 0 }, 'temperature', 'unknown_parameter'],
    ['an unknown key in extra_body', { input: 'a', extra_body: { top_k: 2 } }, 'extra_body.top_k', 'unknown_parameter'],
    ['a model that is not a string', { input: 'a', model: 5 }, 'model', 'invalid_type'],
  ];
  for (const [what, body, param, code] of cases) {
    it(what, async () => {
      const engine = embeddingEngine();
      await expectError(embed(engine, body), 400, param, code);
      expect(engine.generator.embedCalls).toEqual([]);
    });
  }

  it(`more than ${MAX_EMBEDDING_INPUTS} inputs`, async () => {
    const engine = embeddingEngine();
    const error = await expectError(embed(engine, { input: Array(MAX_EMBEDDING_INPUTS + 1).fill('a') }), 400, 'input', 'array_above_max_length');
    expect(error.message).toContain(String(MAX_EMBEDDING_INPUTS));
    await expectError(embed(engine, { input: Array(MAX_EMBEDDING_INPUTS + 1).fill([5]) }), 400, 'input', 'array_above_max_length');
    expect(json(await embed(engine, { input: Array(MAX_EMBEDDING_INPUTS).fill([5]) })).data.length).toBe(MAX_EMBEDDING_INPUTS);
  });

  it("an input longer than the context: a 400 naming the input's index", async () => {
    const engine = embeddingEngine({ contextLength: 16 });
    const long = Array(17).fill(5);
    let error = await expectError(embed(engine, { input: [[5], long] }), 400, 'input', 'context_length_exceeded');
    expect(error.message).toMatch(/input 1 is 17 tokens/);
    error = await expectError(embed(engine, { input: long }), 400, 'input', 'context_length_exceeded');
    expect(error.message).toMatch(/the input is 17 tokens/);
    error = await expectError(embed(engine, { input: ['a', 'Once upon a time '.repeat(10)] }), 400, 'input', 'context_length_exceeded');
    expect(error.message).toMatch(/input 1 is \d+ tokens/);
    // Exactly the context fits.
    expect(json(await embed(engine, { input: Array(16).fill(5) })).usage.prompt_tokens).toBe(16);
    expect(engine.generator.embedCalls.length).toBe(1);
  });

  it('a text that gives no tokens (no special tokens, a tokenizer that drops it) is a 400', async () => {
    const engine = embeddingEngine();
    Object.assign(engine.generator.tokenizer, { encode: () => [] });
    await expectError(embed(engine, { input: ['a', ' '], add_special_tokens: false }), 400, 'input', 'invalid_value');
    expect(engine.generator.embedCalls).toEqual([]);
  });

  it('a missing model is a 400, another model a 404', async () => {
    const engine = embeddingEngine();
    await expectError(post(engine, { input: 'a' }, URL), 400, 'model', 'missing_required_parameter');
    await expectError(post(engine, { model: 'other', input: 'a' }, URL), 404, 'model', 'model_not_found');
  });

  it('a model that cannot embed: a 400 naming the model', async () => {
    const engine = embeddingEngine({ embedding: null });
    const error = await expectError(embed(engine, { input: 'a' }), 400, 'model', 'model_not_supported');
    expect(error.message).toMatch(/does not support the Embeddings API/);
  });

  it('a body that is not JSON, or not an object; a GET', async () => {
    const engine = embeddingEngine();
    await expectError(post(engine, '{', URL), 400, null, 'invalid_json');
    await expectError(post(engine, '[1]', URL), 400, null, 'invalid_body');
    const response = await handleApiRequest(engine, { method: 'GET', url: URL, body: null });
    expect(response.status).toBe(405);
    expect(response.headers.allow).toBe('POST');
  });

  it("an engine's failure is a 500; an abort before it answers rejects", async () => {
    const failing = embeddingEngine({ embedError: new Error('fake GPU failure') });
    const error = await expectError(embed(failing, { input: 'a' }), 500, null);
    expect(error.message).toMatch(/fake GPU failure/);
    const slow = embeddingEngine({ embedDelayMs: 5_000 });
    const controller = new AbortController();
    const pending = post(slow, { model: MODEL, input: 'a' }, URL, controller.signal);
    setTimeout(() => controller.abort(), 10);
    expect((await pending).status).toBe(499);
  });
});

describe('Engine.embed', () => {
  it('answers as the endpoint does, throws ApiErrors, and counts the request in flight', async () => {
    const generator = new EmbeddingFakeGenerator({ embedDelayMs: 50 });
    const engine = new Engine(generator);
    const pending = engine.embed({ model: MODEL, input: ['Hello', 'world'] });
    await Promise.resolve();
    expect(engine.requestsInFlight).toBe(1);
    const unloaded = engine.unload();
    let freed = false;
    void unloaded.then(() => (freed = true));
    const response = await pending;
    expect(response.data.map((d) => d.embedding)).toEqual(['Hello', 'world'].map((t) => expected(generator.tokenizer.encode(t))));
    await unloaded;
    expect(freed).toBe(true);
    expect(engine.requestsInFlight).toBe(0);
    await expect(engine.embed({ model: MODEL, input: 'a' })).rejects.toMatchObject({ status: 503, code: 'model_unloaded' });
    const other = new Engine(new EmbeddingFakeGenerator());
    const error = await other.embed({ model: MODEL, input: '' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ status: 400, param: 'input' });
  });

  it("the generator hosts use counts each embed() too, and has none when the model's has none", async () => {
    const engine = new Engine(new EmbeddingFakeGenerator({ embedDelayMs: 30 }));
    const pending = engine.generator.embed!([[5, 6]]);
    expect(engine.requestsInFlight).toBe(1);
    expect(Array.from((await pending)[0]!)).toEqual(expected([5, 6]));
    expect(engine.requestsInFlight).toBe(0);
    expect(new Engine(new EmbeddingFakeGenerator({ embedding: null })).generator.embed).toBeUndefined();
  });
});
