// The official `openai` client's chat.completions against the Node server and the page's fetch
// shim (the same handler behind both), streamed and not, with tools; and several engines in one
// host, routed by `model`.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { installFetchShim } from '../../src/api/shim.ts';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { clientHosts } from '../helpers/client-hosts.ts';
import { chatGenerator, WEATHER_TOOL } from '../helpers/chat-fakes.ts';

const SHIM_BASE = 'http://chat.test/v1';
const CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

let server: RunningServer | undefined;
let uninstall: (() => void) | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
  uninstall?.();
  uninstall = undefined;
});

const clients = clientHosts(SHIM_BASE);
afterEach(() => clients.close());
const HOSTS = clients.hosts;

const messages: OpenAI.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Weather in Paris?' },
];
const tools = [WEATHER_TOOL] as OpenAI.ChatCompletionTool[];

for (const [host, connect] of HOSTS) {
  describe(`the openai client's chat.completions against ${host}`, () => {
    it('creates a chat completion, streamed and not', async () => {
      const client = await connect({ generator: chatGenerator({ script: ' Sunny.' }) });
      const completion = await client.chat.completions.create({ model: 'fake-llama', messages, temperature: 0 });
      expect(completion.object).toBe('chat.completion');
      expect(completion.choices[0]!.message).toEqual({ role: 'assistant', content: ' Sunny.', refusal: null });
      expect(completion.choices[0]!.finish_reason).toBe('stop');
      const stream = await client.chat.completions.create({ model: 'fake-llama', messages, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let usage: OpenAI.CompletionUsage | null | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        usage = chunk.usage ?? usage;
      }
      expect(text).toBe(' Sunny.');
      expect(usage).toEqual(completion.usage);
    });

    it('returns tool calls, and the stream helper assembles the same from the deltas', async () => {
      const client = await connect({ generator: chatGenerator({ script: `On it.${CALL}` }) });
      const completion = await client.chat.completions.create({ model: 'fake-llama', messages, tools });
      const call = completion.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
      expect(call.function).toEqual({ name: 'get_weather', arguments: '{"city":"Paris"}' });
      expect(completion.choices[0]!.finish_reason).toBe('tool_calls');
      // The client's own accumulator checks every delta's shape as it merges them.
      const runner = client.chat.completions.stream({ model: 'fake-llama', messages, tools });
      const streamed = await runner.finalChatCompletion();
      const message = streamed.choices[0]!.message;
      expect(message.content).toBe('On it.');
      expect(message.tool_calls?.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function)).toEqual([{ name: 'get_weather', arguments: '{"city":"Paris"}' }]);
      expect(streamed.choices[0]!.finish_reason).toBe('tool_calls');
      // The round trip: the call and its result go back as the next turn.
      const next = await client.chat.completions.create({
        model: 'fake-llama',
        tools,
        messages: [...messages, completion.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }],
      });
      expect(next.choices[0]!.message.role).toBe('assistant');
    });

    it('raises the client errors for bad requests', async () => {
      const client = await connect({ generator: chatGenerator() });
      const bad = await client.chat.completions.create({ model: 'fake-llama', messages: [] }).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
      expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('messages');
      const missing = await client.chat.completions.create({ model: 'gpt-4o', messages }).catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
      const noTemplate = await (await connect({ generator: chatGenerator({}, null) })).chat.completions.create({ model: 'fake-llama', messages }).catch((e: unknown) => e);
      expect((noTemplate as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('chat_template_missing');
    });

    it('routes each request to the engine serving its model, and lists them all', async () => {
      const a = chatGenerator({ id: 'model-a', aliases: ['a'], script: ' from A' });
      const b = chatGenerator({ id: 'model-b', aliases: [], script: ' from B' });
      const client = await connect([{ generator: a }, Promise.resolve({ generator: b })]);
      expect((await client.models.list()).data.map((m) => m.id)).toEqual(['model-a', 'model-b']);
      expect((await client.models.retrieve('model-b')).id).toBe('model-b');
      for (const [model, text] of [['model-a', ' from A'], ['a', ' from A'], ['model-b', ' from B']]) {
        const chat = await client.chat.completions.create({ model: model!, messages });
        expect(chat.choices[0]!.message.content).toBe(text);
        const completion = await client.completions.create({ model: model!, prompt: 'x', max_tokens: 5, temperature: 0 });
        expect(completion.model).toBe(model === 'model-b' ? 'model-b' : 'model-a');
      }
      const missing = await client.chat.completions.create({ model: 'model-c', messages }).catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
      expect((missing as Error).message).toContain("'model-a', 'model-b'");
    });
  });
}

it('answers a loaded model at once while another still loads, and waits for the loading one when asked for it', async () => {
  let finishLoad: (engine: { generator: ReturnType<typeof chatGenerator> }) => void = () => {};
  const slow = new Promise<{ generator: ReturnType<typeof chatGenerator> }>((resolve) => (finishLoad = resolve));
  server = await startServer([{ generator: chatGenerator({ id: 'fast', script: ' quick' }) }, slow], { port: 0, log: () => {} });
  const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  expect((await client.chat.completions.create({ model: 'fast', messages })).choices[0]!.message.content).toBe(' quick');
  expect((await client.models.list()).data.map((m) => m.id)).toEqual(['fast']);
  const waiting = client.chat.completions.create({ model: 'slow', messages });
  let answered = false;
  void waiting.then(() => (answered = true), () => (answered = true));
  await new Promise((resolve) => setTimeout(resolve, 100));
  expect(answered).toBe(false);
  finishLoad({ generator: chatGenerator({ id: 'slow', script: ' at last' }) });
  expect((await waiting).choices[0]!.message.content).toBe(' at last');
  expect((await client.models.list()).data.map((m) => m.id)).toEqual(['fast', 'slow']);
});

it('routes past an engine that failed to load, lists only the loaded ones, and names the failure in a 404', async () => {
  const failed = Promise.reject(new Error('no GPU'));
  server = await startServer([failed, { generator: chatGenerator({ id: 'ok-model', script: ' fine' }) }], { port: 0, log: () => {} });
  const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  expect((await client.models.list()).data.map((m) => m.id)).toEqual(['ok-model']);
  const chat = await client.chat.completions.create({ model: 'ok-model', messages });
  expect(chat.choices[0]!.message.content).toBe(' fine');
  const missing = await client.chat.completions.create({ model: 'other', messages }).catch((e: unknown) => e);
  expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  expect((missing as Error).message).toMatch(/serves 'ok-model'; 1 model failed to load \(no GPU\)/);
});

it("the shim answers POST /tokenize beside its base, and leaves the site's other requests there alone", async () => {
  const passed: string[] = [];
  const target = {
    fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
      passed.push(`${init?.method ?? 'GET'} ${String(input)}`);
      return new Response('site');
    },
    location: { href: 'https://site.example/app/' },
  } as unknown as typeof globalThis;
  uninstall = installFetchShim({ generator: chatGenerator() }, { target });
  const body = JSON.stringify({ prompt: 'Once upon a time' });
  for (const url of ['/tokenize', '/tokenize/', '/v1/tokenize']) {
    const response = await target.fetch(url, { method: 'POST', body });
    expect(response.status, url).toBe(200);
    expect((await response.json()).count, url).toBeGreaterThan(0);
  }
  expect(await (await target.fetch('/tokenize')).text()).toBe('site'); // a page at /tokenize
  expect(await (await target.fetch('/app/tokenize', { method: 'POST', body })).text()).toBe('site');
  expect(passed).toEqual(['GET /tokenize', 'POST /app/tokenize']);
});
