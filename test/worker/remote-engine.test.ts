// RemoteEngine (the page's handle on an engine in a worker) over a transport in the same realm:
// what it answers by itself, without the worker.
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/api/errors.ts';
import { Engine, modelUnloaded } from '../../src/api/engine.ts';
import { errorResponse, sseEvent, type ApiRequest, type ApiResponse } from '../../src/api/handler.ts';
import { installFetchShim } from '../../src/api/shim.ts';
import type { ModelInfo } from '../../src/engine/types.ts';
import { RemoteEngine } from '../../src/worker/remote-engine.ts';
import { chatGenerator } from '../helpers/chat-fakes.ts';
import { EmbeddingFakeGenerator } from '../helpers/embedding-fakes.ts';

const info: ModelInfo = { id: 'm', aliases: [], architecture: 'llama', contextLength: 64, vocabSize: 10, format: 'gguf', created: 0 };
const stats = async () => ({ inFlight: 0, completed: 0, aborted: 0 });

describe('RemoteEngine', () => {
  it('answers 503 model_unloaded after unload(), without the transport (a terminated worker drops messages)', async () => {
    const sent: ApiRequest[] = [];
    let unloads = 0;
    const remote = new RemoteEngine(info, {
      transport: (request) => {
        sent.push(request);
        return new Promise<ApiResponse>(() => {}); // a worker that never answers
      },
      unload: async () => void unloads++,
      stats,
    });
    await remote.unload();
    await remote.unload();
    expect(unloads).toBe(1);
    const response = await remote.handle({ method: 'POST', url: '/v1/completions', body: '{"model":"m"}' });
    expect(response.status).toBe(503);
    expect(JSON.parse(response.body as string).error).toMatchObject({ type: 'service_unavailable', code: 'model_unloaded' });
    await expect(remote.complete({ model: 'm', prompt: 'x' })).rejects.toMatchObject({ status: 503, code: 'model_unloaded' });
    expect(sent).toHaveLength(0);
  });

  it('refuses a cyclic request with the 400 an Engine gives it, without the transport', async () => {
    const sent: ApiRequest[] = [];
    const remote = new RemoteEngine(info, { transport: async (request) => (sent.push(request), errorResponse(new ApiError(500, 'unreachable'))), unload: async () => {}, stats });
    const message: Record<string, unknown> = { role: 'user', content: 'Hi' };
    message.self = message;
    const refusal = { status: 400, param: 'messages', code: 'nested_too_deeply' };
    await expect(remote.chat({ model: 'm', messages: [message as never] })).rejects.toMatchObject(refusal);
    await expect(new Engine(chatGenerator()).chat({ model: 'm', messages: [message as never] })).rejects.toMatchObject(refusal);
    expect(sent).toHaveLength(0);
  });

  it('tells onError about every 5xx the engine answers (installFetchShim passes it on), as the handler does', async () => {
    const failure = errorResponse(new ApiError(500, 'GPU out of memory', { type: 'server_error' }));
    const stream = (type: string) => ({
      status: 200,
      headers: { 'content-type': 'text/event-stream' },
      body: (async function* () {
        yield sseEvent({ id: 'c', object: 'text_completion', created: 0, model: 'm', choices: [{ text: 'a', index: 0, logprobs: null, finish_reason: null }] });
        yield sseEvent({ error: { message: `failed: ${type}`, type, param: null, code: null } });
        yield sseEvent('[DONE]');
      })(),
    });
    const answers: Record<string, () => ApiResponse> = {
      '/v1/models': () => failure,
      '/v1/completions': () => stream('server_error'),
      '/v1/completions?bad': () => stream('invalid_request_error'),
      '/v1/models/x': () => errorResponse(new ApiError(404, 'no such model', { code: 'model_not_found' })),
      '/v1/models/gone': () => errorResponse(modelUnloaded('m')), // another page unloaded it (a service worker)
    };
    const remote = new RemoteEngine(info, { transport: async (request) => answers[request.url]!(), unload: async () => {}, stats });
    const errors: ApiError[] = [];
    const page = { fetch: async () => new Response('network'), location: { href: 'https://page.example/' } } as unknown as typeof globalThis;
    installFetchShim(remote, { target: page, onError: (error) => errors.push(error) });

    expect((await page.fetch('/v1/models')).status).toBe(500);
    expect(await (await page.fetch('/v1/completions', { method: 'POST', body: '{}' })).text()).toContain('failed: server_error');
    await (await page.fetch('/v1/completions?bad', { method: 'POST', body: '{}' })).text(); // a 4xx event: not told
    expect((await page.fetch('/v1/models/x')).status).toBe(404); // not told
    expect((await page.fetch('/v1/models/gone')).status).toBe(503); // not told: as an unloaded Engine answers
    expect(errors.map((e) => [e.status, e.message])).toEqual([
      [500, 'GPU out of memory'],
      [500, 'failed: server_error'],
    ]);
    expect(errors[0]).toBeInstanceOf(ApiError);
  });

  it("gives a stream's error event the status its type implies", async () => {
    const cases: [Record<string, unknown>, number][] = [
      [{ type: 'server_error', code: null }, 500],
      [{ type: 'service_unavailable', code: 'model_unloaded' }, 503],
      [{ type: 'rate_limit_error', code: 'rate_limit_exceeded' }, 429],
      [{ type: 'invalid_request_error', code: 'aborted' }, 499],
      [{ type: 'invalid_request_error', code: 'invalid_value' }, 400],
    ];
    for (const [error, status] of cases) {
      const remote = new RemoteEngine(info, {
        transport: async () => ({
          status: 200,
          headers: { 'content-type': 'text/event-stream' },
          body: (async function* () {
            yield sseEvent({ error: { message: 'm', param: null, ...error } });
            yield sseEvent('[DONE]');
          })(),
        }),
        unload: async () => {},
        stats,
      });
      const chunks = await remote.complete({ model: 'm', prompt: 'x', stream: true });
      const caught = await (async () => {
        try {
          for await (const _ of chunks) { /* the error comes first */ }
        } catch (e) {
          return e;
        }
      })();
      expect(caught).toBeInstanceOf(ApiError);
      expect((caught as ApiError).status, JSON.stringify(error)).toBe(status);
    }
  });

  it('a stream that ends before [DONE] throws: the abort reason when the signal ended it', async () => {
    const chunk = sseEvent({ id: 'c', object: 'text_completion', created: 0, model: 'm', choices: [{ text: 'a', index: 0, logprobs: null, finish_reason: null }] });
    const remote = new RemoteEngine(info, {
      transport: async () => ({
        status: 200,
        headers: { 'content-type': 'text/event-stream' },
        body: (async function* () {
          yield chunk; // then the worker ends the events without [DONE]
        })(),
      }),
      unload: async () => {},
      stats,
    });
    const drain = async (chunks: AsyncIterable<unknown>) => {
      for await (const _ of chunks) { /* read to the end */ }
    };
    const controller = new AbortController();
    const aborted = await remote.complete({ model: 'm', prompt: 'x', stream: true }, { signal: controller.signal });
    controller.abort();
    await expect(drain(aborted)).rejects.toMatchObject({ name: 'AbortError' });
    await expect(drain(await remote.complete({ model: 'm', prompt: 'x', stream: true }))).rejects.toThrow(/before its \[DONE\]/);
  });
});

describe('RemoteEngine.chat', () => {
  it('answers chat as the engine in the other realm does, whole and streamed', async () => {
    const engine = new Engine(chatGenerator({ script: ' Sure.' }));
    const remote = new RemoteEngine(engine.info, { transport: (request) => engine.handle(request), unload: () => engine.unload(), stats });
    const request = { model: 'fake-llama', messages: [{ role: 'user' as const, content: 'Hi' }], seed: 3 };
    const [local, far] = [await engine.chat(request), await remote.chat(request)];
    expect(far.choices).toEqual(local.choices);
    let text = '';
    for await (const chunk of await remote.chat({ ...request, stream: true })) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe(' Sure.');
    await expect(remote.chat({ ...request, messages: [] })).rejects.toMatchObject({ status: 400, param: 'messages' });
  });
});

describe('RemoteEngine.embed', () => {
  it('answers embeddings as the engine in the other realm does, and throws its errors', async () => {
    const engine = new Engine(new EmbeddingFakeGenerator());
    const remote = new RemoteEngine(engine.info, { transport: (request) => engine.handle(request), unload: () => engine.unload(), stats });
    const request = { model: 'fake-llama', input: ['Hello world', 'The cat'] };
    const [local, far] = [await engine.embed(request), await remote.embed(request)];
    expect(far).toEqual(local);
    expect(far.data).toHaveLength(2);
    await expect(remote.embed({ ...request, input: [] })).rejects.toMatchObject({ status: 400, param: 'input' });
    await expect(remote.embed({ ...request, dimensions: 4 })).rejects.toMatchObject({ status: 400, param: 'dimensions' });
  });
});
