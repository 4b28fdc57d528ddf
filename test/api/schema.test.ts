// The request schema (src/api/schema.ts) against a fake generator: every parameter's type and
// range, what is refused with which error, and the parameters as the generator sees them. The
// contract as seen from outside (every parameter, over HTTP) is the conformance suite,
// test/conformance/.
import { describe, expect, it } from 'vitest';
import { createCompletion, MIN_SAMPLING_TEMPERATURE, samplingParams } from '../../src/api/completions.ts';
import { ApiError } from '../../src/api/errors.ts';
import { handleApiRequest } from '../../src/api/handler.ts';
import { COMPLETION_PARAMS, validateCompletionRequest } from '../../src/api/schema.ts';
import { fakeEngine } from '../helpers/fake-generator.ts';
import { expectError, json, post, PROMPT, statusOf } from '../helpers/api-requests.ts';

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
      cache_prompt: true,
      stop_token_ids: [],
      skip_special_tokens: true,
      include_stop_str_in_output: false,
      response_format: null,
      guided_json: null,
      guided_regex: null,
      guided_choice: null,
      guided_grammar: null,
      structural_tag: null,
      guided_whitespace_pattern: null,
      guided_decoding_backend: null,
      structured_outputs: null,
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
