// Hostile request values on every endpoint (chat, completions, embeddings, tokenize, detokenize): values
// nested thousands of levels deep are a 400 naming the parameter, not a 500 from a recursion
// that ran out of stack; error messages show a bounded excerpt of a bad value, however large;
// request objects given to the Engine directly (cyclic, with getters that throw, BigInts) are
// refused the same way. The seeded fuzz over all of this is hostile-fuzz.test.ts.
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/api/engine.ts';
import type { GenerationSession, SessionRequest, TextGenerator } from '../../src/engine/types.ts';
import { ApiError } from '../../src/api/errors.ts';
import { answerApiRequest, handleApiRequest, type ApiResponse } from '../../src/api/handler.ts';
import { MAX_REQUEST_DEPTH } from '../../src/api/request-data.ts';
import { json, type Json } from '../helpers/api-requests.ts';
import { chatGenerator, WEATHER_TOOL } from '../helpers/chat-fakes.ts';
import { FakeTokenizer } from '../helpers/fake-generator.ts';
import { bodyText, deepArrayJson, deepObjectJson, MEBIBYTE_STRING, raw } from '../helpers/hostile-values.ts';

const DEEP = 20_000;
/** Error messages stay under this, whatever the request held. */
const MESSAGE_LIMIT = 2048;

const engine = { generator: chatGenerator() };
const messages = [{ role: 'user' as const, content: 'Hi' }];
const CHAT = '/v1/chat/completions';
const COMPLETIONS = '/v1/completions';

function send(url: string, body: string): Promise<ApiResponse> {
  return handleApiRequest(engine, { method: 'POST', url, body });
}

/** The error of an answer: its status, the OpenAI shape, a bounded message and param. */
function errorOf(response: ApiResponse, status: number, type = 'invalid_request_error'): Json {
  expect(response.status).toBe(status);
  const body = json(response);
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(body.error.type).toBe(type);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.message.length).toBeLessThan(MESSAGE_LIMIT);
  expect(String(body.error.param).length).toBeLessThan(MESSAGE_LIMIT);
  return body.error;
}

describe('values nested too deeply: a 400 naming the parameter', () => {
  const cases: [string, string, unknown, Record<string, string>, string, string][] = [
    ['chat: response_format.type', CHAT, { model: 'fake', messages, response_format: { type: raw('v') } }, { v: deepArrayJson(DEEP) }, 'response_format', 'response_format.type'],
    ['chat: messages[].role', CHAT, { model: 'fake', messages: [{ role: raw('v'), content: 'Hi' }] }, { v: deepObjectJson(DEEP) }, 'messages', 'messages[0].role.a.a'],
    ['chat: messages[].content[].type', CHAT, { model: 'fake', messages: [{ role: 'user', content: [{ type: raw('v'), text: 'Hi' }] }] }, { v: deepArrayJson(DEEP) }, 'messages', 'messages[0].content[0].type[0][0]'],
    ['chat: tools[].type', CHAT, { model: 'fake', messages, tools: [{ type: raw('v'), function: { name: 'f' } }] }, { v: deepArrayJson(DEEP) }, 'tools', 'tools[0].type'],
    ['chat: tools[].function.parameters', CHAT, { model: 'fake', messages, tools: [{ type: 'function', function: { name: 'f', parameters: raw('v') } }] }, { v: deepObjectJson(DEEP, 'not') }, 'tools', 'tools[0].function.parameters.not'],
    ['chat: a message field the template reads', CHAT, { model: 'fake', messages: [{ role: 'user', content: 'Hi', extra: raw('v') }] }, { v: deepArrayJson(DEEP) }, 'messages', 'messages[0].extra'],
    ['chat: chat_template_kwargs', CHAT, { model: 'fake', messages, chat_template_kwargs: { x: raw('v') } }, { v: deepArrayJson(DEEP) }, 'chat_template_kwargs', 'chat_template_kwargs.x'],
    ['chat: guided_json in extra_body', CHAT, { model: 'fake', messages, extra_body: { guided_json: raw('v') } }, { v: deepObjectJson(DEEP) }, 'extra_body.guided_json', 'extra_body.guided_json.a'],
    [
      'chat: structured_outputs.json with disable_additional_properties',
      CHAT,
      { model: 'fake', messages, structured_outputs: { json: raw('v'), disable_additional_properties: true } },
      { v: deepObjectJson(DEEP, 'not', '{}') },
      'structured_outputs',
      'structured_outputs.json.not',
    ],
    ['completions: response_format.type', COMPLETIONS, { model: 'fake', prompt: 'Hi', response_format: { type: raw('v') } }, { v: deepArrayJson(DEEP) }, 'response_format', 'response_format.type'],
    ['completions: prompt', COMPLETIONS, { model: 'fake', prompt: raw('v') }, { v: deepArrayJson(DEEP, '1') }, 'prompt', 'prompt[0]'],
    ['completions: logit_bias', COMPLETIONS, { model: 'fake', prompt: 'Hi', logit_bias: { '5': raw('v') } }, { v: deepArrayJson(DEEP, '1') }, 'logit_bias', 'logit_bias.5'],
    ['tokenize: messages[].role', '/tokenize', { messages: [{ role: raw('v'), content: 'Hi' }] }, { v: deepObjectJson(DEEP) }, 'messages', 'messages[0].role'],
    ['tokenize: an unknown field', '/tokenize', { prompt: 'Hi', other: raw('v') }, { v: deepArrayJson(DEEP) }, 'other', 'other'],
    ['detokenize: tokens', '/detokenize', { tokens: raw('v') }, { v: deepArrayJson(DEEP, '1') }, 'tokens', 'tokens[0]'],
    ['detokenize: model', '/detokenize', { model: raw('v'), tokens: [1] }, { v: deepObjectJson(DEEP) }, 'model', 'model.a'],
    ['embeddings: input', '/v1/embeddings', { model: 'fake', input: raw('v') }, { v: deepArrayJson(DEEP, '1') }, 'input', 'input[0]'],
    ['embeddings: truncate_prompt_tokens in extra_body', '/v1/embeddings', { model: 'fake', input: 'Hi', extra_body: { truncate_prompt_tokens: raw('v') } }, { v: deepObjectJson(DEEP) }, 'extra_body.truncate_prompt_tokens', 'extra_body.truncate_prompt_tokens.a'],
  ];
  it.each(cases)('%s', async (_name, url, body, texts, param, path) => {
    const error = errorOf(await send(url, bodyText(body, texts)), 400);
    expect(error.param).toBe(param);
    expect(error.code).toBe('nested_too_deeply');
    expect(error.message).toContain(`more than ${MAX_REQUEST_DEPTH} levels`);
    expect(error.message).toContain(path);
  });

  it('counts JSON text inside a field too: tool call arguments, a guided_json string', async () => {
    const args = errorOf(
      await send(CHAT, JSON.stringify({
        model: 'fake',
        messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: deepObjectJson(DEEP) } }] }, ...messages],
      })),
      400,
    );
    expect(args.param).toBe('messages[0].tool_calls[0].function.arguments');
    expect(args.code).toBe('nested_too_deeply');
    for (const body of [
      { guided_json: deepObjectJson(DEEP, 'not', '{}') },
      { structured_outputs: { json: deepObjectJson(DEEP, 'not', '{}'), disable_additional_properties: true } },
      { structural_tag: JSON.stringify({ type: 'structural_tag', structures: [{ begin: '<f>', schema: deepObjectJson(DEEP, 'not', '{}'), end: '</f>' }], triggers: ['<f'] }) },
    ]) {
      const error = errorOf(await send(CHAT, JSON.stringify({ model: 'fake', messages, ...body })), 400);
      expect(error.code, JSON.stringify(body).slice(0, 80)).toBe('nested_too_deeply');
    }
  });

  it('names the parameter when the body also holds NaN or Infinity, as Python writes them', async () => {
    const body = bodyText({ model: 'fake', messages, temperature: raw('nan'), chat_template_kwargs: { x: raw('v') } }, { nan: 'NaN', v: deepArrayJson(DEEP) });
    const error = errorOf(await send(CHAT, body), 400);
    expect(error.param).toBe('chat_template_kwargs');
    expect(error.code).toBe('nested_too_deeply');
  });

  it(`takes values ${MAX_REQUEST_DEPTH} levels deep, the body counted, in every field`, async () => {
    // The body is level 1, messages 2, the message 3, its field 4: 124 more levels of arrays.
    const inMessage = bodyText({ model: 'fake', messages: [{ role: 'user', content: 'Hi', extra: raw('v') }], max_tokens: 2 }, { v: deepArrayJson(MAX_REQUEST_DEPTH - 3, '1') });
    expect((await send(CHAT, inMessage)).status).toBe(200);
    const oneMore = bodyText({ model: 'fake', messages: [{ role: 'user', content: 'Hi', extra: raw('v') }], max_tokens: 2 }, { v: deepArrayJson(MAX_REQUEST_DEPTH - 2, '1') });
    expect(errorOf(await send(CHAT, oneMore), 400).code).toBe('nested_too_deeply');
  });
});

describe('error messages show a bounded excerpt of what was given', () => {
  const big = MEBIBYTE_STRING;
  const cases: [string, string, unknown, number, string | null][] = [
    ['chat: response_format.type', CHAT, { model: 'fake', messages, response_format: { type: big } }, 400, 'response_format.type'],
    ['chat: messages[].role', CHAT, { model: 'fake', messages: [{ role: big, content: 'Hi' }] }, 400, 'messages[0].role'],
    ['chat: messages[].content[].type', CHAT, { model: 'fake', messages: [{ role: 'user', content: [{ type: big }] }] }, 400, 'messages[0].content[0].type'],
    ['chat: tools[].type', CHAT, { model: 'fake', messages, tools: [{ type: big }] }, 400, 'tools[0].type'],
    ['chat: a tool name', CHAT, { model: 'fake', messages, tools: [{ type: 'function', function: { name: big } }] }, 400, 'tools[0].function.name'],
    ['chat: tool_choice', CHAT, { model: 'fake', messages, tools: [WEATHER_TOOL], tool_choice: big }, 400, 'tool_choice'],
    ['chat: a named tool_choice', CHAT, { model: 'fake', messages, tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: big } } }, 400, 'tool_choice'],
    ['chat: the model', CHAT, { model: big, messages }, 404, 'model'],
    ['chat: service_tier', CHAT, { model: 'fake', messages, service_tier: big }, 400, 'service_tier'],
    ['chat: guided_decoding_backend', CHAT, { model: 'fake', messages, guided_decoding_backend: big }, 400, 'guided_decoding_backend'],
    ['chat: a raise_exception message', CHAT, { model: 'fake', messages, chat_template: `{{ raise_exception('${'y'.repeat(200_000)}') }}` }, 400, 'chat_template'],
    ['completions: an unknown parameter', COMPLETIONS, { model: 'fake', prompt: 'Hi', [big]: 1 }, 400, null],
    ['completions: many unknown parameters', COMPLETIONS, { model: 'fake', prompt: 'Hi', ...Object.fromEntries(Array.from({ length: 50_000 }, (_, i) => [`unknown_${i}`, 1])) }, 400, 'unknown_0'],
    ['completions: a key in extra_body', COMPLETIONS, { model: 'fake', prompt: 'Hi', extra_body: { [big]: 1 } }, 400, null],
    ['completions: a logit_bias key', COMPLETIONS, { model: 'fake', prompt: 'Hi', logit_bias: { [big]: 1 } }, 400, 'logit_bias'],
    ['completions: a key of stream_options', COMPLETIONS, { model: 'fake', prompt: 'Hi', stream: true, stream_options: { [big]: true } }, 400, null],
    ['completions: a field of response_format', COMPLETIONS, { model: 'fake', prompt: 'Hi', response_format: { type: 'json_object', [big]: 1 } }, 400, null],
    ['completions: suffix', COMPLETIONS, { model: 'fake', prompt: 'Hi', suffix: [big] }, 400, 'suffix'],
    ['tokenize: messages[].role', '/tokenize', { messages: [{ role: big, content: 'Hi' }] }, 400, 'messages[0].role'],
    ['tokenize: the model', '/tokenize', { model: big, prompt: 'Hi' }, 404, 'model'],
    ['detokenize: the model', '/detokenize', { model: big, tokens: [1] }, 404, 'model'],
    ['detokenize: a token', '/detokenize', { tokens: [1, big] }, 400, 'tokens'],
    ['embeddings: the model', '/v1/embeddings', { model: big, input: 'Hi' }, 404, 'model'],
    ['embeddings: a token', '/v1/embeddings', { model: 'fake', input: [1, big] }, 400, 'input'],
    ['embeddings: a string among arrays', '/v1/embeddings', { model: 'fake', input: [[1], big] }, 400, 'input'],
    ['embeddings: encoding_format', '/v1/embeddings', { model: 'fake', input: 'Hi', encoding_format: big }, 400, 'encoding_format'],
    ['embeddings: an unknown parameter', '/v1/embeddings', { model: 'fake', input: 'Hi', [big]: 1 }, 400, null],
  ];
  it.each(cases)('%s', async (_name, url, body, status, param) => {
    const error = errorOf(await send(url, JSON.stringify(body)), status);
    if (param !== null) expect(error.param).toBe(param);
  });
});

describe('request objects given to the Engine directly', () => {
  const direct = new Engine(chatGenerator({ script: ' Hello' }));

  async function refusal(run: () => Promise<unknown>): Promise<ApiError> {
    const err = await run().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    const apiError = err as ApiError;
    expect(apiError.status).toBe(400);
    expect(apiError.message.length).toBeLessThan(MESSAGE_LIMIT);
    return apiError;
  }

  it('refuses a cyclic request with a 400 naming the parameter', async () => {
    const message: Record<string, unknown> = { role: 'user', content: 'Hi' };
    message.self = message;
    const error = await refusal(() => direct.chat({ model: 'fake', messages: [message as never] }));
    expect(error.param).toBe('messages');
    expect(error.code).toBe('nested_too_deeply');
    const kwargs: unknown[] = [];
    kwargs.push(kwargs);
    expect((await refusal(() => direct.chat({ model: 'fake', messages, chat_template_kwargs: { k: kwargs } }))).param).toBe('chat_template_kwargs');
  });

  it('refuses a value whose getter throws, and a BigInt', async () => {
    const request = { model: 'fake', prompt: 'Hi' } as Record<string, unknown>;
    Object.defineProperty(request, 'temperature', { enumerable: true, get: () => { throw new Error('no temperature'); } });
    const error = await refusal(() => direct.complete(request as never));
    expect(error.param).toBe('temperature');
    expect(error.message).toContain('no temperature');
    expect((await refusal(() => direct.complete({ model: 'fake', prompt: 'Hi', seed: 5n as never }))).param).toBe('seed');
  });

  it('reads each value once: a getter that changes its answer cannot pass one value to the checks and another to the run', async () => {
    let reads = 0;
    const request = { model: 'fake', max_tokens: 2 } as Record<string, unknown>;
    Object.defineProperty(request, 'prompt', { enumerable: true, get: () => (reads++ === 0 ? 'Hi' : 5) });
    const response = await direct.complete(request as never);
    expect(response.choices).toHaveLength(1);
    expect(reads).toBe(1);
  });

  it('keeps serving', async () => {
    const response = await direct.chat({ model: 'fake', messages, max_tokens: 4 });
    expect(response.choices[0]!.message.content).toBe(' Hello');
  });
});

describe('long prompts', () => {
  /** A generator that scores a prompt at once (every token -1) and writes nothing: the request layer's work alone. */
  function scoringGenerator(contextLength: number): TextGenerator {
    const tokenizer = new FakeTokenizer();
    return {
      info: { id: 'scorer', aliases: ['fake'], architecture: 'llama', contextLength, vocabSize: tokenizer.vocabSize, format: 'gguf', created: 0 },
      tokenizer,
      async openSession(request: SessionRequest): Promise<GenerationSession> {
        return {
          promptLogprobs: request.promptTokens.map((id, i) => (i === 0 ? null : { id, logprob: -1, topLogprobs: [] })),
          cachedTokens: 0,
          async *sequence() {
            return 'length' as const;
          },
          close() {},
        };
      },
      generate() {
        throw new Error('not used');
      },
    } as unknown as TextGenerator;
  }

  it('echoes 150,000 prompt tokens with their logprobs (more than a call can take as spread arguments)', async () => {
    const prompt = Array.from({ length: 150_000 }, (_, i) => 3 + (i % 250));
    const body = JSON.stringify({ model: 'fake', prompt, echo: true, logprobs: 0, max_tokens: 0 });
    const response = await handleApiRequest({ generator: scoringGenerator(200_000) }, { method: 'POST', url: COMPLETIONS, body });
    expect(response.status).toBe(200);
    const logprobs = json(response).choices[0].logprobs;
    expect(logprobs.tokens).toHaveLength(150_000);
    expect(logprobs.token_logprobs.slice(0, 2)).toEqual([null, -1]);
  });
});

describe('request URLs', () => {
  it('answers a URL that does not parse (a Node request target such as //[/) with 404, from one engine or several', async () => {
    for (const url of ['//[/', 'http://[', 'http://x:-1/v1/models', `//[${'x'.repeat(100_000)}`]) {
      errorOf(await handleApiRequest(engine, { method: 'GET', url, body: null }), 404, 'not_found_error');
      errorOf(await answerApiRequest([engine, engine], { method: 'POST', url, body: JSON.stringify({ model: 'fake', messages }) }), 404, 'not_found_error');
    }
  });

  it('answers a path with a long run of slashes at once (no regular expression that backtracks over it)', async () => {
    const started = performance.now();
    errorOf(await handleApiRequest(engine, { method: 'GET', url: `/v1${'/'.repeat(200_000)}x`, body: null }), 404, 'not_found_error');
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('answers a long unknown path with a bounded message', async () => {
    const error = errorOf(await handleApiRequest(engine, { method: 'GET', url: `/v1/${'x'.repeat(1 << 20)}`, body: null }), 404, 'not_found_error');
    expect(error.code).toBe('not_found');
  });
});
