// The request layer (src/api) against a fake generator: validation, responses, streaming,
// detokenization, stop strings, errors.
import { describe, expect, it } from 'vitest';
import { createCompletion, type CompletionChunk, type CompletionResponse } from '../src/api/completions.ts';
import { IncrementalDetokenizer } from '../src/api/detokenize.ts';
import { ApiError } from '../src/api/errors.ts';
import { handleApiRequest, type ApiEngine, type ApiResponse } from '../src/api/handler.ts';
import { COMPLETION_PARAMS, validateCompletionRequest } from '../src/api/schema.ts';
import { StopStringMatcher } from '../src/api/stream.ts';
import { DEFAULT_STORY, EOS, FakeGenerator, fakeEngine, type FakeGeneratorOptions } from './helpers/fake-generator.ts';

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
    ['top_p', 0],
    ['top_p', 1.5],
    ['top_p', -1],
    ['top_p', [0.5]],
    ['stream', 'yes'],
    ['stream', 1],
    ['seed', 1.5],
    ['seed', '42'],
    ['seed', 2 ** 60],
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
    ['logprobs', 6],
    ['presence_penalty', 2.5],
    ['presence_penalty', 'x'],
    ['frequency_penalty', -3],
    ['logit_bias', [1]],
    ['logit_bias', { abc: 1 }],
    ['suffix', 5],
  ];
  it.each(badValues)('%s = %j → 400 naming the parameter', async (param, value) => {
    const error = await expectError(post(engine, { ...ok, [param]: value }), 400, param);
    expect(error.type).toBe('invalid_request_error');
  });

  const notYet: [string, unknown][] = [
    ['prompt', [1, 2, 3]],
    ['prompt', [[1, 2], [3]]],
    ['prompt', ['a', 'b']],
    ['n', 2],
    ['best_of', 3],
    ['echo', true],
    ['logprobs', 0],
    ['logprobs', 5],
    ['presence_penalty', 0.5],
    ['frequency_penalty', -1],
    ['logit_bias', { '5': 10 }],
    ['suffix', ' and then'],
  ];
  it.each(notYet)('%s = %j → 400 not supported yet', async (param, value) => {
    const error = await expectError(post(engine, { ...ok, [param]: value }), 400, param, 'unsupported_value');
    expect(error.message).toMatch(/not supported yet/);
    expect(error.message).toContain(param);
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
    ['stream', false],
    ['seed', 42],
    ['seed', -7],
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
      prompt: '',
      max_tokens: 16,
      temperature: 1,
      top_p: 1,
      stream: false,
      stream_options: null,
      seed: null,
      stop: [],
      user: null,
      n: 1,
      best_of: 1,
      echo: false,
      logprobs: null,
      presence_penalty: 0,
      frequency_penalty: 0,
      logit_bias: null,
      suffix: null,
    });
    // null means the default, except max_tokens: null = no limit.
    const nulls = validateCompletionRequest({ model: 'm', temperature: null, top_p: null, max_tokens: null, stop: null });
    expect(nulls.temperature).toBe(1);
    expect(nulls.top_p).toBe(1);
    expect(nulls.max_tokens).toBeNull();
    expect(nulls.stop).toEqual([]);
    expect(validateCompletionRequest({ model: 'm', stop: 'x' }).stop).toEqual(['x']);
  });

  it('rejects NaN and infinities (callers that skip JSON)', async () => {
    for (const [param, value] of [
      ['temperature', NaN],
      ['top_p', NaN],
      ['max_tokens', Infinity],
      ['seed', NaN],
      ['presence_penalty', -Infinity],
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
    expect((await post(engine, { ...ok, stream_options: null })).status).toBe(200);
    expect((await post(engine, { ...ok, stream: true, stream_options: {} })).status).toBe(200);
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
    const start = generator.events[0]!;
    expect(start.kind).toBe('start');
    if (start.kind !== 'start') return;
    expect(start.request.promptTokens).toEqual(generator.tokenizer.encode(PROMPT));
    expect(start.request.promptTokens[0]).toBe(1); // BOS
    expect(start.request.maxTokens).toBe(7);
    expect(start.request.sampling).toEqual({ temperature: 0.7, topP: 0.9, seed: 3 });
    expect(start.request.stopTokenIds).toEqual([EOS]);
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

  it('is deterministic per seed', async () => {
    const engine = fakeEngine();
    const text = async (seed: number) =>
      json(await post(engine, { model: 'fake-llama', prompt: PROMPT, seed, max_tokens: 20 })).choices[0].text as string;
    expect(await text(1)).toBe(await text(1));
    expect(await text(1)).not.toBe(await text(2));
  });

  it('rejects an empty prompt for a model without BOS', async () => {
    await expectError(post(fakeEngine({ addBos: false }), { model: 'fake-llama', prompt: '' }), 400, 'prompt');
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

  it('answers a failure before the first chunk with a 500', async () => {
    const engine = fakeEngine({ failAfter: 0 });
    const error = await expectError(post(engine, { model: 'fake', prompt: PROMPT, stream: true }), 500, null);
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
      data: [{ id: 'org/fake-llama', object: 'model', created: 1_700_000_123, owned_by: 'webgpu-llama' }],
    });
  });

  it('retrieves the model by id (slash encoded or not) and alias', async () => {
    for (const url of ['/v1/models/org%2Ffake-llama', '/v1/models/org/fake-llama', '/v1/models/fake']) {
      const r = await get(engine, url);
      expect(r.status, url).toBe(200);
      expect(json(r)).toEqual({ id: 'org/fake-llama', object: 'model', created: 1_700_000_123, owned_by: 'webgpu-llama' });
    }
    await expectError(get(engine, '/v1/models/other'), 404, null, 'model_not_found');
  });

  it('accepts ai_project_id and other query parameters', async () => {
    expect((await get(engine, '/v1/models?ai_project_id=abc')).status).toBe(200);
    const r = await post(engine, { model: 'fake', prompt: PROMPT }, '/v1/completions?ai_project_id=abc');
    expect(r.status).toBe(200);
  });

  it('answers other paths with 404 and wrong methods with 405', async () => {
    await expectError(get(engine, '/v1/chat/completions'), 404, null, 'not_found');
    await expectError(get(engine, '/v1'), 404, null, 'not_found');
    await expectError(get(engine, '/v2/models'), 404, null, 'not_found');
    const r = await get(engine, '/v1/completions');
    await expectError(Promise.resolve(r), 405, null, 'method_not_allowed');
    expect(r.headers.allow).toBe('POST');
    const m = await post(engine, {}, '/v1/models');
    await expectError(Promise.resolve(m), 405, null, 'method_not_allowed');
    expect(m.headers.allow).toBe('GET');
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
