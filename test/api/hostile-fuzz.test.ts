// A seeded fuzz of the request handler every host calls (answerApiRequest: the fetch shim, the
// workers and the Node server), with one engine or several: valid chat, completions, embeddings, tokenize and
// detokenize bodies, mutated with values nested thousands of levels deep, wrong types anywhere,
// huge strings and keys, lone surrogates, __proto__ and constructor keys, NaN, and random tools,
// tool_choice, response_format, guided_*, structured_outputs and chat_template shapes; structures
// compile with the real grammar layer on the fake tokenizer's ~300 tokens. Every answer must be a
// well-formed 200, 400 or 404 (never a 5xx, never a throw; nothing runs at once, so never a 429)
// whose errors have the OpenAI shape and a bounded message, streams must end with [DONE], and the
// engine must serve a plain request afterwards. Then request objects given to an Engine directly,
// holding what no JSON body can (cycles, getters, proxies, BigInts, sparse arrays, ...).
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/api/engine.ts';
import { ApiError } from '../../src/api/errors.ts';
import { answerApiRequest, sseData, type ApiEngine, type ApiResponse } from '../../src/api/handler.ts';
import { CHATML, chatGenerator } from '../helpers/chat-fakes.ts';
import { fakeVector } from '../helpers/embedding-fakes.ts';
import type { FakeGenerator, FakeTokenizer } from '../helpers/fake-generator.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { baseBody, containers, hostileBody, int, MESSAGES, ODD_KEYS, pick, type Random } from '../helpers/hostile-bodies.ts';
import { mulberry32 } from '../helpers/prng.ts';

// HOSTILE_FUZZ_SEED and HOSTILE_FUZZ_BODIES run another seed, or more bodies, when looking for more.
const SEED = Number(process.env.HOSTILE_FUZZ_SEED ?? 0x5eed_0fa1);
const BODIES = Number(process.env.HOSTILE_FUZZ_BODIES ?? 400);
/** Error messages stay under this, whatever the request held. */
const MESSAGE_LIMIT = 2048;

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

// ---- the engines -----------------------------------------------------------------------------------

/** The fake chat generator, its tokenizer giving token bytes so that the real grammar layer compiles for it. */
function fakeChatGenerator(): FakeGenerator {
  const generator = chatGenerator({ contextLength: 384 });
  const tokenizer: FakeTokenizer = generator.tokenizer;
  const tokenBytes = (id: number): Uint8Array | undefined => {
    if (!(Number.isInteger(id) && id >= 0 && id < tokenizer.vocabSize) || tokenizer.isSpecial(id)) return undefined;
    if (tokenizer.isByte(id)) return Uint8Array.of(id - tokenizer.id(0));
    return new TextEncoder().encode(tokenizer.vocab[id]!.replaceAll('▁', ' '));
  };
  Object.assign(tokenizer, { tokenBytes });
  // It embeds too (Matryoshka, so that `dimensions` goes through): /v1/embeddings reaches the model.
  const embedding = { pooling: 'last' as const, normalize: true, dimensions: 8, matryoshka: true, source: 'generative' as const };
  Object.assign(generator.info, { embedding });
  Object.assign(generator, { embed: async (inputs: readonly (readonly number[])[]) => inputs.map((ids) => fakeVector(ids, 8, true)) });
  return generator;
}

/** stories260K's real tokenizer with a chat template, for /tokenize and /detokenize (it generates nothing). */
function storiesTokenizerEngine(): ApiEngine {
  const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
  const withTemplate = Object.assign(Object.create(tokenizer) as typeof tokenizer, { chatTemplates: { default: CHATML }, templateVariables: { bos_token: '<s>', eos_token: '</s>' } });
  const info = { id: 'stories', aliases: ['fake'], architecture: 'llama', contextLength: 512, vocabSize, format: 'gguf' as const, created: 0 };
  const generator = {
    info,
    tokenizer: withTemplate,
    openSession: () => Promise.reject(new Error('this engine only tokenizes')),
  };
  return { generator } as unknown as ApiEngine;
}

/** JavaScript values no JSON body holds: what a request object given to the Engine directly may. */
function scriptValue(rand: Random): unknown {
  switch (int(rand, 0, 9)) {
    case 0: {
      const cyclic: Record<string, unknown> = { role: 'user', content: 'Hi' };
      cyclic.self = cyclic;
      return cyclic;
    }
    case 1:
      return Object.defineProperty({}, 'role', { enumerable: true, get: () => { throw new Error('a getter that throws'); } });
    case 2:
      return new Proxy([], { get: () => { throw new Error('a proxy that throws'); } });
    case 3: {
      // Holes; now and then as many as an array can have, which the walk's bound on values stops.
      const sparse: unknown[] = [, , 'x'];
      if (rand() < 0.2) sparse.length = 2 ** 32 - 1;
      return sparse;
    }
    case 4:
      return BigInt(int(rand, 0, 1000));
    case 5:
      return pick(rand, [Symbol('s'), () => 'a function', undefined]);
    case 6:
      return pick(rand, [new Date(0), new Map([[1, 2]]), new Uint8Array(4), /re/g, new Error('an error')]);
    case 7:
      return Object.freeze({ role: 'user', content: 'Hi' });
    case 8: {
      let reads = 0;
      return Object.defineProperty({ role: 'user' }, 'content', { enumerable: true, get: () => (reads++ === 0 ? 'Hi' : { changed: true }) });
    }
    default:
      return Object.create({ inherited: 'not own' }, { role: { value: 'user', enumerable: true }, content: { value: 'Hi', enumerable: true } });
  }
}

// ---- the checks ------------------------------------------------------------------------------------

/** What is wrong with an answer ('' when nothing). */
async function problemsOf(response: ApiResponse): Promise<string> {
  if (![200, 400, 404].includes(response.status)) return `status ${response.status}: ${typeof response.body === 'string' ? response.body.slice(0, 300) : '(stream)'}`;
  if (typeof response.body !== 'string') {
    if (response.status !== 200) return `a stream with status ${response.status}`;
    const data: string[] = [];
    for await (const event of sseData(response.body)) data.push(event);
    if (data.at(-1) !== '[DONE]') return `a stream that does not end with [DONE]: ${data.at(-1)?.slice(0, 200)}`;
    for (const event of data.slice(0, -1)) {
      const chunk = JSON.parse(event) as Json;
      // An error after the first chunk ends the stream as an event: a request's error, never the server's.
      if (chunk.error && (chunk.error.type !== 'invalid_request_error' || event.length >= MESSAGE_LIMIT)) return `a stream error: ${event.slice(0, 300)}`;
    }
    return '';
  }
  let body: Json;
  try {
    body = JSON.parse(response.body);
  } catch {
    return `a body that is not JSON: ${response.body.slice(0, 200)}`;
  }
  if (response.status === 200) return typeof body === 'object' && body !== null && !('error' in body) ? '' : `a 200 with ${response.body.slice(0, 200)}`;
  const error = body?.error;
  const shape = Object.keys(body ?? {}).join() === 'error' && Object.keys(error ?? {}).sort().join() === 'code,message,param,type';
  if (!shape || typeof error.message !== 'string' || error.type !== 'invalid_request_error') return `not the OpenAI error shape: ${response.body.slice(0, 300)}`;
  if (response.body.length >= MESSAGE_LIMIT) return `an error body of ${response.body.length} characters: ${response.body.slice(0, 200)}`;
  return '';
}

describe('hostile requests, seeded', () => {
  it(`answers ${BODIES} mutated bodies with 200, 400 or 404 and keeps serving`, async () => {
    const chat = { generator: fakeChatGenerator() };
    const tokenizing = storiesTokenizerEngine();
    const rand = mulberry32(SEED);
    const urls = ['/v1/chat/completions', '/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/tokenize', '/detokenize'];
    const failures: string[] = [];
    const statuses = new Map<number, number>();
    for (let i = 0; i < BODIES; i++) {
      const url = pick(rand, urls);
      const tokenizes = url === '/tokenize' || url === '/detokenize';
      // Several engines: the request goes to the one serving its model, through answerFromMany.
      const engine = tokenizes && rand() < 0.5 ? tokenizing : rand() < 0.2 ? [chat, tokenizing] : chat;
      const { text, what } = hostileBody(rand, url);
      let problem: string;
      try {
        const response = await answerApiRequest(engine, { method: 'POST', url, body: text });
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
        problem = await problemsOf(response);
      } catch (err) {
        problem = `a throw: ${String(err).slice(0, 300)}`;
      }
      if (problem) failures.push(`#${i} ${url} [${what.join(', ')}]: ${problem}`);
    }
    expect(failures).toEqual([]);
    // The run reaches past validation: some bodies are answered, some refused.
    expect(statuses.get(200) ?? 0).toBeGreaterThan(BODIES / 20);
    expect(statuses.get(400) ?? 0).toBeGreaterThan(BODIES / 4);

    const after = await answerApiRequest(chat, { method: 'POST', url: '/v1/chat/completions', body: JSON.stringify({ model: 'fake', messages: MESSAGES, max_tokens: 4 }) });
    expect(after.status).toBe(200);
    expect(chat.generator.active).toBe(0);
  });
});

describe('hostile request objects given to the Engine, seeded', () => {
  it('resolves each, or rejects it with a 400 or 404 ApiError of a bounded message, and keeps serving', async () => {
    const engine = new Engine(fakeChatGenerator());
    const rand = mulberry32(SEED + 1);
    const failures: string[] = [];
    let answered = 0;
    for (let i = 0; i < BODIES / 2; i++) {
      const roll = rand();
      const chat = roll < 0.6;
      const embeds = roll >= 0.85;
      const request = baseBody(rand, chat ? '/v1/chat/completions' : embeds ? '/v1/embeddings' : '/v1/completions');
      const spots = containers(request);
      const where: string[] = [];
      for (let change = pick(rand, [1, 1, 2]); change > 0; change--) {
        const { path, node } = pick(rand, spots);
        const key = Array.isArray(node) ? int(rand, 0, node.length) : pick(rand, [...Object.keys(node), ...ODD_KEYS]);
        Object.defineProperty(node, key, { value: scriptValue(rand), enumerable: true, writable: true, configurable: true });
        where.push([...path, key].join('.'));
      }
      try {
        const result = await (chat ? engine.chat(request as never) : embeds ? engine.embed(request as never) : engine.complete(request as never));
        if (Symbol.asyncIterator in result) for await (const _ of result as AsyncIterable<unknown>);
        answered++;
      } catch (err) {
        const ok = err instanceof ApiError && (err.status === 400 || err.status === 404) && err.message.length < MESSAGE_LIMIT;
        if (!ok) failures.push(`#${i} [${where.join(', ')}]: ${err instanceof ApiError ? `${err.status} ${err.message.slice(0, 200)}` : String(err).slice(0, 300)}`);
      }
    }
    expect(failures).toEqual([]);
    expect(answered).toBeGreaterThan(0);
    expect(engine.requestsInFlight).toBe(0);
    expect((await engine.chat({ model: 'fake', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 })).choices).toHaveLength(1);
  });
});
