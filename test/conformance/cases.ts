// The conformance suite of POST /v1/completions (issue 3): cases as data (validation errors) and
// as small procedures (everything numeric), written against a fetch-like function and a base
// URL only, so they run against any host: the Node server (node-http*.test.ts), the page's fetch
// shim (Playwright, with a fetch that forwards into the page), a model-less fake or a real model.
// Nothing here knows the model's logits: every numeric expectation is derived from what the
// server itself reports (raw logprobs), through the formulas of the API.
import OpenAI from 'openai';
import { close, eq, fail, keys, match, ok } from './assert.ts';
import { Api, checkError, chunksOf, parseSse, streamedChoices, type Capability, type Json, type ModelProfile, type SseData } from './target.ts';

export interface ConformanceCase {
  group: string;
  name: string;
  /** What the host must support; a host without it skips the case. */
  needs?: readonly Capability[];
  run(api: Api): Promise<void>;
}

// ---- helpers --------------------------------------------------------------------------------------

const RESPONSE_KEYS = ['choices', 'created', 'id', 'model', 'object', 'service_tier', 'usage'];
const CHOICE_KEYS = ['finish_reason', 'index', 'logprobs', 'text'];
const LOGPROBS_KEYS = ['text_offset', 'token_logprobs', 'tokens', 'top_logprobs'];

function checkResponseShape(api: Api, body: Json, what: string): void {
  keys(body, RESPONSE_KEYS, `${what}: response`);
  match(body.id, /^cmpl-[A-Za-z0-9]+$/, `${what}: id`);
  eq(body.object, 'text_completion', `${what}: object`);
  ok(Number.isInteger(body.created) && Math.abs(body.created - Date.now() / 1000) < 600, `${what}: created is a Unix time in seconds, got ${body.created}`);
  eq(body.model, api.profile.model, `${what}: model`);
  for (const choice of body.choices) {
    keys(choice, CHOICE_KEYS, `${what}: choice`);
    ok(typeof choice.text === 'string', `${what}: text is a string`);
    ok(choice.finish_reason === 'stop' || choice.finish_reason === 'length', `${what}: finish_reason ${choice.finish_reason}`);
    if (choice.logprobs !== null) checkLogprobsShape(choice.logprobs, `${what}: choice ${choice.index}`);
  }
  keys(body.usage, ['completion_tokens', 'prompt_tokens', 'total_tokens', 'prompt_tokens_details'], `${what}: usage`);
  eq(body.usage.total_tokens, body.usage.prompt_tokens + body.usage.completion_tokens, `${what}: total_tokens = prompt + completion`);
  keys(body.usage.prompt_tokens_details, ['cached_tokens'], `${what}: usage.prompt_tokens_details`);
  const cached = body.usage.prompt_tokens_details.cached_tokens;
  ok(Number.isInteger(cached) && cached >= 0 && cached < body.usage.prompt_tokens, `${what}: cached_tokens ${cached} in [0, prompt_tokens)`);
}

function checkLogprobsShape(lp: Json, what: string): void {
  keys(lp, LOGPROBS_KEYS, `${what}: logprobs`);
  const n = lp.tokens.length;
  for (const k of LOGPROBS_KEYS) eq(lp[k].length, n, `${what}: logprobs.${k} has one entry per token`);
  lp.tokens.forEach((t: unknown, i: number) => {
    ok(typeof t === 'string', `${what}: tokens[${i}] is a string`);
    const v = lp.token_logprobs[i];
    ok(v === null || (typeof v === 'number' && v <= 1e-6), `${what}: token_logprobs[${i}] = ${v} is a logprob`);
    const top = lp.top_logprobs[i];
    if (top !== null) {
      ok(typeof top === 'object' && !Array.isArray(top), `${what}: top_logprobs[${i}] is an object`);
      for (const value of Object.values(top)) ok(typeof value === 'number' && value <= 1e-6, `${what}: top_logprobs[${i}] values are logprobs`);
    }
    ok(Number.isInteger(lp.text_offset[i]), `${what}: text_offset[${i}] is an integer`);
    if (i > 0) ok(lp.text_offset[i] >= lp.text_offset[i - 1], `${what}: text_offset never goes back`);
  });
}

/**
 * text_offset is consistent with `text`: each token's text stands at its offset, for every token
 * that lies within the text (a stop string cut from the text may leave tokens past its end), and
 * without a cut the tokens spell the text exactly.
 */
function checkOffsets(text: string, lp: Json, what: string, options: { cut?: boolean; start?: number } = {}): void {
  const start = options.start ?? 0;
  if (lp.tokens.length > 0) eq(lp.text_offset[0], start, `${what}: the first text_offset`);
  lp.tokens.forEach((token: string, i: number) => {
    const at = lp.text_offset[i];
    if (at + token.length <= text.length) eq(text.slice(at, at + token.length), token, `${what}: token ${i} stands at text_offset ${at}`);
    else ok(options.cut, `${what}: token ${i} (${JSON.stringify(token)} at ${at}) runs past the end of the text (${text.length})`);
    if (i + 1 < lp.tokens.length) eq(lp.text_offset[i + 1], at + token.length, `${what}: text_offset[${i + 1}] follows token ${i}`);
  });
  if (!options.cut) eq(text.slice(0, start) + lp.tokens.join(''), text, `${what}: the tokens spell the text`);
}

/** The entries of a top_logprobs object, most likely first. */
function ranked(top: Record<string, number>): [string, number][] {
  return Object.entries(top).sort((a, b) => b[1] - a[1]);
}

function text0(body: Json): string {
  return body.choices[0].text;
}

const greedy = { temperature: 0 } as const;

function promptIds(api: Api, prompt = api.profile.prompt): number[] {
  return api.profile.tokenizer.encode(prompt);
}

/** Room for a completion after the profile's prompt. */
function room(api: Api): number {
  return api.profile.contextLength - promptIds(api).length;
}

// ---- validation: data -------------------------------------------------------------------------------

export interface ErrorCase {
  name: string;
  /** Merged over {model, prompt} (a string is sent as the raw body; a function gets the profile). */
  body: Record<string, unknown> | string | ((profile: ModelProfile) => Record<string, unknown> | string);
  /** Send `body` alone, not merged over {model, prompt}. */
  alone?: boolean;
  status: number;
  param: string | null;
  code?: string | null;
  message?: RegExp;
}

export const ERROR_CASES: ErrorCase[] = [
  { name: 'malformed JSON', body: '{"model": "x", ', alone: true, status: 400, param: null, code: 'invalid_json' },
  { name: 'empty body', body: '', alone: true, status: 400, param: null, code: 'invalid_json' },
  { name: 'a JSON array body', body: '[1, 2]', alone: true, status: 400, param: null },
  { name: 'missing model', body: { prompt: 'x' }, alone: true, status: 400, param: 'model', code: 'missing_required_parameter' },
  { name: 'model null', body: { model: null }, status: 400, param: 'model' },
  { name: 'model a number', body: { model: 7 }, status: 400, param: 'model', code: 'invalid_type' },
  { name: 'unknown model', body: { model: 'gpt-3.5-turbo-instruct' }, status: 404, param: 'model', code: 'model_not_found' },
  { name: 'unknown parameter', body: { frobnicate: 1 }, status: 400, param: 'frobnicate', code: 'unknown_parameter' },
  { name: 'prompt a number', body: { prompt: 5 }, status: 400, param: 'prompt', code: 'invalid_type' },
  { name: 'prompt an object', body: { prompt: { text: 'x' } }, status: 400, param: 'prompt' },
  { name: 'prompt an empty array', body: { prompt: [] }, status: 400, param: 'prompt' },
  { name: 'prompt an empty token array', body: { prompt: [[]] }, status: 400, param: 'prompt' },
  { name: 'prompt mixing strings and ids', body: { prompt: ['a', 1] }, status: 400, param: 'prompt' },
  { name: 'prompt with a negative token id', body: { prompt: [1, -1] }, status: 400, param: 'prompt' },
  { name: 'prompt with a fractional token id', body: { prompt: [1, 2.5] }, status: 400, param: 'prompt' },
  { name: 'prompt token id outside the vocabulary', body: (p) => ({ prompt: [1, p.tokenizer.vocabSize] }), status: 400, param: 'prompt', code: 'invalid_value' },
  { name: 'prompt batch with an id outside the vocabulary', body: (p) => ({ prompt: [[1, 2], [p.tokenizer.vocabSize + 3]] }), status: 400, param: 'prompt', code: 'invalid_value' },
  { name: 'suffix', body: { suffix: ' and they lived happily' }, status: 400, param: 'suffix', message: /fill-in-the-middle/ },
  { name: 'max_tokens negative', body: { max_tokens: -1 }, status: 400, param: 'max_tokens', code: 'value_below_minimum' },
  { name: 'max_tokens a string', body: { max_tokens: '16' }, status: 400, param: 'max_tokens', code: 'invalid_type' },
  { name: 'max_tokens fractional', body: { max_tokens: 2.5 }, status: 400, param: 'max_tokens', code: 'invalid_type' },
  {
    name: 'max_tokens beyond the context',
    body: (p) => ({ max_tokens: p.contextLength }),
    status: 400,
    param: 'max_tokens',
    code: 'context_length_exceeded',
  },
  { name: 'temperature below 0', body: { temperature: -0.5 }, status: 400, param: 'temperature', code: 'value_below_minimum' },
  { name: 'temperature above 2', body: { temperature: 2.5 }, status: 400, param: 'temperature', code: 'value_above_maximum' },
  { name: 'temperature a string', body: { temperature: 'hot' }, status: 400, param: 'temperature', code: 'invalid_type' },
  { name: 'temperature NaN (as Python writes it)', body: (p) => `{"model": ${JSON.stringify(p.model)}, "temperature": NaN}`, alone: true, status: 400, param: 'temperature', code: 'invalid_type' },
  { name: 'top_p Infinity (as Python writes it)', body: (p) => `{"model": ${JSON.stringify(p.model)}, "top_p": Infinity}`, alone: true, status: 400, param: 'top_p', code: 'invalid_type' },
  { name: 'top_p below 0', body: { top_p: -0.01 }, status: 400, param: 'top_p', code: 'value_below_minimum' },
  { name: 'top_p above 1', body: { top_p: 1.01 }, status: 400, param: 'top_p', code: 'value_above_maximum' },
  { name: 'n 0', body: { n: 0 }, status: 400, param: 'n', code: 'value_below_minimum' },
  { name: 'n above 128', body: { n: 129 }, status: 400, param: 'n', code: 'value_above_maximum' },
  { name: 'n fractional', body: { n: 1.5 }, status: 400, param: 'n', code: 'invalid_type' },
  { name: 'best_of 0', body: { best_of: 0 }, status: 400, param: 'best_of' },
  { name: 'best_of above 20', body: { best_of: 21 }, status: 400, param: 'best_of' },
  { name: 'best_of below n', body: { n: 3, best_of: 2 }, status: 400, param: 'best_of', code: 'invalid_value' },
  { name: 'best_of with stream', body: { best_of: 2, stream: true }, status: 400, param: 'best_of', message: /stream/ },
  { name: 'logprobs negative', body: { logprobs: -1 }, status: 400, param: 'logprobs' },
  { name: 'logprobs above 20', body: { logprobs: 21 }, status: 400, param: 'logprobs', code: 'value_above_maximum' },
  { name: 'logprobs a boolean', body: { logprobs: true }, status: 400, param: 'logprobs', code: 'invalid_type' },
  { name: 'echo a string', body: { echo: 'yes' }, status: 400, param: 'echo', code: 'invalid_type' },
  { name: 'stop a number', body: { stop: 5 }, status: 400, param: 'stop' },
  { name: 'stop with 5 strings', body: { stop: ['a', 'b', 'c', 'd', 'e'] }, status: 400, param: 'stop' },
  { name: 'stop with a number inside', body: { stop: ['a', 1] }, status: 400, param: 'stop' },
  { name: 'presence_penalty above 2', body: { presence_penalty: 2.5 }, status: 400, param: 'presence_penalty' },
  { name: 'frequency_penalty below -2', body: { frequency_penalty: -2.5 }, status: 400, param: 'frequency_penalty' },
  { name: 'logit_bias an array', body: { logit_bias: [1] }, status: 400, param: 'logit_bias' },
  { name: 'logit_bias key not a token id', body: { logit_bias: { hello: 1 } }, status: 400, param: 'logit_bias' },
  { name: 'logit_bias value above 100', body: { logit_bias: { '5': 101 } }, status: 400, param: 'logit_bias.5', code: 'value_above_maximum' },
  { name: 'logit_bias value a string', body: { logit_bias: { '5': 'ban' } }, status: 400, param: 'logit_bias.5', code: 'invalid_type' },
  { name: 'logit_bias id outside the vocabulary', body: (p) => ({ logit_bias: { [p.tokenizer.vocabSize]: 5 } }), status: 400, param: 'logit_bias', code: 'invalid_value' },
  { name: 'seed fractional', body: { seed: 1.5 }, status: 400, param: 'seed' },
  { name: 'seed a string', body: { seed: '42' }, status: 400, param: 'seed' },
  { name: 'user a number', body: { user: 42 }, status: 400, param: 'user' },
  { name: "service_tier 'over-limit'", body: { service_tier: 'over-limit' }, status: 400, param: 'service_tier', message: /over-limit/ },
  { name: 'service_tier unknown', body: { service_tier: 'premium' }, status: 400, param: 'service_tier' },
  { name: 'stream a string', body: { stream: 'true' }, status: 400, param: 'stream' },
  { name: 'stream_options without stream', body: { stream_options: { include_usage: true } }, status: 400, param: 'stream_options' },
  { name: 'stream_options with an unknown key', body: { stream: true, stream_options: { include_usage: true, extra: 1 } }, status: 400, param: 'stream_options.extra' },
  { name: 'extra_body a string', body: { extra_body: 'top_k=5' }, status: 400, param: 'extra_body' },
  { name: 'extra_body with an unknown key', body: { extra_body: { use_beam_search: true } }, status: 400, param: 'extra_body.use_beam_search', code: 'unknown_parameter' },
  { name: 'extra_body with a bad value', body: { extra_body: { top_k: 'many' } }, status: 400, param: 'extra_body.top_k', code: 'invalid_type' },
  { name: 'top_k below -1', body: { top_k: -2 }, status: 400, param: 'top_k' },
  { name: 'min_p above 1', body: { min_p: 1.5 }, status: 400, param: 'min_p' },
  { name: 'repetition_penalty 0', body: { repetition_penalty: 0 }, status: 400, param: 'repetition_penalty' },
  { name: 'ignore_eos a number', body: { ignore_eos: 1 }, status: 400, param: 'ignore_eos' },
  { name: 'min_tokens negative', body: { min_tokens: -1 }, status: 400, param: 'min_tokens' },
  { name: 'min_tokens above max_tokens', body: { min_tokens: 5, max_tokens: 4 }, status: 400, param: 'min_tokens' },
  { name: 'stop_token_ids not an array', body: { stop_token_ids: 2 }, status: 400, param: 'stop_token_ids' },
  { name: 'stop_token_ids outside the vocabulary', body: (p) => ({ stop_token_ids: [p.tokenizer.vocabSize] }), status: 400, param: 'stop_token_ids' },
  { name: 'skip_special_tokens a string', body: { skip_special_tokens: 'no' }, status: 400, param: 'skip_special_tokens' },
  { name: 'include_stop_str_in_output a number', body: { include_stop_str_in_output: 1 }, status: 400, param: 'include_stop_str_in_output' },
];

function errorCase(c: ErrorCase): ConformanceCase {
  return {
    group: 'validation',
    name: `${c.name} → ${c.status}${c.param ? ` naming '${c.param}'` : ''}`,
    async run(api) {
      const given = typeof c.body === 'function' ? c.body(api.profile) : c.body;
      const body = typeof given === 'string' || c.alone ? given : api.body(given);
      const error = await api.error(body, c.status, c.param, c.code);
      if (c.message) match(error.message, c.message, 'error message');
    },
  };
}

// ---- the procedural cases ---------------------------------------------------------------------------

const CASES: ConformanceCase[] = [];
function add(group: string, name: string, run: (api: Api) => Promise<void>, needs?: Capability[]): void {
  CASES.push({ group, name, run, ...(needs ? { needs } : {}) });
}

// models

add('models', 'GET /models lists the model in the OpenAI shape', async (api) => {
  const r = await api.raw('/models');
  eq(r.status, 200, 'status');
  const body = await r.json();
  keys(body, ['data', 'object'], 'list');
  eq(body.object, 'list', 'object');
  const model = body.data.find((m: Json) => m.id === api.profile.model);
  ok(model, `the list names ${api.profile.model}: ${JSON.stringify(body.data)}`);
  keys(model, ['created', 'id', 'max_model_len', 'object', 'owned_by'], 'model');
  ok(Number.isInteger(model.max_model_len) && model.max_model_len > 0, 'max_model_len is a positive integer');
  eq(model.object, 'model', 'model.object');
  ok(Number.isInteger(model.created), 'model.created is an integer');
  ok(typeof model.owned_by === 'string', 'owned_by is a string');
});

add('models', 'GET /models/{id} retrieves it; another id is 404 model_not_found', async (api) => {
  const r = await api.raw(`/models/${encodeURIComponent(api.profile.model)}`);
  eq(r.status, 200, 'status');
  eq((await r.json()).id, api.profile.model, 'id');
  await checkError(await api.raw('/models/no-such-model'), 404, null, 'model_not_found', 'GET /models/no-such-model');
});

add('models', 'an alias answers, and the response names the model id', async (api) => {
  if (!api.profile.alias) return;
  const body = await api.complete({ model: api.profile.alias, max_tokens: 1, ...greedy });
  eq(body.model, api.profile.model, 'model');
});

// shapes and usage

add('shapes', 'a completion: OpenAI shape, usage arithmetic', async (api) => {
  const body = await api.complete({ max_tokens: 5, ...greedy });
  checkResponseShape(api, body, 'completion');
  eq(body.choices.length, 1, 'one choice');
  eq(body.choices[0].index, 0, 'index');
  eq(body.choices[0].logprobs, null, 'no logprobs unless asked');
  eq(body.service_tier, 'default', 'service_tier');
  eq(body.usage.prompt_tokens, promptIds(api).length, 'prompt_tokens');
  ok(body.usage.completion_tokens <= 5, 'completion_tokens <= max_tokens');
  if (body.choices[0].finish_reason === 'length') eq(body.usage.completion_tokens, 5, 'length means max_tokens tokens');
});

add('shapes', 'a stream: chunks with one id and created, finish_reason on the last, then [DONE]', async (api) => {
  const events = await api.stream({ max_tokens: 6, ...greedy });
  eq(events.at(-1), '[DONE]', 'ends with [DONE]');
  const chunks = events.slice(0, -1);
  ok(chunks.length >= 1, 'at least one chunk');
  for (const [i, chunk] of chunks.entries()) {
    keys(chunk, ['choices', 'created', 'id', 'model', 'object', 'service_tier'], `chunk ${i}`);
    eq(chunk.id, chunks[0].id, 'the same id');
    eq(chunk.created, chunks[0].created, 'the same created');
    eq(chunk.object, 'text_completion', 'object');
    eq(chunk.model, api.profile.model, 'model');
    eq(chunk.service_tier, 'default', 'service_tier');
    eq(chunk.choices.length, 1, 'one choice per chunk');
    keys(chunk.choices[0], CHOICE_KEYS, `chunk ${i} choice`);
    if (i < chunks.length - 1) eq(chunk.choices[0].finish_reason, null, `finish_reason of chunk ${i}`);
  }
  ok(['stop', 'length'].includes(chunks.at(-1).choices[0].finish_reason), 'the last chunk has the finish_reason');
});

add('shapes', 'stream_options.include_usage: one more chunk with choices [] and the usage', async (api) => {
  const whole = await api.complete({ max_tokens: 6, ...greedy });
  const events = await api.stream({ max_tokens: 6, ...greedy, stream_options: { include_usage: true } });
  eq(events.at(-1), '[DONE]', 'ends with [DONE]');
  const last = events.at(-2);
  eq(last.choices, [], 'the usage chunk has no choices');
  eq(last.usage, whole.usage, 'the usage of the one-body answer');
  for (const chunk of events.slice(0, -2)) eq(chunk.usage, null, 'the other chunks have usage null');
  const plain = await api.stream({ max_tokens: 2, ...greedy, stream_options: { include_usage: false } });
  for (const chunk of plain.slice(0, -1)) ok(!('usage' in chunk), 'no usage field without include_usage');
});

add('shapes', "service_tier: 'auto' answers 'default'; the others are echoed (chunks too)", async (api) => {
  eq((await api.complete({ max_tokens: 1, service_tier: 'auto' })).service_tier, 'default', 'auto');
  for (const tier of ['default', 'flex', 'no-limit']) eq((await api.complete({ max_tokens: 1, service_tier: tier })).service_tier, tier, tier);
  const events = await api.stream({ max_tokens: 2, service_tier: 'flex' });
  for (const chunk of events.slice(0, -1)) eq(chunk.service_tier, 'flex', 'chunk service_tier');
});

add('shapes', 'null for every optional parameter means its default', async (api) => {
  const nulls = {
    suffix: null, temperature: null, top_p: null, n: null, best_of: null, stream: null, stream_options: null, logprobs: null,
    echo: null, stop: null, presence_penalty: null, frequency_penalty: null, logit_bias: null, user: null,
    service_tier: null, extra_body: null, top_k: null, min_p: null, repetition_penalty: null, ignore_eos: null, min_tokens: null,
    stop_token_ids: null, skip_special_tokens: null, include_stop_str_in_output: null,
  };
  const a = await api.complete({ ...nulls, seed: 99, max_tokens: 8 });
  const b = await api.complete({ seed: 99, max_tokens: 8 });
  eq(text0(a), text0(b), 'text');
  eq(a.usage, b.usage, 'usage');
  eq(a.service_tier, 'default', 'service_tier');
});

add('shapes', 'user, an empty suffix and the ai_project_id query are accepted and change nothing', async (api) => {
  const plain = await api.complete({ max_tokens: 6, ...greedy });
  const withUser = await api.complete({ max_tokens: 6, ...greedy, user: 'user-1234', suffix: '' });
  eq(text0(withUser), text0(plain), 'text with user and suffix ""');
  const r = await api.post(api.body({ max_tokens: 6, ...greedy }), { path: '/completions?ai_project_id=proj_123' });
  eq(r.status, 200, 'status with ai_project_id');
  eq(text0(await r.json()), text0(plain), 'text with ai_project_id');
});

add('shapes', 'extra_body keys act as top-level parameters (vLLM extensions at either level)', async (api) => {
  const reference = await api.complete({ max_tokens: 8, ...greedy });
  const viaExtra = await api.complete({ max_tokens: 8, temperature: 1, seed: 5, extra_body: { top_k: 1 } });
  const topLevel = await api.complete({ max_tokens: 8, temperature: 1, seed: 5, top_k: 1 });
  eq(text0(viaExtra), text0(reference), 'extra_body.top_k 1 is greedy');
  eq(text0(topLevel), text0(reference), 'top-level top_k 1 is greedy');
  const both = await api.complete({ max_tokens: 8, extra_body: { temperature: 0, max_tokens: 8 } });
  eq(text0(both), text0(reference), 'standard parameters inside extra_body');
});

// max_tokens and finish reasons

add('max_tokens', 'max_tokens defaults to 16', async (api) => {
  const body = await api.complete({ ...greedy, ignore_eos: true });
  eq(body.usage.completion_tokens, 16, 'completion_tokens');
  eq(body.choices[0].finish_reason, 'length', 'finish_reason');
});

add('max_tokens', 'max_tokens 0 generates nothing', async (api) => {
  const body = await api.complete({ max_tokens: 0 });
  eq(body.choices[0].text, '', 'text');
  eq(body.choices[0].finish_reason, 'length', 'finish_reason');
  eq(
    body.usage,
    { prompt_tokens: promptIds(api).length, completion_tokens: 0, total_tokens: promptIds(api).length, prompt_tokens_details: { cached_tokens: 0 } },
    'usage',
  );
});

add('max_tokens', 'max_tokens null runs until the context is full', async (api) => {
  const body = await api.complete({ max_tokens: null, ...greedy, ignore_eos: true });
  eq(body.usage.completion_tokens, room(api), 'completion_tokens = context - prompt');
  eq(body.usage.total_tokens, api.profile.contextLength, 'total_tokens = context');
  eq(body.choices[0].finish_reason, 'length', 'finish_reason');
});

add('max_tokens', 'prompt + max_tokens beyond the context: context_length_exceeded naming both numbers', async (api) => {
  const n = promptIds(api).length;
  const error = await api.error(api.body({ max_tokens: room(api) + 1 }), 400, 'max_tokens', 'context_length_exceeded');
  ok(error.message.includes(String(api.profile.contextLength)), `the message names the context length: ${error.message}`);
  ok(error.message.includes(String(n)), `the message names the prompt length: ${error.message}`);
  ok(error.message.includes(String(room(api) + 1)), `the message names max_tokens: ${error.message}`);
  await api.complete({ max_tokens: room(api), temperature: 0, stop_token_ids: [], ignore_eos: false, logit_bias: eosBias(api, 100) });
});

function eosBias(api: Api, bias: number): Record<string, number> {
  return Object.fromEntries(api.profile.tokenizer.eosIds.map((id) => [String(id), bias]));
}

add('max_tokens', "EOS ends a choice with 'stop' (not counted); the limit with 'length'", async (api) => {
  const eos = await api.complete({ max_tokens: 5, logit_bias: eosBias(api, 100) });
  eq(eos.choices[0].finish_reason, 'stop', 'finish_reason at EOS');
  eq(eos.choices[0].text, '', 'text');
  eq(eos.usage.completion_tokens, 0, 'EOS is not a completion token');
  const limit = await api.complete({ max_tokens: 3, ignore_eos: true, ...greedy });
  eq(limit.choices[0].finish_reason, 'length', 'finish_reason at the limit');
  eq(limit.usage.completion_tokens, 3, 'completion_tokens');
});

// sampling: determinism and filters

function sameChoice(a: Json, b: Json, what: string): void {
  eq(a.text, b.text, `${what}: text`);
  eq(a.finish_reason, b.finish_reason, `${what}: finish_reason`);
}

/** The one-body answer and the stream agree: text, finish_reason, logprobs (the stream's concatenated), usage. */
async function streamMatches(api: Api, body: Record<string, unknown>, what: string): Promise<void> {
  const whole = await api.complete(body);
  const events = await api.stream({ ...body, stream_options: { include_usage: true } });
  const streamed = streamedChoices(events);
  eq([...streamed.keys()].sort((a, b) => a - b), whole.choices.map((c: Json) => c.index), `${what}: choice indexes`);
  for (const choice of whole.choices) {
    const s = streamed.get(choice.index)!;
    eq(s.text, choice.text, `${what}: streamed text of choice ${choice.index}`);
    eq(s.finishes.at(-1), choice.finish_reason, `${what}: finish_reason of choice ${choice.index}`);
    ok(s.finishes.slice(0, -1).every((f) => f === null), `${what}: only the last chunk of choice ${choice.index} finishes`);
    if (choice.logprobs) eq(s.logprobs, choice.logprobs, `${what}: streamed logprobs of choice ${choice.index}`);
  }
  eq(events.at(-2).usage, whole.usage, `${what}: usage`);
}

add('sampling', 'greedy: the same every time, streamed or not (text, finish_reason, logprobs)', async (api) => {
  const a = await api.complete({ max_tokens: 12, ...greedy, logprobs: 2 });
  const b = await api.complete({ max_tokens: 12, ...greedy, logprobs: 2 });
  sameChoice(a.choices[0], b.choices[0], 'greedy twice');
  await streamMatches(api, { max_tokens: 12, ...greedy, logprobs: 2 }, 'greedy');
});

add('sampling', 'a seed: the same text every time, streamed or not', async (api) => {
  const body = { max_tokens: 12, temperature: 1, seed: 1234 };
  const a = await api.complete(body);
  const b = await api.complete(body);
  sameChoice(a.choices[0], b.choices[0], 'seed twice');
  await streamMatches(api, { ...body, logprobs: 1 }, 'seeded');
});

add('sampling', 'different seeds give different texts; without a seed, outputs vary', async (api) => {
  const seeded = await Promise.all([1, 2, 3, 4].map((seed) => api.complete({ max_tokens: 16, temperature: 1.5, seed })));
  ok(new Set(seeded.map(text0)).size > 1, `4 seeds gave one text: ${JSON.stringify(text0(seeded[0]))}`);
  const unseeded = await Promise.all([1, 2, 3, 4].map(() => api.complete({ max_tokens: 16, temperature: 1.5 })));
  ok(new Set(unseeded.map(text0)).size > 1, `4 unseeded requests gave one text: ${JSON.stringify(text0(unseeded[0]))}`);
});

add('sampling', 'top_k 1, top_p 0 (as OpenAI accepts it), a tiny top_p and min_p 1 are greedy', async (api) => {
  const reference = text0(await api.complete({ max_tokens: 10, ...greedy }));
  for (const filter of [{ top_k: 1 }, { top_p: 0 }, { top_p: 1e-9 }, { min_p: 1 }]) {
    eq(text0(await api.complete({ max_tokens: 10, temperature: 1.5, seed: 77, ...filter })), reference, JSON.stringify(filter));
  }
});

add('sampling', 'top_k: every sampled token is among the k most likely', async (api) => {
  const k = 3;
  const body = await api.complete({ max_tokens: 16, temperature: 2, seed: 5, top_k: k, logprobs: k });
  const lp = body.choices[0].logprobs;
  lp.top_logprobs.forEach((top: Record<string, number>, i: number) => {
    // The k alternatives, and the sampled token among them: no extra entry.
    ok(Object.keys(top).length <= k, `step ${i}: the sampled ${JSON.stringify(lp.tokens[i])} is outside the top ${k}: ${JSON.stringify(top)}`);
  });
});

add('sampling', 'top_p: every sampled token lies in the nucleus', async (api) => {
  const p = 0.5;
  const body = await api.complete({ max_tokens: 16, temperature: 1, seed: 9, top_p: p, logprobs: 20 });
  const lp = body.choices[0].logprobs;
  lp.tokens.forEach((token: string, i: number) => {
    const sampled = lp.token_logprobs[i];
    const before = ranked(lp.top_logprobs[i]).filter(([key, v]) => key !== token && v > sampled);
    const mass = before.reduce((s, [, v]) => s + Math.exp(v), 0);
    ok(mass < p + 1e-4, `step ${i}: ${mass} of the mass comes before the sampled token (top_p ${p})`);
  });
});

add('sampling', 'min_p: every sampled token has at least min_p x the top probability', async (api) => {
  const minP = 0.3;
  const body = await api.complete({ max_tokens: 16, temperature: 1, seed: 21, min_p: minP, logprobs: 1 });
  const lp = body.choices[0].logprobs;
  lp.tokens.forEach((_token: string, i: number) => {
    const best = Math.max(...Object.values(lp.top_logprobs[i] as Record<string, number>));
    ok(lp.token_logprobs[i] >= best + Math.log(minP) - 1e-4, `step ${i}: logprob ${lp.token_logprobs[i]} is below min_p x the top (${best})`);
  });
});

add('sampling', 'logprobs are of the raw logits: temperature, top_k and penalties do not change them', async (api) => {
  const a = (await api.complete({ max_tokens: 1, ...greedy, logprobs: 5 })).choices[0].logprobs;
  const b = (await api.complete({ max_tokens: 1, temperature: 1.7, seed: 3, top_k: 7, presence_penalty: 1, logprobs: 5 })).choices[0].logprobs;
  const topA = ranked(a.top_logprobs[0]).slice(0, 5);
  const topB = ranked(b.top_logprobs[0]).slice(0, 5);
  eq(topB.map(([k]) => k), topA.map(([k]) => k), 'the 5 most likely tokens');
  topA.forEach(([k, v], i) => close(topB[i]![1], v, api.profile.logprobTolerance, `logprob of ${JSON.stringify(k)}`));
  // Greedy picks the most likely: its logprob is the top one.
  close(a.token_logprobs[0], topA[0]![1], api.profile.logprobTolerance, 'greedy picks the argmax');
});

// n, best_of, batches

add('n', 'n choices: indexes 0..n-1, each with its own finish_reason and seeded stream (seed, j)', async (api) => {
  const body = { max_tokens: 10, temperature: 1.2, seed: 11 };
  const three = await api.complete({ ...body, n: 3 });
  checkResponseShape(api, three, 'n=3');
  eq(three.choices.map((c: Json) => c.index), [0, 1, 2], 'indexes');
  ok(new Set(three.choices.map((c: Json) => c.text)).size > 1, 'the choices differ from each other');
  const one = await api.complete({ ...body, n: 1 });
  sameChoice(one.choices[0], three.choices[0], 'choice 0 of n=3 = the n=1 answer');
  const two = await api.complete({ ...body, n: 2 });
  sameChoice(two.choices[1], three.choices[1], 'choice 1 of n=3 = choice 1 of n=2');
  eq(three.usage.prompt_tokens, promptIds(api).length, 'the prompt counts once');
  const perChoice = await api.complete({ ...body, n: 3, logprobs: 0 });
  eq(
    perChoice.usage.completion_tokens,
    perChoice.choices.reduce((s: number, c: Json) => s + c.logprobs.tokens.length, 0),
    'completion_tokens = the tokens of all choices',
  );
});

add('n', 'n with stream: chunks name their choice; each choice ends with its own finish_reason', async (api) => {
  await streamMatches(api, { max_tokens: 8, temperature: 1, seed: 4, n: 3, logprobs: 1 }, 'n=3 stream');
  await streamMatches(api, { max_tokens: 8, temperature: 1, seed: 4, n: 2, best_of: 2 }, 'best_of = n streams');
});

add('n', 'a batch of prompts: n per prompt, index = position x n + j, usage over all', async (api) => {
  const { prompt, otherPrompt } = api.profile;
  const body = { max_tokens: 6, temperature: 1, seed: 8, n: 2 };
  const batch = await api.complete({ ...body, prompt: [prompt, otherPrompt] });
  eq(batch.choices.map((c: Json) => c.index), [0, 1, 2, 3], 'indexes');
  const first = await api.complete({ ...body, prompt });
  const second = await api.complete({ ...body, prompt: otherPrompt });
  sameChoice(batch.choices[0], first.choices[0], 'prompt 0, choice 0');
  sameChoice(batch.choices[1], first.choices[1], 'prompt 0, choice 1');
  sameChoice(batch.choices[2], second.choices[0], 'prompt 1, choice 0');
  sameChoice(batch.choices[3], second.choices[1], 'prompt 1, choice 1');
  eq(batch.usage.prompt_tokens, first.usage.prompt_tokens + second.usage.prompt_tokens, 'prompt_tokens');
  eq(batch.usage.completion_tokens, first.usage.completion_tokens + second.usage.completion_tokens, 'completion_tokens');
  await streamMatches(api, { ...body, prompt: [prompt, otherPrompt] }, 'batch stream');
});

add('n', 'token-id prompts: the same as the text they encode; batches of id arrays', async (api) => {
  const ids = promptIds(api);
  const other = promptIds(api, api.profile.otherPrompt);
  const text = await api.complete({ max_tokens: 8, ...greedy });
  const tokens = await api.complete({ max_tokens: 8, ...greedy, prompt: ids });
  eq(text0(tokens), text0(text), 'text');
  eq(tokens.usage, text.usage, 'usage');
  const batch = await api.complete({ max_tokens: 8, ...greedy, prompt: [ids, other] });
  eq(text0(batch), text0(text), 'batch prompt 0');
  eq(batch.choices[1].text, text0(await api.complete({ max_tokens: 8, ...greedy, prompt: api.profile.otherPrompt })), 'batch prompt 1');
  eq(batch.usage.prompt_tokens, ids.length + other.length, 'prompt_tokens');
});

add('n', 'best_of: the n candidates with the highest mean token logprob, best first', async (api) => {
  const body = { max_tokens: 8, temperature: 1.3, seed: 31, logprobs: 0 };
  const all = await api.complete({ ...body, n: 4 });
  const mean = (c: Json) => {
    const lps = c.logprobs.token_logprobs as number[];
    return lps.length ? lps.reduce((a, b) => a + b, 0) / lps.length : -Infinity;
  };
  const order = all.choices.map((c: Json, j: number) => ({ j, m: mean(c), c })).sort((a: Json, b: Json) => b.m - a.m || a.j - b.j);
  const best = await api.complete({ ...body, n: 2, best_of: 4 });
  eq(best.choices.map((c: Json) => c.index), [0, 1], 'indexes');
  sameChoice(best.choices[0], order[0].c, 'the best candidate first');
  sameChoice(best.choices[1], order[1].c, 'the second best next');
  eq(best.choices[0].logprobs, order[0].c.logprobs, 'its logprobs');
  ok(mean(best.choices[0]) >= mean(best.choices[1]), 'best first');
  eq(best.usage.completion_tokens, all.usage.completion_tokens, 'usage counts every candidate generated');
  const noLogprobs = await api.complete({ ...body, logprobs: null, n: 1, best_of: 4 });
  eq(noLogprobs.choices[0].text, order[0].c.text, 'best_of without logprobs picks the same');
  eq(noLogprobs.choices[0].logprobs, null, 'and returns no logprobs');
});

// logprobs

add('logprobs', 'logprobs k: the legacy shape, the sampled token always included, offsets consistent', async (api) => {
  const k = 3;
  const body = await api.complete({ max_tokens: 12, temperature: 1, seed: 2, logprobs: k });
  checkResponseShape(api, body, 'logprobs');
  const choice = body.choices[0];
  const lp = choice.logprobs;
  eq(lp.tokens.length, body.usage.completion_tokens, 'one entry per completion token');
  lp.tokens.forEach((token: string, i: number) => {
    const top = lp.top_logprobs[i];
    ok(Object.keys(top).length >= 1 && Object.keys(top).length <= k + 1, `step ${i}: ${Object.keys(top).length} entries`);
    ok(token in top, `step ${i}: the sampled ${JSON.stringify(token)} is in top_logprobs ${JSON.stringify(top)}`);
    close(top[token], lp.token_logprobs[i], 0, `step ${i}: its value is its logprob`);
  });
  checkOffsets(choice.text, lp, 'logprobs');
});

add('logprobs', 'logprobs 0: the sampled token alone', async (api) => {
  const body = await api.complete({ max_tokens: 8, temperature: 1, seed: 3, logprobs: 0 });
  const lp = body.choices[0].logprobs;
  ok(lp.tokens.length > 0, 'tokens');
  lp.tokens.forEach((token: string, i: number) => eq(lp.top_logprobs[i], { [token]: lp.token_logprobs[i] }, `step ${i}`));
  checkOffsets(body.choices[0].text, lp, 'logprobs 0');
});

add('logprobs', 'logprobs 20 (vLLM’s limit) works; greedy picks the most likely', async (api) => {
  const body = await api.complete({ max_tokens: 4, ...greedy, logprobs: 20 });
  const lp = body.choices[0].logprobs;
  lp.top_logprobs.forEach((top: Record<string, number>, i: number) => {
    ok(Object.keys(top).length >= Math.min(15, api.profile.tokenizer.vocabSize - 1) && Object.keys(top).length <= 20, `step ${i}: ${Object.keys(top).length} entries`);
    close(lp.token_logprobs[i], ranked(top)[0]![1], 0, `step ${i}: greedy's token is the most likely`);
  });
});

// echo

add('echo', 'echo: the prompt comes first in text', async (api) => {
  const plain = await api.complete({ max_tokens: 6, ...greedy });
  const echoed = await api.complete({ max_tokens: 6, ...greedy, echo: true });
  eq(text0(echoed), api.profile.prompt + text0(plain), 'text');
  eq(echoed.usage, plain.usage, 'usage: the echo is not completion');
  const ids = await api.complete({ max_tokens: 6, ...greedy, echo: true, prompt: promptIds(api) });
  eq(text0(ids), api.profile.tokenizer.decode(promptIds(api), { skipSpecialTokens: true }) + text0(plain), 'a token-id prompt echoes its text');
});

add('echo', 'echo + logprobs + max_tokens 0 scores the prompt', async (api) => {
  const ids = promptIds(api);
  const body = await api.complete({ max_tokens: 0, echo: true, logprobs: 2 });
  const choice = body.choices[0];
  eq(choice.text, api.profile.prompt, 'text is the prompt');
  eq(choice.finish_reason, 'length', 'finish_reason');
  eq(body.usage.completion_tokens, 0, 'completion_tokens');
  const lp = choice.logprobs;
  checkLogprobsShape(lp, 'prompt logprobs');
  eq(lp.tokens.length, ids.length, 'one entry per prompt token');
  eq(lp.token_logprobs[0], null, 'the first token has no logprob');
  eq(lp.top_logprobs[0], null, 'nor alternatives');
  for (let i = 1; i < ids.length; i++) {
    ok(typeof lp.token_logprobs[i] === 'number', `prompt token ${i} has a logprob`);
    const top = lp.top_logprobs[i];
    ok(lp.tokens[i] in top && Object.keys(top).length <= 3, `prompt token ${i}: itself and up to 2 alternatives: ${JSON.stringify(top)}`);
  }
  checkOffsets(choice.text, lp, 'prompt logprobs');
  // Streamed, the same.
  await streamMatches(api, { max_tokens: 0, echo: true, logprobs: 2 }, 'scoring, streamed');
});

add('echo', 'echo + logprobs with a completion: offsets run across prompt and completion', async (api) => {
  const ids = promptIds(api);
  const body = await api.complete({ max_tokens: 8, ...greedy, echo: true, logprobs: 1 });
  const lp = body.choices[0].logprobs;
  eq(lp.tokens.length, ids.length + body.usage.completion_tokens, 'prompt and completion tokens');
  checkOffsets(body.choices[0].text, lp, 'echo + completion');
  const plain = await api.complete({ max_tokens: 8, ...greedy, logprobs: 1 });
  eq(lp.tokens.slice(ids.length), plain.choices[0].logprobs.tokens, 'the completion tokens');
  // With echo the prompt is scored too, which may run another kernel: equal up to rounding.
  (plain.choices[0].logprobs.token_logprobs as number[]).forEach((v, i) =>
    close(lp.token_logprobs[ids.length + i], v, api.profile.logprobTolerance, `completion logprob ${i}`),
  );
  await streamMatches(api, { max_tokens: 8, ...greedy, echo: true, logprobs: 1, n: 2 }, 'echo stream, n=2');
});

add('echo', "the prompt's logprobs equal those the generation reported for the same tokens", async (api) => {
  const ids = promptIds(api);
  const generated = (await api.complete({ max_tokens: 8, ...greedy, logprobs: 0 })).choices[0].logprobs;
  const continuation: number[] = [];
  for (const [i, token] of (generated.tokens as string[]).entries()) {
    continuation.push(await api.tokenId([...ids, ...continuation], token, generated.token_logprobs[i]));
  }
  const scored = (await api.complete({ prompt: [...ids, ...continuation], max_tokens: 0, echo: true, logprobs: 0 })).choices[0].logprobs;
  eq(scored.tokens.slice(ids.length), generated.tokens, 'the same tokens');
  scored.token_logprobs.slice(ids.length).forEach((v: number, i: number) =>
    close(v, generated.token_logprobs[i], api.profile.logprobTolerance, `token ${i} scored vs generated`),
  );
});

// stop strings and stop tokens

/** A greedy text with logprobs, and a stop string spanning the boundary of two tokens in it. */
async function splitStop(api: Api): Promise<{ text: string; stop: string; at: number }> {
  const body = await api.complete({ max_tokens: 16, ...greedy, ignore_eos: true, logprobs: 0 });
  const text: string = text0(body);
  const lp = body.choices[0].logprobs;
  for (let i = 1; i + 1 < lp.tokens.length; i++) {
    const left: string = lp.tokens[i];
    const right: string = lp.tokens[i + 1];
    if (left.length < 2 || right.length < 2) continue;
    const stop = left.slice(-2) + right.slice(0, 2);
    const at = text.indexOf(stop);
    if (at === lp.text_offset[i + 1] - 2) return { text, stop, at };
  }
  return fail(`no two neighbouring tokens to split a stop string over in ${JSON.stringify(text)}`);
}

add('stop', 'a stop string split across tokens ends the text before it; streamed, none of it leaks', async (api) => {
  const { text, stop, at } = await splitStop(api);
  const body = { max_tokens: 16, ...greedy, ignore_eos: true, stop };
  const cut = await api.complete(body);
  eq(text0(cut), text.slice(0, at), `text before ${JSON.stringify(stop)}`);
  eq(cut.choices[0].finish_reason, 'stop', 'finish_reason');
  const events = await api.stream(body);
  let sent = '';
  for (const chunk of chunksOf(events)) {
    sent += chunk.choices[0].text;
    ok(text.slice(0, at).startsWith(sent), `a chunk leaked past the stop: ${JSON.stringify(sent)}`);
  }
  eq(sent, text.slice(0, at), 'the streamed text');
  await streamMatches(api, { ...body, logprobs: 1 }, 'stop');
});

add('stop', 'include_stop_str_in_output keeps the stop string', async (api) => {
  const { text, stop, at } = await splitStop(api);
  const body = { max_tokens: 16, ...greedy, ignore_eos: true, stop, include_stop_str_in_output: true };
  eq(text0(await api.complete(body)), text.slice(0, at + stop.length), 'text through the stop string');
  await streamMatches(api, body, 'include_stop_str_in_output');
  eq(text0(await api.complete({ ...body, extra_body: { include_stop_str_in_output: false }, include_stop_str_in_output: undefined })), text.slice(0, at), 'through extra_body, false');
});

add('stop', 'the earliest of several stop strings wins; stop strings not in the text change nothing', async (api) => {
  const { text, stop, at } = await splitStop(api);
  const body = { max_tokens: 16, ...greedy, ignore_eos: true };
  const later = text.slice(at + stop.length, at + stop.length + 3);
  const stops = ['\u0000never', stop, ...(later.length === 3 ? [later] : [])];
  eq(text0(await api.complete({ ...body, stop: stops })), text.slice(0, at), 'the earliest');
  eq(text0(await api.complete({ ...body, stop: ['\u0000never', '\u0001nor'] })), text, 'no stop string in the text');
});

add('stop', 'logprobs cover every generated token, also those of a stop string cut from the text', async (api) => {
  const { stop } = await splitStop(api);
  const body = await api.complete({ max_tokens: 16, ...greedy, ignore_eos: true, stop, logprobs: 0 });
  const lp = body.choices[0].logprobs;
  eq(lp.tokens.length, body.usage.completion_tokens, 'entries = completion_tokens');
  checkOffsets(text0(body), lp, 'stop', { cut: true });
});

add('stop', "stop_token_ids end a choice with 'stop'; min_tokens holds EOS and stop ids back", async (api) => {
  const first = (await api.complete({ max_tokens: 1, ...greedy, logprobs: 2 })).choices[0].logprobs;
  const token: string = first.tokens[0];
  const id = await api.tokenId(promptIds(api), token, first.token_logprobs[0]);
  const stopped = await api.complete({ max_tokens: 5, ...greedy, stop_token_ids: [id] });
  eq(stopped.choices[0].finish_reason, 'stop', 'finish_reason');
  eq(stopped.choices[0].text, '', 'text');
  eq(stopped.usage.completion_tokens, 0, 'the stop token is not counted');
  // min_tokens 1: the stop id cannot come first, so the runner-up does.
  const runnerUp = ranked(first.top_logprobs[0]).find(([k]) => k !== token)![0];
  const held = await api.complete({ max_tokens: 1, ...greedy, stop_token_ids: [id], min_tokens: 1, logprobs: 0 });
  eq(held.choices[0].logprobs.tokens[0], runnerUp, 'the runner-up comes first');
  // EOS forced, but held back for 3 tokens.
  const eos = await api.complete({ max_tokens: 10, logit_bias: eosBias(api, 100), min_tokens: 3 });
  eq(eos.usage.completion_tokens, 3, 'three tokens, then EOS');
  eq(eos.choices[0].finish_reason, 'stop', 'finish_reason');
});

add('stop', 'ignore_eos generates through EOS; skip_special_tokens false shows it', async (api) => {
  const { tokenizer } = api.profile;
  const eosText = tokenizer.decode([tokenizer.eosIds[0]!], { skipSpecialTokens: false });
  const body = { max_tokens: 3, logit_bias: eosBias(api, 100), ignore_eos: true };
  const skipped = await api.complete(body);
  eq(skipped.choices[0].finish_reason, 'length', 'finish_reason');
  eq(skipped.usage.completion_tokens, 3, 'completion_tokens');
  eq(skipped.choices[0].text, '', 'EOS has no text by default');
  const shown = await api.complete({ ...body, skip_special_tokens: false, logprobs: 0 });
  ok(eosText.length > 0, 'EOS has a text');
  eq(shown.choices[0].text, eosText.repeat(3), 'EOS text with skip_special_tokens false');
  checkOffsets(shown.choices[0].text, shown.choices[0].logprobs, 'special tokens');
});

// penalties and logit_bias, checked numerically against the raw logprobs the server reports

/** Step 1 of greedy decoding: the top tokens (text, id, raw logprob), most likely first. */
async function firstStep(api: Api, k = 5): Promise<{ text: string; id: number; logprob: number }[]> {
  const lp = (await api.complete({ max_tokens: 1, ...greedy, logprobs: k })).choices[0].logprobs;
  const ids = promptIds(api);
  const out: { text: string; id: number; logprob: number }[] = [];
  for (const [text, logprob] of ranked(lp.top_logprobs[0])) {
    if (text.length === 0 || text.includes('\uFFFD')) continue;
    out.push({ text, id: await api.tokenId(ids, text, logprob), logprob });
  }
  return out;
}

add('bias', 'logit_bias -100 bans the greedy token: the runner-up comes, with its raw logprob', async (api) => {
  const [top, second] = await firstStep(api);
  const body = await api.complete({ max_tokens: 1, ...greedy, logprobs: 1, logit_bias: { [top!.id]: -100 } });
  const lp = body.choices[0].logprobs;
  eq(lp.tokens[0], second!.text, 'the runner-up');
  close(lp.token_logprobs[0], second!.logprob, api.profile.logprobTolerance, 'its logprob is the raw one');
});

add('bias', 'logit_bias +100 forces a token at every step; its logprob stays the raw one', async (api) => {
  const step = await firstStep(api);
  const forced = step[Math.min(3, step.length - 1)]!;
  const body = await api.complete({ max_tokens: 3, temperature: 1, seed: 1, logprobs: 0, logit_bias: { [forced.id]: 100 } });
  const lp = body.choices[0].logprobs;
  eq(lp.tokens, [forced.text, forced.text, forced.text], 'the forced token, three times');
  close(lp.token_logprobs[0], forced.logprob, api.profile.logprobTolerance, 'the raw logprob, not ~0');
});

add('bias', 'logit_bias is added to the logit: the margin ± 0.05 decides', async (api) => {
  const [top, second] = await firstStep(api);
  const margin = top!.logprob - second!.logprob;
  const pick = async (bias: number) =>
    (await api.complete({ max_tokens: 1, ...greedy, logprobs: 0, logit_bias: { [second!.id]: bias } })).choices[0].logprobs.tokens[0];
  eq(await pick(margin + 0.05), second!.text, `bias margin + 0.05 (${margin + 0.05}) lifts the runner-up over the top`);
  eq(await pick(margin - 0.05), top!.text, `bias margin - 0.05 (${margin - 0.05}) does not`);
});

add('penalties', 'presence and frequency penalties subtract from generated tokens’ logits, exactly', async (api) => {
  const ids = promptIds(api);
  const [first, runnerUp] = await firstStep(api, 2);
  const t = first!;
  // Step 2 after [T]: the best other token O and T's own raw logprob there.
  const step2 = (await api.complete({ prompt: [...ids, t.id], max_tokens: 1, ...greedy, logprobs: 5 })).choices[0].logprobs;
  const [oText, oLogprob] = ranked(step2.top_logprobs[0]).find(([text]) => text !== t.text)!;
  const scored = (await api.complete({ prompt: [...ids, t.id, t.id], max_tokens: 0, echo: true, logprobs: 0 })).choices[0].logprobs;
  const tLogprob2: number = scored.token_logprobs.at(-1);
  // A bias that makes T win step 2 by exactly 1 (without penalties); step 1 must stay T.
  const bias = oLogprob - tLogprob2 + 1;
  ok(bias <= 100 && bias > -(t.logprob - runnerUp!.logprob), `no bias fits this model here (bias ${bias})`);
  const run = async (penalties: Record<string, number>) =>
    (await api.complete({ max_tokens: 2, ...greedy, logprobs: 0, logit_bias: { [t.id]: bias }, ...penalties })).choices[0].logprobs;
  const base = await run({});
  eq(base.tokens, [t.text, t.text], 'without penalties T repeats');
  close(base.token_logprobs[1], tLogprob2, api.profile.logprobTolerance, 'the repeat reports its raw logprob');
  for (const [penalties, repeats] of [
    [{ presence_penalty: 2 }, false],
    [{ presence_penalty: 1.1 }, false],
    [{ presence_penalty: 0.9 }, true],
    [{ frequency_penalty: 1.1 }, false],
    [{ frequency_penalty: 0.9 }, true],
    [{ presence_penalty: 0.6, frequency_penalty: 0.6 }, false],
    [{ presence_penalty: 0.4, frequency_penalty: 0.4 }, true],
    [{ presence_penalty: -1, frequency_penalty: 1.5 }, true],
  ] as const) {
    const lp = await run(penalties);
    eq(lp.tokens, [t.text, repeats ? t.text : oText], `${JSON.stringify(penalties)}: c x frequency + presence ${repeats ? '<' : '>'} 1`);
    if (!repeats) close(lp.token_logprobs[1], oLogprob, api.profile.logprobTolerance, `${JSON.stringify(penalties)}: O's raw logprob`);
  }
});

add('penalties', 'repetition_penalty 1 changes nothing; other values are accepted at either level', async (api) => {
  const reference = text0(await api.complete({ max_tokens: 10, ...greedy }));
  eq(text0(await api.complete({ max_tokens: 10, ...greedy, repetition_penalty: 1 })), reference, 'repetition_penalty 1');
  await api.complete({ max_tokens: 4, ...greedy, repetition_penalty: 1.3 });
  await api.complete({ max_tokens: 4, ...greedy, extra_body: { repetition_penalty: 0.8 } });
});

// concurrency, isolation and abort

add('isolation', '20 concurrent requests with distinct seeds each match their own sequential run', async (api) => {
  const bodies = Array.from({ length: 20 }, (_, i) => ({
    max_tokens: 8,
    temperature: 1.2,
    seed: 1000 + i,
    ...(i % 3 === 0 ? { stop: [' the'] } : {}),
    ...(i % 4 === 1 ? { presence_penalty: 0.5 } : {}),
  }));
  const sequential: Json[] = [];
  for (const body of bodies) sequential.push((await api.complete(body)).choices[0]);
  const concurrent = await Promise.all(
    bodies.map(async (body, i) => {
      if (i % 2 === 0) return (await api.complete(body)).choices[0];
      const s = streamedChoices(await api.stream(body)).get(0)!;
      return { text: s.text, finish_reason: s.finishes.at(-1) };
    }),
  );
  concurrent.forEach((c, i) => sameChoice(c, sequential[i], `request ${i} (seed ${bodies[i]!.seed}${i % 2 ? ', streamed' : ''})`));
});

async function expectIdle(api: Api): Promise<void> {
  if (!api.target.openSessions) return;
  const deadline = Date.now() + 10_000;
  while (api.target.openSessions() !== 0) {
    if (Date.now() > deadline) fail(`sessions still open after the abort: ${api.target.openSessions()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

add(
  'isolation',
  'aborting a stream stops it; the next request runs normally',
  async (api) => {
    const reference = text0(await api.complete({ max_tokens: 8, ...greedy }));
    const controller = new AbortController();
    const requested = Math.min(200, room(api));
    const r = await api.post(api.body({ max_tokens: requested, ignore_eos: true, stream: true }), { signal: controller.signal });
    eq(r.status, 200, 'status');
    const reader = r.body!.getReader();
    const first = await reader.read();
    ok(!first.done, 'a first chunk');
    controller.abort();
    let chunks = 1;
    try {
      for (;;) {
        const step = await reader.read();
        if (step.done) break;
        chunks++;
      }
    } catch (err) {
      eq((err as Error).name, 'AbortError', 'the body errors with an AbortError');
    }
    // Stopping "at the next token" leaves most of the requested tokens ungenerated.
    ok(chunks < requested / 2, `the stream went on after the abort (${chunks} of ${requested} chunks)`);
    await expectIdle(api);
    eq(text0(await api.complete({ max_tokens: 8, ...greedy })), reference, 'the next request');
  },
  ['abort'],
);

add(
  'isolation',
  'aborting a non-streamed request; the next request runs normally',
  async (api) => {
    const reference = text0(await api.complete({ max_tokens: 8, ...greedy }));
    const controller = new AbortController();
    const pending = api.post(api.body({ max_tokens: Math.min(200, room(api)), ignore_eos: true }), { signal: controller.signal });
    setTimeout(() => controller.abort(), 20);
    const outcome = await pending.then(
      async (r) => `answered ${r.status} ${(await r.text()).slice(0, 80)}`,
      (err: Error) => err.name,
    );
    // A request that was done before the abort reached it is fine too; the point is what follows.
    ok(outcome === 'AbortError' || outcome.startsWith('answered 200'), `outcome: ${outcome}`);
    await expectIdle(api);
    eq(text0(await api.complete({ max_tokens: 8, ...greedy })), reference, 'the next request');
  },
  ['abort'],
);

// the official openai client

add(
  'openai',
  'the openai client: completions with n, logprobs, echo, and extensions',
  async (api) => {
    const client = api.openai();
    const reference = await api.complete({ max_tokens: 8, ...greedy, logprobs: 2 });
    const completion = await client.completions.create({ model: api.profile.model, prompt: api.profile.prompt, max_tokens: 8, temperature: 0, logprobs: 2 });
    eq(completion.object, 'text_completion', 'object');
    eq(completion.choices[0]!.text, text0(reference), 'text');
    eq(completion.choices[0]!.logprobs, reference.choices[0].logprobs as unknown, 'logprobs');
    eq(completion.usage, reference.usage, 'usage');
    const several = await client.completions.create({ model: api.profile.model, prompt: [api.profile.prompt, api.profile.otherPrompt], n: 2, max_tokens: 4, seed: 3, echo: true });
    eq(several.choices.map((c) => c.index), [0, 1, 2, 3], 'indexes');
    ok(several.choices[2]!.text.startsWith(api.profile.otherPrompt), 'echo of prompt 1');
    const extended = await client.completions.create({
      model: api.profile.model,
      prompt: api.profile.prompt,
      max_tokens: 8,
      temperature: 1,
      seed: 3,
      top_k: 1,
    } as OpenAI.CompletionCreateParamsNonStreaming);
    eq(extended.choices[0]!.text, text0(reference), 'top_k 1 through the client');
  },
  ['openai'],
);

add(
  'openai',
  'the openai client: streaming with usage and n',
  async (api) => {
    const client = api.openai();
    const body = { max_tokens: 8, temperature: 1, seed: 12, n: 2 };
    const reference = await api.complete(body);
    const stream = await client.completions.create({
      model: api.profile.model,
      prompt: api.profile.prompt,
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts = ['', ''];
    const finishes: (string | null)[][] = [[], []];
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        texts[c.index] += c.text;
        finishes[c.index]!.push(c.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    eq(texts, reference.choices.map((c: Json) => c.text), 'texts');
    eq(finishes.map((f) => f.at(-1)), reference.choices.map((c: Json) => c.finish_reason), 'finish reasons');
    eq(usage, reference.usage, 'usage');
  },
  ['openai'],
);

add(
  'openai',
  'the openai client: errors come as its error classes, with param and code',
  async (api) => {
    const client = api.openai();
    const bad = await client.completions.create({ model: api.profile.model, prompt: 'x', temperature: 5 }).catch((e: unknown) => e);
    ok(bad instanceof OpenAI.BadRequestError, `a BadRequestError: ${String(bad)}`);
    eq((bad as InstanceType<typeof OpenAI.BadRequestError>).param, 'temperature', 'param');
    const missing = await client.completions.create({ model: 'no-such-model', prompt: 'x' }).catch((e: unknown) => e);
    ok(missing instanceof OpenAI.NotFoundError, `a NotFoundError: ${String(missing)}`);
    eq((missing as InstanceType<typeof OpenAI.NotFoundError>).code, 'model_not_found', 'code');
    const streamed = await client.completions
      .create({ model: api.profile.model, prompt: 'x', stream: true, best_of: 3 })
      .catch((e: unknown) => e);
    ok(streamed instanceof OpenAI.BadRequestError, `best_of with stream: a BadRequestError: ${String(streamed)}`);
  },
  ['openai'],
);

/** Every case: the validation table first, then the procedures. */
export const CONFORMANCE_CASES: readonly ConformanceCase[] = [...ERROR_CASES.map(errorCase), ...CASES];

/** Runs `cases` (default: all) against `api`, skipping those whose needs the target lacks; returns failures. */
export async function runConformance(
  api: Api,
  cases: readonly ConformanceCase[] = CONFORMANCE_CASES,
): Promise<{ name: string; error: unknown }[]> {
  const failures: { name: string; error: unknown }[] = [];
  for (const c of cases) {
    if (c.needs?.some((n) => !api.target.capabilities.includes(n))) continue;
    try {
      await c.run(api);
    } catch (error) {
      failures.push({ name: `${c.group}: ${c.name}`, error });
    }
  }
  return failures;
}

export { Api, parseSse };
export type { SseData };
