// The service-worker placement in one realm: registerServiceWorkerEngine (the page's side) and
// serveEngineFromServiceWorker (the worker's), joined by real MessagePorts and by a stand-in
// browser that routes a controlled page's fetches to the worker's fetch listener. The model is a
// fake; loadModel is mocked. What the browser test cannot easily show: a page the active worker
// does not control, a worker serving another base URL, and what an unload leaves behind across
// a worker restart.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Engine } from '../../src/api/engine.ts';
import { installFetchShim } from '../../src/api/shim.ts';
import { registerServiceWorkerEngine } from '../../src/worker/register.ts';
import { serveEngineFromServiceWorker, type ServiceWorkerEngineOptions } from '../../src/worker/service-worker.ts';
import { FakeGenerator } from '../helpers/fake-generator.ts';

const loads = vi.hoisted(() => ({ count: 0, tokens: [] as (string | undefined)[] }));
vi.mock('../../src/api/load-model.ts', () => ({
  loadModel: async (_source: unknown, options: { accessToken?: string } = {}) => {
    loads.count++;
    loads.tokens.push(options.accessToken);
    return new Engine(new FakeGenerator({ script: ' Once upon a time there was a robot.' }));
  },
}));

const ORIGIN = 'https://app.example';
const PAGE = `${ORIGIN}/app/page.html`;
const SOURCE = '/models/m.gguf';
const request = { model: 'fake-llama', prompt: 'Hello', max_tokens: 4, temperature: 0 };

type Listener = (event: any) => void;

/** Cache Storage in memory, shared by the worker's restarts (as the browser's outlives them). */
function memoryCaches() {
  const stored = new Map<string, string>();
  const cache = {
    match: async (key: string) => (stored.has(key) ? new Response(stored.get(key)) : undefined),
    put: async (key: string, response: Response) => void stored.set(key, await response.text()),
    delete: async (key: string) => stored.delete(key),
  };
  return { open: async () => cache, stored };
}

/**
 * The browser: one origin, one registration whose worker runs serveEngineFromServiceWorker with
 * `options` (start() again: the browser stopped the worker and starts it anew), and the page's
 * navigator.serviceWorker. `controlled`: whether the page loaded under the worker's control.
 */
function browser(options: ServiceWorkerEngineOptions, { controlled = false } = {}) {
  let listeners: Record<string, Listener> = {};
  const container = Object.assign(new EventTarget(), { controller: null as object | null });
  const worker = {
    postMessage(data: unknown, transfer: MessagePort[] = []) {
      const event = { data: structuredClone(data), ports: transfer, waitUntil: () => {} };
      setTimeout(() => listeners.message?.(event), 0);
    },
  };
  const claims = { count: 0 };
  const start = () => {
    listeners = {};
    // The worker's global scope, while it starts: its own location (the page's comes back after).
    vi.stubGlobal('location', { href: `${ORIGIN}/sw.js` });
    vi.stubGlobal('addEventListener', (type: string, listener: Listener) => (listeners[type] = listener));
    vi.stubGlobal('skipWaiting', async () => {});
    vi.stubGlobal('clients', {
      claim: async () => {
        claims.count++;
        if (container.controller) return;
        container.controller = worker;
        container.dispatchEvent(new Event('controllerchange'));
      },
    });
    serveEngineFromServiceWorker(options);
    vi.stubGlobal('location', { href: PAGE });
  };
  start();
  if (controlled) container.controller = worker;
  // Active already: no activate event (and so no claim) comes with this registration.
  const registration = { scope: `${ORIGIN}/`, active: worker, installing: null, waiting: null };
  vi.stubGlobal('navigator', { serviceWorker: Object.assign(container, { register: async () => registration }) });
  /** The page's fetch: a controlled page's requests go to the worker's fetch listener, unless it leaves them. */
  const fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(new URL(String(input instanceof Request ? input.url : input), PAGE), init);
    if (container.controller) {
      let response: Promise<Response> | null = null;
      listeners.fetch?.({ request, respondWith: (answer: Promise<Response>) => (response = answer), waitUntil: () => {} });
      if (response) return response;
    }
    return new Response('Not Found (the network)', { status: 404 });
  };
  vi.stubGlobal('fetch', fetch);
  return { fetch, start, claims, container };
}

/** The promise's outcome, or 'pending' if it has not settled within `ms`. */
async function settled<T>(promise: Promise<T>, ms = 1000): Promise<{ value: T } | { error: unknown } | 'pending'> {
  const timeout = new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms));
  return Promise.race([promise.then((value) => ({ value }), (error: unknown) => ({ error })), timeout]);
}

let storage: ReturnType<typeof memoryCaches>;
beforeEach(() => {
  loads.count = 0;
  loads.tokens = [];
  storage = memoryCaches();
  vi.stubGlobal('caches', storage);
});
afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('registerServiceWorkerEngine with serveEngineFromServiceWorker', () => {
  it('a page the active worker does not control (a hard reload) asks it to claim the page', async () => {
    const { claims, container } = browser({});
    const outcome = await settled(registerServiceWorkerEngine('/sw.js', { source: SOURCE }));
    expect(outcome).toMatchObject({ value: { info: { id: 'fake-llama' } } });
    expect(claims.count).toBe(1);
    expect(container.controller).not.toBeNull();
  });

  it('with claimClients: false, an uncontrolled page is refused with what to do, not left waiting', async () => {
    const { claims } = browser({ claimClients: false });
    const outcome = await settled(registerServiceWorkerEngine('/sw.js', { source: SOURCE }));
    expect(outcome).not.toBe('pending');
    expect((outcome as { error: Error }).error.message).toMatch(/claimClients: false.*reload the page/);
    expect(claims.count).toBe(0);
  });

  it('a worker that never claims the page: the registration rejects after a while, saying why', async () => {
    browser({});
    vi.stubGlobal('clients', { claim: () => new Promise(() => {}) }); // a claim that never ends
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    let outcome: unknown = 'pending';
    registerServiceWorkerEngine('/sw.js', { source: SOURCE }).then(
      () => (outcome = 'resolved'),
      (error: unknown) => (outcome = error),
    );
    await vi.advanceTimersByTimeAsync(10_000);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/did not take control of this page within 10 s: reload the page/);
  });

  it("complete() and handle() reach a worker serving another base URL (its baseUrl comes with the model's info)", async () => {
    const { fetch } = browser({ baseUrl: '/api/v1' }, { controlled: true });
    const remote = await registerServiceWorkerEngine('/sw.js', { source: SOURCE });
    expect((await fetch('/v1/models')).status).toBe(404); // the worker does not answer /v1
    expect((await remote.complete(request)).choices[0]!.text.length).toBeGreaterThan(0);
    const models = await remote.handle({ method: 'GET', url: '/v1/models', body: null });
    expect(models.status).toBe(200);
    expect(JSON.parse(models.body as string).data[0].id).toBe('fake-llama');
    // A shim on the RemoteEngine at a base URL of its own: its requests reach the worker's.
    const page = { fetch, location: { href: PAGE } } as unknown as typeof globalThis;
    installFetchShim(remote, { target: page, baseUrl: '/shim/v1' });
    expect((await page.fetch('/shim/v1/models')).status).toBe(200);
    expect((await page.fetch('/shim/v1/nothing-here')).status).toBe(404);
  });

  it('after unload() the worker answers 503 model_unloaded, restarted too, until a page registers again', async () => {
    const { fetch, start } = browser({}, { controlled: true });
    const remote = await registerServiceWorkerEngine('/sw.js', { source: SOURCE });
    expect((await fetch('/v1/models')).status).toBe(200);
    await remote.unload();
    const expectUnloaded = async () => {
      const response = await fetch('/v1/completions', { method: 'POST', body: JSON.stringify(request) });
      expect(response.status).toBe(503);
      expect((await response.json()).error).toMatchObject({ type: 'service_unavailable', code: 'model_unloaded' });
    };
    await expectUnloaded();
    await expect(remote.complete(request)).rejects.toMatchObject({ status: 503, code: 'model_unloaded' });
    expect(loads.count).toBe(1); // not loaded again

    start(); // the browser stopped the idle worker; a request starts it again
    await expectUnloaded();
    expect(loads.count).toBe(1);

    // A page registers again (the worker keeps the source it was given): the model loads again.
    const again = await registerServiceWorkerEngine('/sw.js');
    expect(again.info.id).toBe('fake-llama');
    expect(loads.count).toBe(2);
    expect((await fetch('/v1/models')).status).toBe(200);
  });

  it('uses a page\'s access token for its load and stores it nowhere', async () => {
    const { start } = browser({}, { controlled: true });
    await registerServiceWorkerEngine('/sw.js', { source: SOURCE, accessToken: 'hf_secret' });
    expect(loads.tokens).toEqual(['hf_secret']);
    await vi.waitFor(() => expect(storage.stored.size).toBeGreaterThan(0));
    for (const value of storage.stored.values()) expect(value).not.toContain('hf_secret');
    start(); // restarted, the worker loads from what it kept: without the token
    await registerServiceWorkerEngine('/sw.js');
    expect(loads.tokens.at(-1)).toBeUndefined();
    // A page that sends its token again asks for the same model: nothing loads again.
    const count = loads.count;
    await registerServiceWorkerEngine('/sw.js', { source: SOURCE, accessToken: 'hf_secret' });
    expect(loads.count).toBe(count);
  });
});
