// The request layer (src/api) against a fake generator: validation, responses, streaming,
// detokenization, stop strings, sessions, logprobs, errors. The contract as seen from outside
// (every parameter, over HTTP) is the conformance suite, test/conformance/.
import { describe, expect, it } from 'vitest';
import { createCompletion, MIN_SAMPLING_TEMPERATURE, samplingParams, type CompletionChunk, type CompletionResponse } from '../../src/api/completions.ts';
import { IncrementalDetokenizer } from '../../src/api/detokenize.ts';
import { ApiError } from '../../src/api/errors.ts';
import { handleApiRequest, parseRequestJson, type ApiEngine, type ApiResponse } from '../../src/api/handler.ts';
import { finiteLogprob, topLogprobsObject } from '../../src/api/logprobs.ts';
import { COMPLETION_PARAMS, validateCompletionRequest } from '../../src/api/schema.ts';
import { ChoiceText, StopStringMatcher } from '../../src/api/stream.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { DEFAULT_STORY, EOS, FakeGenerator, fakeEngine, type FakeGeneratorOptions } from '../helpers/fake-generator.ts';

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

function post(engine: ApiEngine | Promise<ApiEngine>, body: unknown, url = '/v1/completions', signal?: AbortSignal): Promise<ApiResponse> {
  return handleApiRequest(engine, {
    method: 'POST',
    url,
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

function get(engine: ApiEngine | Promise<ApiEngine>, url: string): Promise<ApiResponse> {
  return handleApiRequest(engine, { method: 'GET', url, body: null });
}

function json(response: ApiResponse): Json {
  expect(typeof response.body).toBe('string');
  return JSON.parse(response.body as string);
}

/** The data of each server-sent event: parsed JSON, or the '[DONE]' string. */
async function events(response: ApiResponse): Promise<Json[]> {
  expect(typeof response.body).not.toBe('string');
  let text = '';
  for await (const piece of response.body as AsyncIterable<string>) text += piece;
  expect(text.endsWith('\n\n')).toBe(true);
  return text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => {
      expect(e.startsWith('data: ')).toBe(true);
      const data = e.slice('data: '.length);
      return data === '[DONE]' ? data : JSON.parse(data);
    });
}

/** The status of a response, after reading its body (a stream holds the model until read). */
async function statusOf(pending: Promise<ApiResponse>): Promise<number> {
  const r = await pending;
  if (typeof r.body !== 'string') for await (const _ of r.body);
  return r.status;
}

function streamedText(evs: Json[]): string {
  return evs
    .filter((e) => e !== '[DONE]' && e.choices?.length)
    .map((e) => e.choices[0].text)
    .join('');
}

const PROMPT = 'Once upon a time';

async function expectError(response: Promise<ApiResponse>, status: number, param: string | null, code?: string | null): Promise<Json> {
  const r = await response;
  expect(r.status).toBe(status);
  expect(r.headers['content-type']).toContain('application/json');
  const body = json(r);
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.param).toBe(param);
  if (code !== undefined) expect(body.error.code).toBe(code);
  return body.error;
}

describe('validation', () => {
  const engine = fakeEngine();
  const ok = { model: 'fake-llama', prompt: PROMPT };

  const badValues: [string, unknown][] = [
    ['prompt', 5],
    ['prompt', {}],
    ['prompt', [5, 'a']],
    ['prompt', []],
    ['max_tokens', -1],
    ['max_tokens', 1.5],
    ['max_tokens', '16'],
    ['max_tokens', true],
    ['temperature', -0.1],
    ['temperature', 2.01],
    ['temperature', 'hot'],
    ['top_p', 1.5],
    ['top_p', -1],
    ['top_p', [0.5]],
    ['stream', 'yes'],
    ['stream', 1],
    ['seed', 1.5],
    ['seed', '42'],
    ['max_tokens', 1e20], // a JSON integer, but prompt + max_tokens exceeds the context
    ['stop', 5],
    ['stop', ['a', 'b', 'c', 'd', 'e']],
    ['stop', ['a', 1]],
    ['stop', { s: 'a' }],
    ['user', 5],
    ['n', 0],
    ['n', 1.5],
    ['n', 'one'],
    ['best_of', 0],
    ['echo', 'no'],
    ['logprobs', -1],
    ['logprobs', 21],
    ['logprobs', 2.5],
    ['presence_penalty', 2.5],
    ['presence_penalty', 'x'],
    ['frequency_penalty', -3],
    ['logit_bias', [1]],
    ['logit_bias', { abc: 1 }],
    ['suffix', 5],
    ['prompt', [[1], 'a']],
    ['prompt', [[]]],
    ['prompt', [1, -1]],
    ['prompt', [1, 1.5]],
    ['prompt', [[1, 2], [3, 'x']]],
    ['n', 129],
    ['best_of', 21],
    ['top_k', -2],
    ['top_k', 1.5],
    ['min_p', 1.5],
    ['min_p', -0.1],
    ['repetition_penalty', 0],
    ['repetition_penalty', -1],
    ['repetition_penalty', 'high'],
    ['ignore_eos', 'yes'],
    ['min_tokens', -1],
    ['min_tokens', 2.5],
    ['stop_token_ids', 'x'],
    ['stop_token_ids', [1.5]],
    ['stop_token_ids', [-1]],
    ['skip_special_tokens', 1],
    ['include_stop_str_in_output', 'no'],
    ['service_tier', 'fast'],
    ['service_tier', 'over-limit'],
    ['service_tier', 1],
    ['extra_body', [1]],
    ['extra_body', 'x'],
  ];
  it.each(badValues)('%s = %j → 400 naming the parameter', async (param, value) => {
    const error = await expectError(post(engine, { ...ok, [param]: value }), 400, param);
    expect(error.type).toBe('invalid_request_error');
  });

  it('answers a non-empty suffix with 400: Llama has no fill-in-the-middle', async () => {
    const error = await expectError(post(engine, { ...ok, suffix: ' and then' }), 400, 'suffix', 'unsupported_value');
    expect(error.message).toMatch(/fill-in-the-middle/);
  });

  const accepted: [string, unknown][] = [
    ['prompt', [PROMPT]],
    ['prompt', null],
    ['prompt', ''],
    ['max_tokens', 0],
    ['max_tokens', null],
    ['temperature', 0],
    ['temperature', 2],
    ['temperature', null],
    ['top_p', 1],
    ['top_p', 0.01],
    ['top_p', 0],
    ['stream', false],
    ['seed', 42],
    ['seed', -7],
    ['seed', 2 ** 63 - 1], // int64 seeds arrive as doubles; any JSON integer is a seed
    ['seed', -(2 ** 70)],
    ['seed', null],
    ['stop', 'x'],
    ['stop', []],
    ['stop', ['a', 'b', 'c', 'd']],
    ['stop', null],
    ['user', 'someone'],
    ['user', null],
    ['n', 1],
    ['n', null],
    ['best_of', 1],
    ['echo', false],
    ['echo', null],
    ['logprobs', null],
    ['presence_penalty', 0],
    ['frequency_penalty', 0],
    ['frequency_penalty', null],
    ['logit_bias', {}],
    ['logit_bias', null],
    ['suffix', ''],
    ['suffix', null],
    ['prompt', [1, 300, 301]],
    ['prompt', [[1, 300], [301]]],
    ['prompt', ['a', 'b']],
    ['n', 2],
    ['best_of', 3],
    ['echo', true],
    ['logprobs', 0],
    ['logprobs', 20],
    ['presence_penalty', 0.5],
    ['frequency_penalty', -1],
    ['logit_bias', { '5': 10 }],
    ['top_k', -1],
    ['top_k', 0],
    ['top_k', 5],
    ['min_p', 0.1],
    ['repetition_penalty', 1.3],
    ['ignore_eos', true],
    ['min_tokens', 2],
    ['stop_token_ids', [2, 5]],
    ['skip_special_tokens', false],
    ['include_stop_str_in_output', true],
    ['service_tier', 'auto'],
    ['service_tier', 'flex'],
    ['service_tier', null],
    ['extra_body', {}],
    ['extra_body', null],
    ['extra_body', { top_k: 3 }],
    ['user', 'u'],
  ];
  it.each(accepted)('%s = %j is accepted', async (param, value) => {
    const r = await post(engine, { ...ok, [param]: value });
    expect(r.status).toBe(200);
    expect(json(r).object).toBe('text_completion');
  });

  it('every table row has a type, a default and docs', () => {
    for (const [name, row] of Object.entries(COMPLETION_PARAMS)) {
      expect(typeof row.type, name).toBe('string');
      expect('default' in row, name).toBe(true);
      expect(typeof row.nullable, name).toBe('boolean');
      expect(row.doc.length, name).toBeGreaterThan(0);
    }
  });

  it('fills in the defaults', () => {
    expect(validateCompletionRequest({ model: 'm' })).toEqual({
      model: 'm',
      prompt: [{ text: '' }],
      suffix: null,
      max_tokens: 16,
      temperature: 1,
      top_p: 1,
      n: 1,
      best_of: null,
      stream: false,
      stream_options: null,
      logprobs: null,
      echo: false,
      stop: [],
      presence_penalty: 0,
      frequency_penalty: 0,
      logit_bias: null,
      seed: null,
      user: null,
      service_tier: 'auto',
      extra_body: null,
      top_k: 0,
      min_p: 0,
      repetition_penalty: 1,
      ignore_eos: false,
      min_tokens: 0,
      stop_token_ids: [],
      skip_special_tokens: true,
      include_stop_str_in_output: false,
    });
    // null means the default, except max_tokens: null = no limit.
    const nulls = validateCompletionRequest({ model: 'm', temperature: null, top_p: null, max_tokens: null, stop: null, top_k: null, service_tier: null });
    expect(nulls.temperature).toBe(1);
    expect(nulls.top_p).toBe(1);
    expect(nulls.max_tokens).toBeNull();
    expect(nulls.stop).toEqual([]);
    expect(nulls.top_k).toBe(0);
    expect(nulls.service_tier).toBe('auto');
    expect(validateCompletionRequest({ model: 'm', stop: 'x' }).stop).toEqual(['x']);
  });

  it('samples greedily below the smallest sampling temperature (1/T would overflow f32 on the GPU)', () => {
    const temperature = (t: number) => samplingParams(validateCompletionRequest({ model: 'm', temperature: t })).temperature;
    expect(temperature(0)).toBe(0);
    expect(temperature(1e-39)).toBe(0); // a subnormal f32, which some GPUs flush to 0
    expect(temperature(MIN_SAMPLING_TEMPERATURE / 2)).toBe(0);
    expect(temperature(MIN_SAMPLING_TEMPERATURE)).toBe(MIN_SAMPLING_TEMPERATURE);
    expect(temperature(0.7)).toBe(0.7);
  });

  it('normalizes every prompt form to a list of prompts', () => {
    const prompt = (p: unknown) => validateCompletionRequest({ model: 'm', prompt: p }).prompt;
    expect(prompt('a')).toEqual([{ text: 'a' }]);
    expect(prompt(['a', 'b'])).toEqual([{ text: 'a' }, { text: 'b' }]);
    expect(prompt([1, 2])).toEqual([{ tokens: [1, 2] }]);
    expect(prompt([[1, 2], [3]])).toEqual([{ tokens: [1, 2] }, { tokens: [3] }]);
    expect(validateCompletionRequest({ model: 'm', logit_bias: { '5': -100, '0': 2.5 } }).logit_bias).toEqual(
      new Map([
        [5, -100],
        [0, 2.5],
      ]),
    );
  });

  it('treats the keys of extra_body as top-level parameters', () => {
    const p = validateCompletionRequest({ model: 'm', extra_body: { top_k: 3, min_p: 0.2, temperature: 0, stop: 'x' } });
    expect(p).toMatchObject({ top_k: 3, min_p: 0.2, temperature: 0, stop: ['x'] });
    // The same value in both places is fine; different values are not.
    expect(validateCompletionRequest({ model: 'm', top_k: 3, extra_body: { top_k: 3 } }).top_k).toBe(3);
  });

  it('names parameters inside extra_body by their place', async () => {
    await expectError(post(engine, { ...ok, extra_body: { top_k: 'x' } }), 400, 'extra_body.top_k', 'invalid_type');
    await expectError(post(engine, { ...ok, extra_body: { min_p: 2 } }), 400, 'extra_body.min_p', 'value_above_maximum');
    await expectError(post(engine, { ...ok, extra_body: { bogus: 1 } }), 400, 'extra_body.bogus', 'unknown_parameter');
    await expectError(post(engine, { ...ok, extra_body: { extra_body: {} } }), 400, 'extra_body.extra_body', 'unknown_parameter');
    await expectError(post(engine, { ...ok, top_k: 2, extra_body: { top_k: 3 } }), 400, 'extra_body.top_k', 'invalid_value');
    await expectError(post(engine, { ...ok, extra_body: { stream_options: { include_usage: true } } }), 400, 'extra_body.stream_options');
  });

  it('checks the combinations of n, best_of, stream and min_tokens', async () => {
    await expectError(post(engine, { ...ok, n: 3, best_of: 2 }), 400, 'best_of', 'invalid_value');
    const error = await expectError(post(engine, { ...ok, n: 1, best_of: 2, stream: true }), 400, 'best_of', 'invalid_value');
    expect(error.message).toMatch(/stream/);
    // best_of equal to n changes nothing, so it streams.
    expect(await statusOf(post(engine, { ...ok, n: 2, best_of: 2, stream: true }))).toBe(200);
    expect(await statusOf(post(engine, { ...ok, n: 2, stream: true }))).toBe(200);
    await expectError(post(engine, { ...ok, max_tokens: 3, min_tokens: 4 }), 400, 'min_tokens', 'invalid_value');
    expect((await post(engine, { ...ok, max_tokens: null, min_tokens: 4 })).status).toBe(200);
  });

  it('checks token ids against the vocabulary', async () => {
    const vocab = engine.generator.tokenizer.vocabSize;
    for (const [param, body] of [
      ['prompt', { prompt: [1, vocab] }],
      ['prompt', { prompt: [[1], [2, vocab + 5]] }],
      ['logit_bias', { logit_bias: { [vocab]: 1 } }],
      ['stop_token_ids', { stop_token_ids: [vocab] }],
    ] as const) {
      const error = await expectError(post(engine, { ...ok, ...body }), 400, param, 'invalid_value');
      expect(error.message).toContain(String(vocab - 1));
    }
    await expectError(post(engine, { ...ok, logit_bias: { '5': 101 } }), 400, 'logit_bias.5', 'value_above_maximum');
    await expectError(post(engine, { ...ok, logit_bias: { '5': -100.5 } }), 400, 'logit_bias.5', 'value_below_minimum');
    await expectError(post(engine, { ...ok, logit_bias: { '5': '1' } }), 400, 'logit_bias.5', 'invalid_type');
    await expectError(post(engine, { ...ok, logit_bias: { '-1': 1 } }), 400, 'logit_bias', 'invalid_value');
    await expectError(post(engine, { ...ok, logit_bias: { '05': 1 } }), 400, 'logit_bias', 'invalid_value');
  });

  it("answers 'over-limit' as a tier that cannot be asked for", async () => {
    const error = await expectError(post(engine, { ...ok, service_tier: 'over-limit' }), 400, 'service_tier', 'invalid_value');
    expect(error.message).toMatch(/cannot be requested/);
  });

  it('rejects NaN and infinities (callers that skip JSON)', async () => {
    for (const [param, value] of [
      ['temperature', NaN],
      ['top_p', NaN],
      ['max_tokens', Infinity],
      ['seed', NaN],
      ['presence_penalty', -Infinity],
      ['min_p', NaN],
      ['repetition_penalty', Infinity],
    ] as const) {
      const err = await createCompletion(engine.generator, { ...ok, [param]: value }).catch((e: unknown) => e);
      expect(err, param).toBeInstanceOf(ApiError);
      expect((err as ApiError).status).toBe(400);
      expect((err as ApiError).param).toBe(param);
    }
  });

  it('requires model, and a string one', async () => {
    await expectError(post(engine, { prompt: PROMPT }), 400, 'model', 'missing_required_parameter');
    await expectError(post(engine, { model: null, prompt: PROMPT }), 400, 'model');
    await expectError(post(engine, { model: 7, prompt: PROMPT }), 400, 'model');
  });

  it('answers an unknown model with 404 model_not_found', async () => {
    const error = await expectError(post(engine, { model: 'gpt-4', prompt: PROMPT }), 404, 'model', 'model_not_found');
    expect(error.message).toContain('gpt-4');
  });

  it('takes an alias of the model', async () => {
    const r = await post(engine, { model: 'fake', prompt: PROMPT });
    expect(r.status).toBe(200);
    expect(json(r).model).toBe('fake-llama');
  });

  it('names unknown parameters', async () => {
    const error = await expectError(post(engine, { ...ok, foo: 1, top_q: 2 }), 400, 'foo', 'unknown_parameter');
    expect(error.message).toContain('foo');
    expect(error.message).toContain('top_q');
  });

  it('answers malformed JSON, an empty body and a non-object with 400', async () => {
    await expectError(post(engine, '{"model": "fake-llama", '), 400, null, 'invalid_json');
    await expectError(post(engine, ''), 400, null, 'invalid_json');
    await expectError(handleApiRequest(engine, { method: 'POST', url: '/v1/completions', body: null }), 400, null, 'invalid_json');
    await expectError(post(engine, '[1, 2]'), 400, null);
    await expectError(post(engine, '"text"'), 400, null);
    await expectError(post(engine, 'null'), 400, null);
  });

  it('allows stream_options only with stream', async () => {
    const error = await expectError(post(engine, { ...ok, stream_options: { include_usage: true } }), 400, 'stream_options');
    expect(error.message).toMatch(/stream/);
    await expectError(post(engine, { ...ok, stream: false, stream_options: { include_usage: true } }), 400, 'stream_options');
    await expectError(post(engine, { ...ok, stream: true, stream_options: 'yes' }), 400, 'stream_options');
    await expectError(post(engine, { ...ok, stream: true, stream_options: { include_usage: 1 } }), 400, 'stream_options.include_usage');
    await expectError(post(engine, { ...ok, stream: true, stream_options: { other: true } }), 400, 'stream_options.other');
    // The openai client's stream options type also has include_obfuscation: accepted, no effect.
    await expectError(post(engine, { ...ok, stream: true, stream_options: { include_obfuscation: 'no' } }), 400, 'stream_options.include_obfuscation');
    expect(await statusOf(post(engine, { ...ok, stream: true, stream_options: { include_usage: true, include_obfuscation: false } }))).toBe(200);
    expect((await post(engine, { ...ok, stream_options: null })).status).toBe(200);
    expect(await statusOf(post(engine, { ...ok, stream: true, stream_options: {} }))).toBe(200);
  });

  it('checks prompt + max_tokens against the context, naming both numbers', async () => {
    const small = fakeEngine({ contextLength: 10 });
    // PROMPT is 5 tokens with BOS.
    const error = await expectError(post(small, { ...ok, max_tokens: 6 }), 400, 'max_tokens', 'context_length_exceeded');
    expect(error.message).toContain('10');
    expect(error.message).toContain('5 in your prompt');
    expect(error.message).toContain('6 for the completion');
    expect((await post(small, { ...ok, max_tokens: 5 })).status).toBe(200);
    // The default 16 does not fit either.
    await expectError(post(small, ok), 400, 'max_tokens', 'context_length_exceeded');
    // max_tokens: null fits whatever room is left, unless there is none.
    const long = 'a '.repeat(20);
    await expectError(post(small, { ...ok, prompt: long, max_tokens: null }), 400, 'prompt', 'context_length_exceeded');
  });
});

describe('completions', () => {
  it('answers in the OpenAI shape with consistent usage', async () => {
    const engine = fakeEngine();
    const r = await post(engine, { model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 50 });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toContain('application/json');
    const body = json(r) as CompletionResponse;
    expect(body.id).toMatch(/^cmpl-[A-Za-z0-9]{24}$/);
    expect(body.object).toBe('text_completion');
    expect(Number.isInteger(body.created)).toBe(true);
    expect(Math.abs(body.created - Date.now() / 1000)).toBeLessThan(10);
    expect(body.model).toBe('fake-llama');
    expect(body.service_tier).toBe('default');
    expect(body.choices).toEqual([{ text: DEFAULT_STORY, index: 0, logprobs: null, finish_reason: 'stop' }]);
    const promptTokens = engine.generator.tokenizer.encode(PROMPT).length;
    const storyTokens = engine.generator.tokenizer.encodePieces(DEFAULT_STORY).length;
    expect(body.usage).toEqual({ prompt_tokens: promptTokens, completion_tokens: storyTokens, total_tokens: promptTokens + storyTokens });
  });

  it('hands the generator the tokens, budget, sampling and stop ids', async () => {
    const { generator } = fakeEngine();
    await createCompletion(generator, { model: 'fake-llama', prompt: PROMPT, temperature: 0.7, top_p: 0.9, seed: 3, max_tokens: 7 });
    expect(generator.sessions).toHaveLength(1);
    const session = generator.sessions[0]!;
    expect(session.promptTokens).toEqual(generator.tokenizer.encode(PROMPT));
    expect(session.promptTokens[0]).toBe(1); // BOS
    expect(session.sampling).toEqual({
      temperature: 0.7,
      topP: 0.9,
      seed: 3,
      topK: 0,
      minP: 0,
      repetitionPenalty: 1,
      presencePenalty: 0,
      frequencyPenalty: 0,
    });
    expect(session.logprobs).toBeUndefined();
    expect(session.promptLogprobs).toBeUndefined();
    expect(generator.sequences.map((s) => s.options)).toEqual([{ index: 0, maxTokens: 7, stopTokenIds: [EOS] }]);
  });

  it('maps every sampling parameter, from the top level and from extra_body', async () => {
    const { generator } = fakeEngine();
    await createCompletion(generator, {
      model: 'fake',
      prompt: PROMPT,
      temperature: 0.5,
      presence_penalty: 0.25,
      frequency_penalty: -0.5,
      logit_bias: { '7': -100, '300': 3.5 },
      top_k: 40,
      extra_body: { min_p: 0.05, repetition_penalty: 1.2, min_tokens: 2, stop_token_ids: [300, 2], ignore_eos: false },
      max_tokens: 5,
    });
    expect(generator.sessions[0]!.sampling).toEqual({
      temperature: 0.5,
      topP: 1,
      topK: 40,
      minP: 0.05,
      repetitionPenalty: 1.2,
      presencePenalty: 0.25,
      frequencyPenalty: -0.5,
      logitBias: new Map([
        [7, -100],
        [300, 3.5],
      ]),
    });
    expect(generator.sequences[0]!.options).toEqual({ index: 0, maxTokens: 5, stopTokenIds: [EOS, 300], minTokens: 2 });
    // ignore_eos drops EOS from the stop ids; top_k -1 is "off", as 0.
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, ignore_eos: true, top_k: -1, stop_token_ids: [300], max_tokens: 2 });
    expect(generator.sessions[1]!.sampling.topK).toBe(0);
    expect(generator.sequences[1]!.options.stopTokenIds).toEqual([300]);
  });

  it('stops at max_tokens with finish_reason length', async () => {
    const engine = fakeEngine();
    const body = json(await post(engine, { model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 3 }));
    expect(body.choices[0].text).toBe(' there was a');
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage.completion_tokens).toBe(3);
  });

  it('max_tokens 0 generates nothing', async () => {
    const engine = fakeEngine();
    const body = json(await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 0 }));
    expect(body.choices[0]).toMatchObject({ text: '', finish_reason: 'length' });
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 0, total_tokens: 5 });
  });

  it('max_tokens null runs until the context is full', async () => {
    const engine = fakeEngine({ contextLength: 12, script: 'a'.repeat(100) });
    const body = json(await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: null }));
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 });
    expect(body.choices[0].text).toBe('a'.repeat(7));
  });

  it('keeps the space of the first word after the prompt (SentencePiece prefix)', async () => {
    const engine = fakeEngine({ script: ' there was' });
    expect(json(await post(engine, { model: 'fake-llama', prompt: PROMPT })).choices[0].text).toBe(' there was');
    // With only BOS before it, the first word's space is dropped, as decoding the whole sequence does.
    expect(json(await post(engine, { model: 'fake-llama', prompt: '' })).choices[0].text).toBe('there was');
  });

  it("checks ids against the smaller of the tokenizer's and the model's vocabularies: 400, not the engine's 500", async () => {
    // A checkpoint whose tokenizer.json has added tokens past config.json's vocab_size.
    const engine = fakeEngine();
    const V = engine.generator.tokenizer.vocabSize;
    const modelVocab = 100;
    expect(V).toBeGreaterThan(modelVocab);
    (engine.generator.info as { vocabSize: number }).vocabSize = modelVocab;
    await expectError(post(engine, { model: 'fake-llama', prompt: [1, modelVocab] }), 400, 'prompt', 'invalid_value');
    await expectError(post(engine, { model: 'fake-llama', prompt: [1, 5], logit_bias: { [modelVocab]: 1 } }), 400, 'logit_bias');
    const fromText = await expectError(post(engine, { model: 'fake-llama', prompt: PROMPT }), 400, 'prompt', 'invalid_value');
    expect(fromText.message).toMatch(/prompt's text/);
    expect((await post(engine, { model: 'fake-llama', prompt: [1, modelVocab - 1], max_tokens: 0 })).status).toBe(200);
  });

  it('keeps only the most likely token with top_p 0, whatever the temperature and seed', async () => {
    const engine = fakeEngine();
    const text = async (extra: Record<string, unknown>) =>
      json(await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 20, ...extra })).choices[0].text as string;
    const greedy = await text({ temperature: 0 });
    for (const seed of [1, 2, 3]) expect(await text({ temperature: 2, top_p: 0, seed })).toBe(greedy);
    expect(await text({ temperature: 2, seed: 1 })).not.toBe(greedy); // the seeds above would have mattered
  });

  it('is deterministic per seed', async () => {
    const engine = fakeEngine();
    const text = async (seed: number) =>
      json(await post(engine, { model: 'fake-llama', prompt: PROMPT, seed, max_tokens: 20 })).choices[0].text as string;
    expect(await text(1)).toBe(await text(1));
    expect(await text(1)).not.toBe(await text(2));
  });

  it('gives every response, errors included, a request id of its own', async () => {
    const engine = fakeEngine();
    const responses = [
      await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 2 }),
      await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 2, stream: true }),
      await post(engine, { model: 'nope', prompt: PROMPT }),
    ];
    const ids = responses.map((r) => r.headers['x-request-id']);
    for (const id of ids) expect(id).toMatch(/^req_[A-Za-z0-9]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('starts an empty prompt from a new document: BOS, else EOS, else a 400', async () => {
    const engine = fakeEngine({ addBos: false, script: 'there was' });
    const body = json(await post(engine, { model: 'fake-llama', prompt: '', echo: true, logprobs: 0 }));
    expect(body.usage.prompt_tokens).toBe(1);
    expect(body.choices[0].text).toBe('there was'); // the EOS that starts the document prints nothing
    expect(body.choices[0].logprobs.tokens[0]).toBe('');
    expect(engine.generator.sessions.at(-1)?.promptTokens).toEqual([engine.generator.tokenizer.eosIds[0]]);
    (engine.generator.tokenizer as { eosIds: readonly number[] }).eosIds = [];
    const err = await expectError(post(engine, { model: 'fake-llama', prompt: '' }), 400, 'prompt', 'invalid_value');
    expect(err.message).toMatch(/no BOS or EOS/);
  });

  it('ends the generation when aborted', async () => {
    const { generator } = fakeEngine({ delayMs: 5, script: 'a'.repeat(40) });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    const err = await createCompletion(generator, { model: 'fake', prompt: PROMPT, max_tokens: 40 }, { signal: controller.signal }).catch((e: unknown) => e);
    expect((err as Error).name).toBe('AbortError');
    expect(generator.endings).toEqual([expect.objectContaining({ how: 'aborted' })]);
    expect(generator.endings[0]!.tokens).toBeLessThan(40);
  });
});

describe('streaming', () => {
  async function stream(options: FakeGeneratorOptions, body: Record<string, unknown>) {
    const engine = fakeEngine(options);
    const r = await post(engine, { model: 'fake-llama', prompt: PROMPT, stream: true, ...body });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toContain('text/event-stream');
    return { engine, evs: await events(r) };
  }

  it('sends chunks, then [DONE]', async () => {
    const { evs } = await stream({}, { temperature: 0, max_tokens: 50 });
    expect(evs.at(-1)).toBe('[DONE]');
    const chunks = evs.slice(0, -1) as CompletionChunk[];
    expect(chunks.length).toBeGreaterThan(2);
    for (const [i, chunk] of chunks.entries()) {
      expect(Object.keys(chunk).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'service_tier']);
      expect(chunk.id).toBe(chunks[0]!.id);
      expect(chunk.id).toMatch(/^cmpl-/);
      expect(chunk.created).toBe(chunks[0]!.created);
      expect(chunk.object).toBe('text_completion');
      expect(chunk.model).toBe('fake-llama');
      expect(chunk.choices).toHaveLength(1);
      expect(chunk.choices[0]).toMatchObject({ index: 0, logprobs: null });
      expect(typeof chunk.choices[0]!.text).toBe('string');
      expect(chunk.choices[0]!.finish_reason).toBe(i === chunks.length - 1 ? 'stop' : null);
    }
    expect(streamedText(evs)).toBe(DEFAULT_STORY);
  });

  it('streams the same text as the one-body answer', async () => {
    const cases: [FakeGeneratorOptions, Record<string, unknown>][] = [
      [{}, { temperature: 0 }],
      [{}, { seed: 5, max_tokens: 30 }],
      [{}, { seed: 9, max_tokens: 30, stop: [' cat', ' the'] }],
      [{ script: ' Hello world STOP and' }, { stop: 'STOP' }],
      [{ script: ' a € b ✓ c' }, {}],
      [{ script: ' a € b' }, { stop: '€' }],
      [{ script: ' x'.repeat(30) }, { max_tokens: 10 }],
    ];
    for (const [options, body] of cases) {
      const engine = fakeEngine(options);
      const whole = json(await post(engine, { model: 'fake', prompt: PROMPT, ...body }));
      const { evs } = await stream(options, body);
      const last = evs.at(-2);
      expect(streamedText(evs), JSON.stringify(body)).toBe(whole.choices[0].text);
      expect(last.choices[0].finish_reason).toBe(whole.choices[0].finish_reason);
    }
  });

  it('adds a usage chunk with include_usage', async () => {
    const { evs } = await stream({}, { temperature: 0, max_tokens: 4, stream_options: { include_usage: true } });
    expect(evs.at(-1)).toBe('[DONE]');
    const usageChunk = evs.at(-2);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toEqual({ prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 });
    expect(usageChunk.id).toBe(evs[0].id);
    for (const chunk of evs.slice(0, -2)) expect(chunk.usage).toBeNull();
    expect(evs.at(-3).choices[0].finish_reason).toBe('length');
  });

  it('sends no usage without include_usage', async () => {
    const { evs } = await stream({}, { temperature: 0, stream_options: { include_usage: false } });
    for (const chunk of evs.slice(0, -1)) {
      expect(chunk).not.toHaveProperty('usage');
      expect(chunk.choices).toHaveLength(1);
    }
  });

  it('never emits U+FFFD from a character split across byte tokens', async () => {
    const { evs } = await stream({ script: ' a €✓ b 😀' }, {});
    for (const e of evs.slice(0, -1)) expect(e.choices[0].text).not.toContain('\uFFFD');
    expect(streamedText(evs)).toBe(' a €✓ b 😀');
  });

  it('ends with a stop string, even when it spans several tokens, without leaking any of it', async () => {
    for (const stop of ['STOP', 'TOP', 'OP a', ' STOP', 'P and']) {
      const { engine, evs } = await stream({ script: ' Hello world STOP and more' }, { stop: [stop, 'never'] });
      const chunks = evs.slice(0, -1);
      const text = streamedText(evs);
      expect(text, stop).toBe(' Hello world STOP and more'.split(stop)[0]);
      expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');
      // No chunk ever carries a piece of the stop string past the cut.
      let sent = '';
      for (const c of chunks) {
        sent += c.choices[0].text;
        expect(text.startsWith(sent)).toBe(true);
      }
      // The generation was ended at the stop, not run to the end.
      expect(engine.generator.endings[0]!.how).toBe('returned');
    }
  });

  it('lets through text that only looked like the start of a stop string', async () => {
    const { evs } = await stream({ script: ' ST ST OP STO' }, { stop: ['STOP'] });
    expect(streamedText(evs)).toBe(' ST ST OP STO');
    expect(evs.at(-2).choices[0].finish_reason).toBe('stop'); // EOS
  });

  it('cuts at the earliest of several stop strings', async () => {
    const { evs } = await stream({ script: ' cat dog mat' }, { stop: ['mat', 'dog'] });
    expect(streamedText(evs)).toBe(' cat ');
  });

  it('turns a failure after the first chunk into an error event, then [DONE]', async () => {
    const { evs } = await stream({ failAfter: 3 }, { temperature: 0 });
    expect(evs.at(-1)).toBe('[DONE]');
    const error = evs.at(-2);
    expect(error.error).toMatchObject({ type: 'server_error', param: null });
    expect(error.error.message).toContain('fake GPU failure');
    expect(streamedText(evs.slice(0, -2))).toBe(' there was a');
  });

  it('answers an AbortError the client did not cause (a lost GPU device) with a 500 that onError sees, not a 499', async () => {
    const logged: unknown[] = [];
    const options = { onError: (e: unknown) => logged.push(e) };
    const engine = fakeEngine({ failAfter: 2, failAsAbort: true });
    const request = (body: Record<string, unknown>) =>
      handleApiRequest(engine, { method: 'POST', url: '/v1/completions', body: JSON.stringify({ model: 'fake', prompt: PROMPT, ...body }) }, options);
    const whole = await expectError(request({}), 500, null);
    expect(whole.type).toBe('server_error');
    expect(whole.message).toMatch(/device is lost/);
    const streamed = await request({ stream: true });
    expect(streamed.status).toBe(200);
    const events: string[] = [];
    for await (const e of streamed.body as AsyncIterable<string>) events.push(e);
    expect(JSON.parse(events.at(-2)!.slice('data: '.length)).error).toMatchObject({ type: 'server_error' });
    expect(logged).toHaveLength(2);
  });

  it('answers a failure before the first chunk with a 500 that clients should not retry', async () => {
    const engine = fakeEngine({ failAfter: 0 });
    const response = post(engine, { model: 'fake', prompt: PROMPT, stream: true });
    expect((await response).headers['x-should-retry']).toBe('false'); // it would fail the same way again
    const error = await expectError(response, 500, null);
    expect(error.type).toBe('server_error');
  });

  it('ends the generation when the reader stops early', async () => {
    const engine = fakeEngine({ script: ' a'.repeat(40) });
    const r = await post(engine, { model: 'fake', prompt: PROMPT, stream: true, max_tokens: 40 });
    for await (const piece of r.body as AsyncIterable<string>) {
      expect(piece).toMatch(/^data: /);
      break;
    }
    expect(engine.generator.endings).toEqual([expect.objectContaining({ how: 'returned' })]);
    expect(engine.generator.active).toBe(0);
  });

  it('ends silently when aborted', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(40) });
    const controller = new AbortController();
    const r = await post(engine, { model: 'fake', prompt: PROMPT, stream: true, max_tokens: 40 }, undefined, controller.signal);
    const got: string[] = [];
    for await (const piece of r.body as AsyncIterable<string>) {
      got.push(piece);
      if (got.length === 2) controller.abort();
    }
    expect(got.length).toBeLessThan(5);
    expect(got.join('')).not.toContain('error');
    expect(got.join('')).not.toContain('[DONE]');
    // Aborted inside the generator, or ended by the loop that saw the abort first.
    expect(['aborted', 'returned']).toContain(engine.generator.endings[0]!.how);
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(10);
    expect(engine.generator.active).toBe(0);
  });
});

describe('routes', () => {
  const engine = fakeEngine({ id: 'org/fake-llama', aliases: ['fake'], created: 1_700_000_123 });

  it('lists the model', async () => {
    const r = await get(engine, '/v1/models');
    expect(r.status).toBe(200);
    expect(json(r)).toEqual({
      object: 'list',
      data: [{ id: 'org/fake-llama', object: 'model', created: 1_700_000_123, owned_by: 'webgpu-llama', max_model_len: 64 }],
    });
  });

  it('retrieves the model by id (slash encoded or not) and alias', async () => {
    for (const url of ['/v1/models/org%2Ffake-llama', '/v1/models/org/fake-llama', '/v1/models/fake']) {
      const r = await get(engine, url);
      expect(r.status, url).toBe(200);
      expect(json(r)).toEqual({ id: 'org/fake-llama', object: 'model', created: 1_700_000_123, owned_by: 'webgpu-llama', max_model_len: 64 });
    }
    await expectError(get(engine, '/v1/models/other'), 404, null, 'model_not_found');
  });

  it('accepts ai_project_id and other query parameters', async () => {
    expect((await get(engine, '/v1/models?ai_project_id=abc')).status).toBe(200);
    const r = await post(engine, { model: 'fake', prompt: PROMPT }, '/v1/completions?ai_project_id=abc');
    expect(r.status).toBe(200);
  });

  it('answers other paths with 404 and wrong methods with 405', async () => {
    await expectError(get(engine, '/v1/embeddings'), 404, null, 'not_found');
    await expectError(get(engine, '/v1'), 404, null, 'not_found');
    await expectError(get(engine, '/v2/models'), 404, null, 'not_found');
    const r = await get(engine, '/v1/completions');
    await expectError(Promise.resolve(r), 405, null, 'method_not_allowed');
    expect(r.headers.allow).toBe('POST');
    for (const path of ['/v1/chat/completions', '/tokenize', '/v1/detokenize']) {
      const other = await get(engine, path);
      await expectError(Promise.resolve(other), 405, null, 'method_not_allowed');
      expect(other.headers.allow).toBe('POST');
    }
    const m = await post(engine, {}, '/v1/models');
    await expectError(Promise.resolve(m), 405, null, 'method_not_allowed');
    expect(m.headers.allow).toBe('GET, HEAD');
  });

  it('answers HEAD where GET is answered, without a body', async () => {
    for (const url of ['/v1/models', '/v1/models/fake']) {
      const r = await handleApiRequest(engine, { method: 'HEAD', url, body: null });
      expect(r.status, url).toBe(200);
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.body).toBe('');
    }
    const c = await handleApiRequest(engine, { method: 'HEAD', url: '/v1/completions', body: null });
    expect(c.status).toBe(405);
  });

  it('takes a trailing slash and another base path', async () => {
    expect((await get(engine, '/v1/models/')).status).toBe(200);
    const r = await handleApiRequest(engine, { method: 'GET', url: '/api/llm/v1/models', body: null }, { basePath: '/api/llm/v1/' });
    expect(r.status).toBe(200);
  });

  it('waits for an engine that is still loading', async () => {
    let resolve!: (e: ApiEngine) => void;
    const loading = new Promise<ApiEngine>((r) => (resolve = r));
    const pending = post(loading, { model: 'fake', prompt: PROMPT });
    setTimeout(() => resolve(engine), 20);
    expect((await pending).status).toBe(200);
  });

  it('answers an aborted request with 499, not as a server error', async () => {
    const slow = fakeEngine({ delayMs: 5, script: ' a'.repeat(40) });
    const controller = new AbortController();
    const errors: ApiError[] = [];
    setTimeout(() => controller.abort('client left'), 20);
    const r = await handleApiRequest(
      slow,
      { method: 'POST', url: '/v1/completions', body: JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 40 }), signal: controller.signal },
      { onError: (e) => errors.push(e) },
    );
    await expectError(Promise.resolve(r), 499, null, 'aborted');
    expect(errors).toEqual([]);
    expect(slow.generator.active).toBe(0);
  });

  it('answers 503 with the reason when the engine failed to load', async () => {
    const failed = Promise.reject(new Error('out of GPU memory'));
    failed.catch(() => {});
    const errors: ApiError[] = [];
    const r = await handleApiRequest(failed, { method: 'POST', url: '/v1/completions', body: '{}' }, { onError: (e) => errors.push(e) });
    const error = await expectError(Promise.resolve(r), 503, null);
    expect(error.type).toBe('service_unavailable');
    expect(error.message).toContain('out of GPU memory');
    expect(errors).toHaveLength(1);
    await expectError(get(failed, '/v1/models'), 503, null);
  });
});

describe('IncrementalDetokenizer', () => {
  const tokenizer = new FakeGenerator().tokenizer;

  it('gives the text of decoding everything at once, for random token sequences', () => {
    let state = 12345;
    const random = (n: number) => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state % n;
    };
    const prompt = tokenizer.encode('Once upon a time €');
    for (let trial = 0; trial < 300; trial++) {
      const ids = Array.from({ length: 1 + random(12) }, () =>
        random(3) === 0 ? 3 + [0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xc3, 0xa9, 0x41][random(10)]! : 3 + 256 + random(tokenizer.vocabSize - 259),
      );
      const detok = new IncrementalDetokenizer(tokenizer, prompt);
      let text = '';
      for (const id of ids) {
        const delta = detok.push(id);
        expect(delta.endsWith('\uFFFD')).toBe(false);
        text += delta;
      }
      text += detok.flush();
      const full = tokenizer.decode([...prompt, ...ids], { skipSpecialTokens: true });
      const head = tokenizer.decode(prompt, { skipSpecialTokens: true });
      expect(text, JSON.stringify(ids)).toBe(full.slice(head.length));
    }
  });

  it('finishes a character the prompt ended inside of, and keeps an unfinished one out of the completion', () => {
    const byte = (b: number) => 3 + b;
    // 你 is E4 BD A0; 😀 is F0 9F 98 80.
    const cut = new IncrementalDetokenizer(tokenizer, [...tokenizer.encode('x'), byte(0xe4), byte(0xbd)]);
    expect(cut.push(byte(0xa0))).toBe('你');
    expect(cut.push(tokenizer.id('▁a'))).toBe(' a');
    const emoji = new IncrementalDetokenizer(tokenizer, [...tokenizer.encode('x'), byte(0xf0), byte(0x9f)]);
    expect(emoji.push(byte(0x98))).toBe('');
    expect(emoji.peek(byte(0x80))).toBe('😀');
    expect(emoji.push(byte(0x80))).toBe('😀');
    // Nothing finishes it: the prompt's U+FFFD is not the completion's.
    const left = new IncrementalDetokenizer(tokenizer, [...tokenizer.encode('x'), byte(0xe4), byte(0xbd)]);
    expect(left.peek(tokenizer.id('▁a'))).toBe(' a');
    expect(left.push(tokenizer.id('▁a'))).toBe(' a');
    expect(left.flush()).toBe('');
  });

  it('bounds the decode window when ids keep the text held back (lone continuation bytes, skipped special tokens)', () => {
    let widest = 0;
    const counting = Object.create(tokenizer, {
      decode: { value: (ids: readonly number[], options?: { skipSpecialTokens?: boolean }) => ((widest = Math.max(widest, ids.length)), tokenizer.decode(ids, options)) },
    }) as typeof tokenizer;
    const prompt = tokenizer.encode('x');
    const ids = [...Array(200).fill(tokenizer.id(0x80)), tokenizer.id('▁a'), ...Array(200).fill(EOS), tokenizer.id('▁a')];
    const detok = new IncrementalDetokenizer(counting, prompt);
    let text = '';
    for (const id of ids) text += detok.push(id);
    text += detok.flush();
    expect(text).toBe(tokenizer.decode([...prompt, ...ids], { skipSpecialTokens: true }).slice(tokenizer.decode(prompt, { skipSpecialTokens: true }).length));
    expect(text.endsWith(' a a')).toBe(true); // the space after the skipped run kept
    expect(widest).toBeLessThan(40);
    // Skipped ids do not count towards the bound: a character after 16 of them comes out whole.
    const after = new IncrementalDetokenizer(tokenizer, prompt);
    let euro = '';
    for (const id of [...Array(16).fill(EOS), tokenizer.id(0xe2), tokenizer.id(0x82), tokenizer.id(0xac)]) euro += after.push(id);
    expect(euro + after.flush()).toBe('€');
  });

  it('holds back an incomplete UTF-8 sequence', () => {
    const detok = new IncrementalDetokenizer(tokenizer, tokenizer.encode('x'));
    expect(detok.push(tokenizer.id('▁a'))).toBe(' a');
    expect(detok.push(tokenizer.id(0xe2))).toBe('');
    expect(detok.push(tokenizer.id(0x82))).toBe('');
    expect(detok.push(tokenizer.id(0xac))).toBe('€');
    expect(detok.push(tokenizer.id(0xe2))).toBe('');
    expect(detok.flush()).toBe('\uFFFD');
  });
});

describe('StopStringMatcher', () => {
  it('holds back possible starts of stop strings', () => {
    const m = new StopStringMatcher(['abc', 'xyz']);
    expect(m.push('12a')).toEqual({ text: '12', stopped: false });
    expect(m.push('b')).toEqual({ text: '', stopped: false });
    expect(m.push('d')).toEqual({ text: 'abd', stopped: false });
    expect(m.push('x')).toEqual({ text: '', stopped: false });
    expect(m.push('yab')).toEqual({ text: 'xy', stopped: false });
    expect(m.flush()).toBe('ab');
  });

  it('stops before the stop string', () => {
    const m = new StopStringMatcher(['abc']);
    expect(m.push('12ab')).toEqual({ text: '12', stopped: false });
    expect(m.push('c34')).toEqual({ text: '', stopped: true });
    expect(m.stopped).toBe(true);
    expect(m.push('more')).toEqual({ text: '', stopped: true });
    expect(m.flush()).toBe('');
  });

  it('passes everything through without stop strings', () => {
    const m = new StopStringMatcher([]);
    expect(m.push('abc')).toEqual({ text: 'abc', stopped: false });
  });
});

/** The matcher's rules written out plainly (indexOf and endsWith over the held-back text at every piece). */
class NaiveStopMatcher {
  private pending = '';
  private done = false;
  armed = true;
  constructor(private readonly stops: string[], private readonly includeStop: boolean) {}
  push(text: string): { text: string; stopped: boolean } {
    if (this.done) return { text: '', stopped: true };
    this.pending += text;
    if (this.armed) {
      let first = -1;
      let firstStop = '';
      for (const stop of this.stops) {
        const at = this.pending.indexOf(stop);
        if (at >= 0 && (first < 0 || at < first || (at === first && stop.length > firstStop.length))) [first, firstStop] = [at, stop];
      }
      if (first >= 0) {
        this.done = true;
        return { text: this.pending.slice(0, this.includeStop ? first + firstStop.length : first), stopped: true };
      }
    }
    let longest = 0;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, this.pending.length); k > longest; k--) if (this.pending.endsWith(stop.slice(0, k))) longest = k;
    }
    const out = this.pending.slice(0, this.pending.length - longest);
    this.pending = this.pending.slice(this.pending.length - longest);
    return { text: out, stopped: false };
  }
}

describe('StopStringMatcher against the rules written out plainly', () => {
  it('random texts over a small alphabet, random stops, pieces and arming: the same output', () => {
    const rand = mulberry32(11);
    const word = (max: number) => Array.from({ length: 1 + Math.floor(rand() * max) }, () => 'ab'[Math.floor(rand() * 2)] + (rand() < 0.1 ? 'c' : '')).join('');
    for (let trial = 0; trial < 400; trial++) {
      const stops = Array.from({ length: 1 + Math.floor(rand() * 3) }, () => word(5));
      const includeStop = rand() < 0.5;
      const fast = new StopStringMatcher(stops, { includeStop });
      const naive = new NaiveStopMatcher(stops, includeStop);
      const armAt = Math.floor(rand() * 6);
      for (let piece = 0; piece < 12; piece++) {
        fast.armed = naive.armed = piece >= armAt;
        const text = word(4);
        expect(fast.push(text), `stops ${JSON.stringify(stops)}, piece ${piece}`).toEqual(naive.push(text));
      }
    }
  });
});

describe('StopStringMatcher options', () => {
  it('keeps the stop string with includeStop, and picks the longest of those starting first', () => {
    const m = new StopStringMatcher(['ab', 'abc'], { includeStop: true });
    expect(m.push('xxa')).toEqual({ text: 'xx', stopped: false });
    expect(m.push('bcd')).toEqual({ text: 'abc', stopped: true });
    const first = new StopStringMatcher(['ab', 'abc'], { includeStop: true });
    expect(first.push('xxab')).toEqual({ text: 'xxab', stopped: true });
  });

  it('does not stop while not armed, but still holds back starts of a stop string', () => {
    const m = new StopStringMatcher(['STOP']);
    m.armed = false;
    expect(m.push('a STOP b ST')).toEqual({ text: 'a STOP b ', stopped: false });
    m.armed = true;
    expect(m.push('OP c')).toEqual({ text: '', stopped: true });
  });
});

describe('sessions', () => {
  it('runs the n sequences of a prompt in ONE session, one after another, indexes 0..n-1', async () => {
    const { generator } = fakeEngine();
    const r = (await createCompletion(generator, { model: 'fake', prompt: PROMPT, n: 3, seed: 1, max_tokens: 4 })) as CompletionResponse;
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(generator.sessions).toHaveLength(1);
    expect(generator.sequences.map((s) => s.options.index)).toEqual([0, 1, 2]);
    expect(generator.events.map((e) => e.kind)).toEqual(['open', 'start', 'end', 'start', 'end', 'start', 'end', 'close']);
  });

  it('opens one session per prompt of a batch, in order; best_of candidates share it', async () => {
    const { generator } = fakeEngine();
    const r = (await createCompletion(generator, { model: 'fake', prompt: ['a', 'b'], n: 1, best_of: 3, max_tokens: 2 })) as CompletionResponse;
    expect(r.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(generator.sessions.map((s) => s.promptTokens)).toEqual([generator.tokenizer.encode('a'), generator.tokenizer.encode('b')]);
    expect(generator.sequences.map((s) => s.options.index)).toEqual([0, 1, 2, 0, 1, 2]);
    expect(generator.active).toBe(0);
  });

  it('asks for logprobs and prompt logprobs only when needed; no session for nothing to do', async () => {
    const { generator } = fakeEngine();
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, logprobs: 3, max_tokens: 1 });
    expect(generator.sessions.at(-1)).toMatchObject({ logprobs: 3 });
    expect(generator.sessions.at(-1)!.promptLogprobs).toBeUndefined();
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, echo: true, max_tokens: 1 });
    expect(generator.sessions.at(-1)!.promptLogprobs).toBeUndefined();
    expect(generator.sessions.at(-1)!.logprobs).toBeUndefined();
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, echo: true, logprobs: 0, max_tokens: 0 });
    expect(generator.sessions.at(-1)).toMatchObject({ logprobs: 0, promptLogprobs: true });
    expect(generator.sequences).toHaveLength(2); // max_tokens 0 decodes nothing
    const before = generator.sessions.length;
    const r = (await createCompletion(generator, { model: 'fake', prompt: PROMPT, echo: true, max_tokens: 0, n: 2 })) as CompletionResponse;
    expect(r.choices.map((c) => c.text)).toEqual([PROMPT, PROMPT]);
    expect(generator.sessions.length).toBe(before);
  });

  it('ends a sequence at a stop string and goes on with the next one in the same session', async () => {
    const { generator } = fakeEngine({ script: ' Hello world STOP and more' });
    const r = (await createCompletion(generator, { model: 'fake', prompt: PROMPT, n: 2, stop: 'STOP', max_tokens: 20 })) as CompletionResponse;
    expect(r.choices.map((c) => [c.text, c.finish_reason])).toEqual([
      [' Hello world ', 'stop'],
      [' Hello world ', 'stop'],
    ]);
    expect(generator.endings.map((e) => e.how)).toEqual(['returned', 'returned']);
    expect(generator.active).toBe(0);
  });

  it('closes the session on a failure, an abort and a reader that stops early', async () => {
    const failing = fakeEngine({ failAfter: 2 }).generator;
    await expect(createCompletion(failing, { model: 'fake', prompt: PROMPT, n: 2 })).rejects.toThrow('fake GPU failure');
    expect(failing.active).toBe(0);

    const slow = fakeEngine({ delayMs: 5, script: ' a'.repeat(40) }).generator;
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 25);
    await expect(createCompletion(slow, { model: 'fake', prompt: PROMPT, n: 3, max_tokens: 40 }, { signal: controller.signal })).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(slow.active).toBe(0);
    expect(slow.sequences).toHaveLength(1);

    const streamed = fakeEngine({ script: ' a'.repeat(40) }).generator;
    const chunks = (await createCompletion(streamed, { model: 'fake', prompt: PROMPT, n: 2, max_tokens: 40, stream: true })) as AsyncIterable<CompletionChunk>;
    for await (const _ of chunks) break;
    expect(streamed.active).toBe(0);
  });

  it('answers a full queue with 429 (rate_limit_exceeded, retry-after)', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(10), maxQueued: 1 });
    const body = { model: 'fake', prompt: PROMPT, max_tokens: 10 };
    const responses = await Promise.all([post(engine, body), post(engine, body), post(engine, body), post(engine, { ...body, stream: true })]);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 429, 429]);
    const error = await expectError(Promise.resolve(responses[2]!), 429, null, 'rate_limit_exceeded');
    expect(error.type).toBe('rate_limit_error');
    expect(responses[2]!.headers['retry-after']).toBe('1');
    // The queue drains; the next request is served.
    expect((await post(engine, body)).status).toBe(200);
  });
});

describe('logprobs and echo', () => {
  it('gives a character spelled by byte tokens to the token that completes it', async () => {
    const engine = fakeEngine({ script: ' a €' }); // ▁a ▁ <E2> <82> <AC>
    const body = json(await post(engine, { model: 'fake', prompt: PROMPT, logprobs: 0 }));
    const lp = body.choices[0].logprobs;
    expect(body.choices[0].text).toBe(' a €');
    expect(lp.tokens).toEqual([' a', ' ', '', '', '€']);
    expect(lp.text_offset).toEqual([0, 2, 3, 3, 3]);
    expect(lp.top_logprobs.map((t: Json) => Object.keys(t))).toEqual([[' a'], [' '], [''], [''], ['€']]);
  });

  it('shows a byte that never completes a character as U+FFFD, as the text does', async () => {
    const engine = fakeEngine();
    const t = engine.generator.tokenizer;
    const scripted = fakeEngine({ script: [t.id('▁a'), t.id(0xe2)] });
    const body = json(await post(scripted, { model: 'fake', prompt: PROMPT, logprobs: 1, max_tokens: 2 }));
    expect(body.choices[0].text).toBe(' a\uFFFD');
    expect(body.choices[0].logprobs.tokens).toEqual([' a', '\uFFFD']);
  });

  it('keys alternatives by the text they would add; special tokens by their own text', async () => {
    // After the script, EOS is by far the most likely; banned by logit_bias, the runner-up is sampled.
    const engine = fakeEngine({ script: ' a' });
    const body = json(await post(engine, { model: 'fake', prompt: PROMPT, logprobs: 2, max_tokens: 2, logit_bias: { [EOS]: -100 } }));
    const top = body.choices[0].logprobs.top_logprobs[1];
    expect(Object.keys(top)[0]).toBe('</s>');
    expect(Object.keys(top)).toContain(body.choices[0].logprobs.tokens[1]);
    const raw = engine.generator.logits([...engine.generator.tokenizer.encode(PROMPT), engine.generator.tokenizer.id('▁a')], engine.generator.script({} as never));
    expect(top['</s>']).toBeCloseTo(raw[EOS]! - Math.log(raw.reduce((s, v) => s + Math.exp(v), 0)), 9);
  });

  it('builds top_logprobs objects: k alternatives, the sampled one always, collisions resolved', () => {
    const textOf = (id: number) => ['a', 'b', 'a', 'c'][id]!;
    expect(topLogprobsObject({ id: 3, logprob: -5 }, 'c', [{ id: 0, logprob: -1 }, { id: 1, logprob: -2 }], 2, textOf)).toEqual({ a: -1, b: -2, c: -5 });
    // The sampled token's value wins a shared key; otherwise the more likely one's.
    expect(topLogprobsObject({ id: 2, logprob: -3 }, 'a', [{ id: 0, logprob: -1 }, { id: 2, logprob: -3 }], 2, textOf)).toEqual({ a: -3 });
    expect(topLogprobsObject({ id: 1, logprob: -2 }, 'b', [{ id: 0, logprob: -1 }, { id: 2, logprob: -3 }], 2, textOf)).toEqual({ a: -1, b: -2 });
    // k = 0: the sampled token alone.
    expect(topLogprobsObject({ id: 1, logprob: -2 }, 'b', [{ id: 0, logprob: -1 }], 0, textOf)).toEqual({ b: -2 });
    // '__proto__' is a plain key.
    expect(Object.keys(topLogprobsObject({ id: 1, logprob: -2 }, '__proto__', [], 0, textOf))).toEqual(['__proto__']);
    expect(finiteLogprob(-Infinity)).toBe(-9999);
    expect(finiteLogprob(-1.5)).toBe(-1.5);
  });

  it('streams each token’s logprobs with the chunk that carries its text; held-back tokens come last', async () => {
    const engine = fakeEngine({ script: ' Hello world STOP and more' });
    const r = await post(engine, { model: 'fake', prompt: PROMPT, logprobs: 0, stop: 'STOP', stream: true });
    const chunks = (await events(r)).slice(0, -1);
    for (const chunk of chunks.slice(0, -1)) expect(chunk.choices[0].logprobs.tokens.join('')).toBe(chunk.choices[0].text);
    const last = chunks.at(-1).choices[0];
    expect(last.finish_reason).toBe('stop');
    // 'ST' and 'OP' were generated (and counted) but cut: their entries come with the last chunk, past the text.
    expect(last.logprobs.tokens.slice(-2)).toEqual(['ST', 'OP']);
    const text = chunks.map((c: Json) => c.choices[0].text).join('');
    expect(text).toBe(' Hello world ');
    expect(last.logprobs.text_offset.slice(-2)).toEqual([13, 15]);
  });

  it('echoes the prompt as given; with logprobs, as decoded (so offsets hold)', async () => {
    const engine = fakeEngine({ script: ' x' });
    const prompt = 'a<s>b'; // '<s>' is parsed as BOS, which decodes to nothing
    const plain = json(await post(engine, { model: 'fake', prompt, echo: true, max_tokens: 2 }));
    expect(plain.choices[0].text).toBe('a<s>b x');
    const scored = json(await post(engine, { model: 'fake', prompt, echo: true, logprobs: 1, max_tokens: 2 }));
    const lp = scored.choices[0].logprobs;
    expect(scored.choices[0].text).toBe('ab x');
    expect(lp.tokens).toEqual(['', 'a', '', 'b', ' ', 'x']);
    expect(lp.text_offset).toEqual([0, 0, 1, 1, 2, 3]);
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs[0]).toBeNull();
  });

  it('scores the prompt with the logits of its own prefixes (real log-softmax)', async () => {
    const engine = fakeEngine();
    const g = engine.generator;
    const ids = g.tokenizer.encode(PROMPT);
    const body = json(await post(engine, { model: 'fake', prompt: PROMPT, echo: true, logprobs: 0, max_tokens: 0 }));
    const expected = ids.slice(1).map((id, i) => {
      const logits = g.logits(ids.slice(0, i + 1));
      const lse = Math.log(logits.reduce((s, v) => s + Math.exp(v), 0));
      return logits[id]! - lse;
    });
    body.choices[0].logprobs.token_logprobs.slice(1).forEach((v: number, i: number) => expect(v).toBeCloseTo(expected[i]!, 9));
  });
});

describe('parseRequestJson', () => {
  it('reads the NaN and Infinity that Python writes, outside strings only', () => {
    expect(parseRequestJson('{"a": 1}')).toEqual({ a: 1 });
    const parsed = parseRequestJson('{"t": NaN, "p": -Infinity, "q": Infinity, "s": "NaN \\" Infinity"}') as Json;
    expect(parsed.t).toBeNaN();
    expect(parsed.p).toBe(-Infinity);
    expect(parsed.q).toBe(Infinity);
    expect(parsed.s).toBe('NaN " Infinity');
    expect(() => parseRequestJson('{"a": }')).toThrow();
    expect(() => parseRequestJson('{"a": NaN,}')).toThrow();
  });

  it('names the parameter holding it', async () => {
    const engine = fakeEngine();
    await expectError(post(engine, '{"model": "fake", "prompt": "NaN and Infinity", "top_p": -Infinity}'), 400, 'top_p', 'invalid_type');
    await expectError(post(engine, '{"model": "fake", "extra_body": {"min_p": NaN}}'), 400, 'extra_body.min_p', 'invalid_type');
  });
});

describe('ChoiceText', () => {
  const tokenizer = new FakeGenerator().tokenizer;
  const prompt = tokenizer.encode(PROMPT);
  const token = (piece: string | number) => ({ id: tokenizer.id(piece), logprob: -1 });

  it('looks for stop strings only once min_tokens tokens were generated', () => {
    const choice = new ChoiceText(tokenizer, prompt, { stop: ['ST'], includeStop: false, skipSpecialTokens: true, minTokens: 3, logprobs: null, textOffset: 0 });
    expect(choice.push(token('▁a'))).toEqual({ piece: { text: ' a', entries: [] }, stopped: false });
    expect(choice.push(token('ST'))).toEqual({ piece: { text: 'ST', entries: [] }, stopped: false });
    // The third token arms the stop strings: 'S' 'T' completes one now.
    expect(choice.push(token('S')).stopped).toBe(false);
    expect(choice.push(token('T'))).toEqual({ piece: { text: '', entries: [] }, stopped: true });
  });

  it('counts offsets from the echo', () => {
    const choice = new ChoiceText(tokenizer, prompt, { stop: [], includeStop: false, skipSpecialTokens: true, minTokens: 0, logprobs: 0, textOffset: 16 });
    expect(choice.push(token('▁there')).piece.entries).toEqual([{ token: ' there', logprob: -1, top: { ' there': -1 }, offset: 16, id: tokenizer.id('▁there'), alternatives: [] }]);
    expect(choice.push(token('▁was')).piece.entries[0]!.offset).toBe(22);
    expect(choice.finish()).toEqual({ text: '', entries: [] });
  });
});
