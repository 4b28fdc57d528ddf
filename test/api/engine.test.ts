// Engine.unload() while requests are in flight: every request already running (a completion, a
// stream being read, an HTTP-shaped stream, a host's session through engine.generator) ends
// normally, new ones get the 503 `model_unloaded` error, and the generator's destroy() runs
// exactly once, after the last of them. With the fake generator, then once with stories260K.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Engine, type UnloadableGenerator } from '../../src/api/engine.ts';
import type { CompletionChunk } from '../../src/api/completions.ts';
import { ApiError } from '../../src/api/errors.ts';
import { answerApiRequest, handleApiRequest, type ApiResponse } from '../../src/api/handler.ts';
import { LlamaGenerator } from '../../src/engine/generator.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { trackRequests } from '../../src/worker/tracked-engine.ts';
import { FakeGenerator, type FakeGeneratorOptions } from '../helpers/fake-generator.ts';
import { STORIES_GGUF } from '../helpers/model-files.ts';

const SCRIPT = ' Once upon a time there was a little robot named Bob.';

/**
 * An engine on a fake generator whose destroy() is logged into `log` (with whatever else the test
 * logs): 'destroy', or 'destroy under an open session' if a session was still open on it.
 */
function fakeEngine(options: FakeGeneratorOptions = {}) {
  const log: string[] = [];
  const fake = new FakeGenerator({ script: SCRIPT, ...options });
  const generator = Object.assign(fake, {
    destroy: () => log.push(fake.active === 0 ? 'destroy' : 'destroy under an open session'),
  }) satisfies UnloadableGenerator;
  return { engine: new Engine(generator), generator, log };
}

const request = () => ({ model: 'fake-llama', prompt: 'Hello', max_tokens: 40, temperature: 0 });
const streamRequest = () => ({ ...request(), stream: true as const });

/** The 503 a request after unload() gets, in the OpenAI error shape. */
function expectUnloaded(err: unknown): void {
  expect(err).toBeInstanceOf(ApiError);
  const apiError = err as ApiError;
  expect(apiError.status).toBe(503);
  expect(apiError.toJSON()).toEqual({
    error: { message: "The model 'fake-llama' has been unloaded and takes no more requests.", type: 'service_unavailable', param: null, code: 'model_unloaded' },
  });
}

async function expect503Response(pending: Promise<ApiResponse>): Promise<void> {
  const response = await pending;
  expect(response.status).toBe(503);
  expect(response.headers['x-should-retry']).toBe('false');
  expect(JSON.parse(response.body as string).error).toMatchObject({ type: 'service_unavailable', code: 'model_unloaded' });
}

/** Settles on the next macrotask: what ran by then has run. */
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

function textOf(chunks: CompletionChunk[]): string {
  return chunks.map((c) => c.choices[0]?.text ?? '').join('');
}

describe('Engine.unload() with requests in flight (fake generator)', () => {
  it('a stream being read finishes normally; new requests get 503; destroy runs once, after the stream', async () => {
    const { engine, log } = fakeEngine();
    const stream = await engine.complete(streamRequest());
    const chunks: CompletionChunk[] = [];
    const iterator = stream[Symbol.asyncIterator]();
    for (let i = 0; i < 3; i++) chunks.push((await iterator.next()).value as CompletionChunk);
    expect(engine.requestsInFlight).toBe(1);

    let freed = false;
    const unloaded = engine.unload().then(() => (freed = true));
    await tick();
    expect(log).toEqual([]);
    expect(freed).toBe(false);
    // Refused while the stream still runs: complete(), handle() (any route) and hosts through engine.generator.
    await engine.complete(request()).then(() => expect.unreachable(), expectUnloaded);
    await engine.complete(streamRequest()).then(() => expect.unreachable(), expectUnloaded);
    await expect503Response(engine.handle({ method: 'POST', url: '/v1/completions', body: JSON.stringify(request()) }));
    await expect503Response(engine.handle({ method: 'GET', url: '/v1/models', body: null }));
    await expect503Response(handleApiRequest(engine, { method: 'POST', url: '/v1/completions', body: JSON.stringify(request()) }));
    expect(engine.unload()).toBe(engine.unload()); // the same promise

    for (;;) {
      const step = await iterator.next();
      if (step.done) break;
      chunks.push(step.value);
    }
    // The stream ran to its end on the model; only then was it freed, once.
    expect(textOf(chunks)).toBe(SCRIPT);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe('stop');
    expect(log).toEqual(['destroy']);
    await unloaded;
    expect(freed).toBe(true);
    expect(engine.requestsInFlight).toBe(0);
    await engine.complete(request()).then(() => expect.unreachable(), expectUnloaded);
    await engine.unload();
    expect(log).toEqual(['destroy']);
  });

  it('destroy waits for the stream to end, not merely for its last chunk', async () => {
    const { engine, log } = fakeEngine({ script: ' a b' });
    const stream = await engine.complete(streamRequest());
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    void engine.unload();
    while (!(await iterator.next()).done) {
      log.push('chunk');
      await tick();
    }
    log.push('done');
    expect(log.slice(-2)).toEqual(['destroy', 'done']);
    expect(log.indexOf('destroy')).toBe(log.lastIndexOf('chunk') + 1);
  });

  it('unload() with nothing in flight frees at once and resolves', async () => {
    const { engine, log } = fakeEngine();
    await engine.complete(request());
    const models = await engine.handle({ method: 'GET', url: '/api/llm/models', body: null }, { basePath: '/api/llm' });
    expect(JSON.parse(models.body as string).data[0].id).toBe('fake-llama');
    expect(engine.requestsInFlight).toBe(0);
    const unloaded = engine.unload();
    expect(log).toEqual(['destroy']);
    await expect(unloaded).resolves.toBeUndefined();
  });

  it('a completion (not streamed) in progress finishes; destroy follows it', async () => {
    const { engine, generator, log } = fakeEngine({ delayMs: 2 });
    const pending = engine.complete(request());
    void engine.unload(); // not awaited: allowed
    await tick();
    expect(generator.active).toBe(1);
    expect(log).toEqual([]);
    const response = await pending;
    expect(response.choices[0].text).toBe(SCRIPT);
    expect(log).toEqual(['destroy']);
  });

  it('a consumer that stops early (break) or aborts ends its request; destroy then runs', async () => {
    const early = fakeEngine();
    const stream = await early.engine.complete(streamRequest());
    void early.engine.unload();
    for await (const _ of stream) break;
    expect(early.log).toEqual(['destroy']);
    expect(early.generator.active).toBe(0);

    const aborted = fakeEngine({ delayMs: 1 });
    const controller = new AbortController();
    const chunks = await aborted.engine.complete(streamRequest(), { signal: controller.signal });
    const iterator = chunks[Symbol.asyncIterator]();
    await iterator.next();
    void aborted.engine.unload();
    controller.abort();
    await expect(iterator.next()).rejects.toMatchObject({ name: 'AbortError' });
    expect(aborted.log).toEqual(['destroy']);

    // Never read, only returned: nothing ran on the GPU, and the request ends.
    const unread = fakeEngine();
    const idle = await unread.engine.complete(streamRequest());
    void unread.engine.unload();
    expect(unread.log).toEqual([]);
    await idle[Symbol.asyncIterator]().return!();
    expect(unread.log).toEqual(['destroy']);
    expect(unread.generator.sessions).toHaveLength(0);
  });

  it('a generation that fails ends its request too', async () => {
    const { engine, log } = fakeEngine({ failAfter: 2 });
    const stream = await engine.complete(streamRequest());
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    void engine.unload();
    const drain = async () => {
      while (!(await iterator.next()).done);
    };
    await expect(drain()).rejects.toThrow(/fake GPU failure/);
    expect(log).toEqual(['destroy']);
  });

  it('handle(): a streamed response being read finishes with [DONE]; destroy after it', async () => {
    const { engine, log } = fakeEngine();
    const response = await engine.handle({ method: 'POST', url: '/v1/completions', body: JSON.stringify(streamRequest()) });
    expect(response.status).toBe(200);
    const body = (response.body as AsyncIterable<string>)[Symbol.asyncIterator]();
    let text = (await body.next()).value as string;
    void engine.unload();
    await tick();
    expect(log).toEqual([]);
    for (let step = await body.next(); !step.done; step = await body.next()) text += step.value;
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const streamed = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)).choices[0]?.text ?? '').join('');
    expect(streamed).toBe(SCRIPT);
    expect(log).toEqual(['destroy']);
  });

  it('hosts through engine.generator (the fetch shim, the Node server): their session holds the model', async () => {
    const { engine, generator, log } = fakeEngine();
    const response = await handleApiRequest(engine, { method: 'POST', url: '/v1/completions', body: JSON.stringify(streamRequest()) });
    expect(generator.active).toBe(1);
    expect(engine.requestsInFlight).toBe(1);
    void engine.unload();
    await expect503Response(handleApiRequest(engine, { method: 'POST', url: '/v1/completions', body: JSON.stringify(request()) }));
    expect(log).toEqual([]);
    let text = '';
    for await (const piece of response.body as AsyncIterable<string>) text += piece;
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(generator.active).toBe(0);
    expect(log).toEqual(['destroy']);
    // Everything else passes through to the generator.
    expect(engine.generator.tokenizer).toBe(generator.tokenizer);
    expect((engine.generator as FakeGenerator).sessions).toHaveLength(1);
  });

  it('hosts (answerApiRequest: the fetch shim, the Node server) hold the model for every prompt of a batch', async () => {
    const { engine, generator, log } = fakeEngine({ delayMs: 2 });
    const body = JSON.stringify({ ...request(), prompt: ['Hello', 'Hi there'], max_tokens: 10 });
    const pending = answerApiRequest(engine, { method: 'POST', url: '/v1/completions', body });
    while (generator.active === 0) await tick(); // the first prompt's session is running
    void engine.unload();
    const response = await pending;
    expect(response.status).toBe(200);
    expect(JSON.parse(response.body as string).choices.map((c: { index: number }) => c.index)).toEqual([0, 1]);
    expect(log).toEqual(['destroy']);
    await expect503Response(answerApiRequest(engine, { method: 'POST', url: '/v1/completions', body }));
  });

  it('worker and service-worker hosts (trackRequests) hold the model for every prompt of a batch too', async () => {
    const { engine, generator, log } = fakeEngine({ delayMs: 2 });
    const tracked = trackRequests(() => engine);
    const body = JSON.stringify({ ...request(), prompt: ['Hello', 'Hi there'], max_tokens: 10 });
    const pending = tracked.handle({ method: 'POST', url: '/v1/completions', body });
    while (generator.active === 0) await tick();
    void engine.unload();
    const response = await pending;
    expect(response.status).toBe(200);
    expect(JSON.parse(response.body as string).choices.map((c: { index: number }) => c.index)).toEqual([0, 1]);
    expect(log).toEqual(['destroy']);
    expect(tracked.stats).toEqual({ inFlight: 0, completed: 1, aborted: 0 });
  });

  it('generate() through engine.generator counts from its first next() to its end', async () => {
    const { engine, log } = fakeEngine();
    const tokens = engine.generator.generate({ promptTokens: [1, 5], maxTokens: 3, sampling: { temperature: 0, topP: 1 }, stopTokenIds: [] });
    expect(engine.requestsInFlight).toBe(0); // not started
    await tokens.next();
    expect(engine.requestsInFlight).toBe(1);
    void engine.unload();
    const more = engine.generator.generate({ promptTokens: [1], maxTokens: 1, sampling: { temperature: 0, topP: 1 }, stopTokenIds: [] });
    await more.next().then(() => expect.unreachable(), expectUnloaded);
    expect(log).toEqual([]);
    while (!(await tokens.next()).done);
    expect(log).toEqual(['destroy']);
  });
});

describe('Engine.unload() with a stream in flight on stories260K', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('the stream gives the same text as without unload; destroy runs once, after it; then 503', async () => {
    const destroy = vi.spyOn(LlamaGenerator.prototype, 'destroy');
    const engine = await loadModelFromPath(STORIES_GGUF, { id: 'stories', contextLength: 64 });
    const body = { model: 'stories', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true };
    const expected = await engine.complete(body);

    const stream = await engine.complete({ ...body, stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    const chunks: CompletionChunk[] = [(await iterator.next()).value as CompletionChunk];
    const unloaded = engine.unload();
    await tick();
    expect(destroy).not.toHaveBeenCalled();
    await engine.complete(body).then(() => expect.unreachable(), (err) => expect(err).toMatchObject({ status: 503, code: 'model_unloaded' }));
    for (let step = await iterator.next(); !step.done; step = await iterator.next()) chunks.push(step.value);
    expect(textOf(chunks)).toBe(expected.choices[0].text);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe('length');
    await unloaded;
    expect(destroy).toHaveBeenCalledTimes(1);
  });
});
