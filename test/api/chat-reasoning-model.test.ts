// Reasoning output from a real model on the GPU: the thinking test model (a bigram model with the
// real Qwen3 tokenizer and chat template: test/helpers/thinking-model.ts), whose greedy reply to the
// template's generation prompt is `<think>` Let me think `</think>` "\n\n" Hello! `<|im_end|>`.
// Through the Node server and the page's fetch shim with the openai client, streamed and whole;
// enable_thinking false; structured output after the thinking (the engine's constrained loop
// running the thinking through the gate); max_tokens inside the thinking.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleApiRequest, type ApiEngines } from '../../src/api/handler.ts';
import { installFetchShim } from '../../src/api/shim.ts';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { tempModels } from '../helpers/temp-models.ts';
import { THINKING_REPLY, writeThinkingModel } from '../helpers/thinking-model.ts';

const models = tempModels();

let generator: LlamaGenerator;
let dir: string;
let server: RunningServer;
let uninstall: () => void;
const clients: [string, OpenAI][] = [];
const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Hi' }];
type Reasoned = { content: string | null; reasoning?: string | null; reasoning_content?: string | null };

beforeAll(async () => {
  dir = models.dir('webgpu-llama-reasoning-');
  writeThinkingModel(dir);
  generator = await models.load(dir, { contextLength: 256, id: 'bigram' });
  const engines: ApiEngines = { generator };
  server = await startServer(engines, { port: 0, log: () => {} });
  clients.push(['the Node server', new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 })]);
  const target = { fetch: () => Promise.reject(new Error('not for the shim')) } as unknown as typeof globalThis;
  uninstall = installFetchShim(engines, { baseUrl: 'http://bigram.test/v1', target });
  clients.push(['the fetch shim', new OpenAI({ apiKey: 'x', baseURL: 'http://bigram.test/v1', maxRetries: 0, dangerouslyAllowBrowser: true, fetch: (...args) => target.fetch(...args) })]);
}, 120_000);

afterAll(async () => {
  await server?.close();
  uninstall?.();
});

async function streamed(client: OpenAI, body: Omit<OpenAI.ChatCompletionCreateParamsStreaming, 'stream' | 'model' | 'messages'>) {
  const stream = await client.chat.completions.create({ model: 'bigram', messages, ...body, stream: true });
  let reasoning: string | null = null;
  let content = '';
  const finish: string[] = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    const delta = choice.delta as { content?: string | null; reasoning?: string; reasoning_content?: string };
    if (delta.reasoning !== undefined) {
      expect(delta.reasoning_content).toBe(delta.reasoning);
      reasoning = (reasoning ?? '') + delta.reasoning;
    }
    content += delta.content ?? '';
    if (choice.finish_reason) finish.push(choice.finish_reason);
  }
  return { reasoning, content, finish };
}

describe('a thinking model on the GPU (bigram weights, Qwen3 tokenizer and template)', () => {
  it('thinks, then answers: reasoning apart, streamed and whole, through each host', async () => {
    for (const [host, client] of clients) {
      const completion = await client.chat.completions.create({ model: 'bigram', messages, temperature: 0 });
      const message = completion.choices[0]!.message as Reasoned;
      expect({ host, content: message.content, reasoning: message.reasoning, alias: message.reasoning_content }).toEqual({
        host,
        content: '\n\nHello!',
        reasoning: 'Let me think',
        alias: 'Let me think',
      });
      expect(completion.choices[0]!.finish_reason).toBe('stop');
      expect(completion.usage!.completion_tokens).toBe(THINKING_REPLY.tokens);
      expect(await streamed(client, { temperature: 0 })).toEqual({ reasoning: 'Let me think', content: '\n\nHello!', finish: ['stop'] });
    }
  });

  it('enable_thinking false: the template closes the thinking, the reply is all content', async () => {
    for (const [, client] of clients) {
      const completion = await client.chat.completions.create({ model: 'bigram', messages, temperature: 0, chat_template_kwargs: { enable_thinking: false } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
      expect(completion.choices[0]!.message).toMatchObject({ content: 'Hello!', reasoning: null });
      expect(await streamed(client, { chat_template_kwargs: { enable_thinking: false } } as never)).toEqual({ reasoning: null, content: 'Hello!', finish: ['stop'] });
    }
  });

  it('max_tokens inside the thinking: the thinking so far, content null, finish length', async () => {
    const [, client] = clients[0]!;
    const completion = await client.chat.completions.create({ model: 'bigram', messages, max_tokens: 3 });
    expect(completion.choices[0]!.finish_reason).toBe('length');
    expect(completion.choices[0]!.message).toMatchObject({ content: null, reasoning: 'Let me' });
    expect(await streamed(client, { max_tokens: 3 })).toEqual({ reasoning: 'Let me', content: '', finish: ['length'] });
  });

  it('loaded with reasoning: false, the model\'s whole output is content', async () => {
    const raw = await models.load(dir, { contextLength: 256, id: 'bigram-raw', reasoning: false });
    expect(raw.info.reasoning).toBe(false);
    const response = await handleApiRequest({ generator: raw }, { method: 'POST', url: '/v1/chat/completions', body: JSON.stringify({ model: 'bigram-raw', messages, temperature: 0 }) });
    expect(JSON.parse(response.body as string).choices[0].message).toEqual({ role: 'assistant', content: `<think>${THINKING_REPLY.reasoning}</think>${THINKING_REPLY.content}`, refusal: null });
  });

  it('structured output applies after the thinking, which runs through the constrained loop unchanged', async () => {
    const schema = { type: 'object', properties: { answer: { type: 'string', enum: ['yes', 'no'] } }, required: ['answer'], additionalProperties: false };
    const response_format = { type: 'json_schema', json_schema: { name: 'a', schema } } as const;
    for (const [, client] of clients) {
      const completion = await client.chat.completions.create({ model: 'bigram', messages, temperature: 0, response_format });
      const message = completion.choices[0]!.message as Reasoned;
      expect(message.reasoning).toBe('Let me think');
      expect(['yes', 'no']).toContain(JSON.parse(message.content!).answer);
      expect(completion.choices[0]!.finish_reason).toBe('stop');
      const s = await streamed(client, { temperature: 0, response_format });
      expect(s).toEqual({ reasoning: 'Let me think', content: message.content, finish: ['stop'] });
    }
  });
});
