// GET /health (src/node/health.ts) over real HTTP: 503 while a model loads or after its load
// failed, 200 once every model is loaded, with or without an API key.
import { afterEach, describe, expect, it } from 'vitest';
import type { ApiEngine } from '../../src/api/handler.ts';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { fakeEngine } from '../helpers/fake-generator.ts';

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

function deferred() {
  let resolve!: (engine: ApiEngine) => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<ApiEngine>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

describe('GET /health', () => {
  it('answers 503 while the model loads, then 200', async () => {
    const load = deferred();
    server = await startServer(load.promise, { port: 0, log: () => {} });
    const loading = await fetch(`${server.url}/health`);
    expect(loading.status).toBe(503);
    expect((await loading.json()).error).toMatchObject({ code: 'model_loading', type: 'service_unavailable' });
    load.resolve(fakeEngine());
    await load.promise;
    const ready = await fetch(`${server.url}/health`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ok' });
    const head = await fetch(`${server.url}/health`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  it('answers 503 once a load failed (the reason stays in the server log), and waits for every model', async () => {
    const failing = deferred();
    const slow = deferred();
    server = await startServer([fakeEngine(), slow.promise, failing.promise], { port: 0, log: () => {} });
    expect((await fetch(`${server.url}/health`)).status).toBe(503);
    failing.reject(new Error('unsupported architecture'));
    await failing.promise.catch(() => {});
    const failed = await fetch(`${server.url}/health`);
    expect(failed.status).toBe(503);
    const body = await failed.json();
    expect(body.error).toMatchObject({ code: 'model_load_failed', message: 'A model failed to load; the server log says why.' });
    expect(JSON.stringify(body)).not.toContain('unsupported architecture');
  });

  it('needs no key, where every other route does', async () => {
    server = await startServer(fakeEngine(), { port: 0, log: () => {}, apiKeys: ['sk-one'] });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await fetch(`${server.url}/health/`)).status).toBe(200);
    expect((await fetch(`${server.url}/health`, { method: 'POST' })).status).toBe(401);
    expect((await fetch(`${server.url}/v1/models`)).status).toBe(401);
  });
});
