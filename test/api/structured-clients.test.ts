// Structured output through the official `openai` client, end to end on a real model (stories260K,
// with a ChatML template that offers tools in the hermes format): chat's response_format
// (json_schema, json_object), completions' extra_body.guided_json, and tool_choice "required" and
// named, streamed and not, against the Node server and the fetch shim. Every reply that stops is
// checked with ajv; every forced tool call's arguments validate against the tool's parameters.
import Ajv2020 from 'ajv/dist/2020.js';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import { installFetchShim } from '../../src/api/shim.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { STORIES_GGUF } from '../helpers/model-files.ts';

/** ChatML with the tools listed in hermes' words: its `<tool_call>` makes hermes the tool-call format. */
const TEMPLATE =
  '{% if tools %}<|im_start|>system\nYou may call functions. Put each call in <tool_call></tool_call> tags.\n' +
  '{% for t in tools %}{{ t.function.name }}\n{% endfor %}<|im_end|>\n{% endif %}' +
  '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}' +
  '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

const HERO = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 1, maximum: 12 }, pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 2 } },
  required: ['name', 'age', 'pets'],
  additionalProperties: false,
};
const WEATHER = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false },
  },
};
const TIME = {
  type: 'function' as const,
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'local'] } }, required: ['zone'] } },
};
const PARAMETERS: Record<string, object> = { get_weather: WEATHER.function.parameters, get_time: TIME.function.parameters };

const ajv = new Ajv2020({ strict: false });
const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Tell me about the hero.' }];
const SEEDS = [1, 2, 3, 4];

let engine: Engine;
let server: RunningServer;
let uninstall: () => void;
const clients: [string, OpenAI][] = [];
beforeAll(async () => {
  engine = await loadModelFromPath(STORIES_GGUF, { id: 'stories', chatTemplate: TEMPLATE, contextLength: 512 });
  server = await startServer(engine, { port: 0, log: () => {} });
  clients.push(['the Node server', new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 })]);
  const target = { fetch: () => Promise.reject(new Error('not for the shim')) } as unknown as typeof globalThis;
  uninstall = installFetchShim(engine, { baseUrl: 'http://structured.test/v1', target });
  clients.push(['the fetch shim', new OpenAI({ apiKey: 'x', baseURL: 'http://structured.test/v1', maxRetries: 0, dangerouslyAllowBrowser: true, fetch: (...a) => target.fetch(...a) })]);
}, 120_000);
afterAll(async () => {
  uninstall?.();
  await server?.close();
  await engine?.unload();
});

/** The whole content and finish reason of a streamed chat reply, and its tool calls joined from their deltas. */
async function collect(stream: AsyncIterable<OpenAI.ChatCompletionChunk>) {
  let content = '';
  let finish: string | null = null;
  const calls: { name: string; arguments: string }[] = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    for (const call of choice.delta.tool_calls ?? []) {
      calls[call.index] ??= { name: '', arguments: '' };
      calls[call.index]!.name += call.function?.name ?? '';
      calls[call.index]!.arguments += call.function?.arguments ?? '';
    }
    finish = choice.finish_reason ?? finish;
  }
  return { content, finish, calls };
}

function expectValidCalls(calls: { name: string; arguments: string }[], names: string[]): void {
  expect(calls.length).toBeGreaterThan(0);
  for (const call of calls) {
    expect(names).toContain(call.name);
    const args = JSON.parse(call.arguments);
    expect(ajv.validate(PARAMETERS[call.name]!, args), `${call.arguments}: ${ajv.errorsText()}`).toBe(true);
  }
}

describe.each([0, 1])('structured output through the openai client (host %i)', (host) => {
  const client = () => clients[host]![1];

  it("chat: response_format json_schema, streamed and not: a reply that stops is valid", async () => {
    let stopped = 0;
    for (const seed of SEEDS) {
      const response_format = { type: 'json_schema' as const, json_schema: { name: 'hero', schema: HERO, strict: true } };
      const whole = await client().chat.completions.create({ model: 'stories', messages, temperature: 1, seed, max_tokens: 64, response_format });
      const streamed = await collect(await client().chat.completions.create({ model: 'stories', messages, temperature: 1, seed, max_tokens: 64, response_format, stream: true }));
      // Seeded: the stream is the same reply.
      expect(streamed.content).toBe(whole.choices[0]!.message.content);
      expect(streamed.finish).toBe(whole.choices[0]!.finish_reason);
      if (whole.choices[0]!.finish_reason !== 'stop') continue;
      stopped++;
      expect(ajv.validate(HERO, JSON.parse(whole.choices[0]!.message.content!)), ajv.errorsText()).toBe(true);
    }
    expect(stopped).toBeGreaterThan(0);
  }, 120_000);

  it('chat: response_format json_object gives a JSON object (one cut by max_tokens still begins as one)', async () => {
    for (const seed of SEEDS) {
      const reply = await client().chat.completions.create({ model: 'stories', messages, temperature: 0.7, seed, max_tokens: 64, response_format: { type: 'json_object' } });
      const content = reply.choices[0]!.message.content!;
      expect(content.startsWith('{'), content).toBe(true);
      if (reply.choices[0]!.finish_reason !== 'stop') {
        expect(reply.choices[0]!.finish_reason).toBe('length');
        continue;
      }
      const value = JSON.parse(content);
      expect(typeof value === 'object' && value !== null && !Array.isArray(value)).toBe(true);
    }
  }, 60_000);

  it('completions: extra_body.guided_json, with n = 4', async () => {
    const completion = await client().completions.create({
      model: 'stories',
      prompt: 'Once upon a time',
      temperature: 1,
      seed: 9,
      n: 4,
      max_tokens: 64,
      ...({ extra_body: { guided_json: HERO } } as object),
    });
    expect(completion.choices).toHaveLength(4);
    const stopped = completion.choices.filter((c) => c.finish_reason === 'stop');
    expect(stopped.length).toBeGreaterThan(0);
    for (const c of stopped) expect(ajv.validate(HERO, JSON.parse(c.text)), `${c.text}: ${ajv.errorsText()}`).toBe(true);
  }, 60_000);

  it('tool_choice "required": calls whose arguments validate, finish_reason tool_calls, streamed and not', async () => {
    let checked = 0;
    for (const seed of SEEDS.slice(0, 2)) {
      const whole = await client().chat.completions.create({ model: 'stories', messages, tools: [WEATHER, TIME], tool_choice: 'required', temperature: 1, seed, max_tokens: 96 });
      const choice = whole.choices[0]!;
      if (choice.finish_reason === 'length') continue;
      expect(choice.finish_reason).toBe('tool_calls');
      expectValidCalls(choice.message.tool_calls!.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function), ['get_weather', 'get_time']);
      const streamed = await collect(await client().chat.completions.create({ model: 'stories', messages, tools: [WEATHER, TIME], tool_choice: 'required', temperature: 1, seed, max_tokens: 96, stream: true }));
      expect(streamed.finish).toBe('tool_calls');
      expectValidCalls(streamed.calls, ['get_weather', 'get_time']);
      checked++;
    }
    expect(checked).toBeGreaterThan(0);
  }, 120_000);

  it('a named tool_choice calls that function, exactly once without parallel_tool_calls', async () => {
    const reply = await client().chat.completions.create({
      model: 'stories',
      messages,
      tools: [WEATHER, TIME],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      temperature: 1,
      seed: 11,
      max_tokens: 96,
    });
    const choice = reply.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toHaveLength(1);
    expectValidCalls(choice.message.tool_calls!.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function), ['get_weather']);
  }, 60_000);

  it('an invalid schema is the client\'s BadRequestError, naming response_format', async () => {
    const error = await client()
      .chat.completions.create({ model: 'stories', messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: 5 } as never } } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('response_format');
  }, 30_000);
});
