// webgpu-llama/service-worker: the engine in a Service Worker, so that every page and frame of the
// origin (in the worker's scope) gets `/v1/*` answered without installing anything itself. A
// user's module service worker imports this and calls serveEngineFromServiceWorker():
//
//   // sw.js, registered with navigator.serviceWorker.register('/sw.js', { type: 'module' })
//   import { serveEngineFromServiceWorker } from './node_modules/webgpu-llama/dist/service-worker.js';
//   serveEngineFromServiceWorker({ source: '/models/stories260K/stories260K.gguf' });
//
// Requests are answered by the very fetch shim a page installs (installFetchShim on a private
// target), so streaming, aborts and errors are the same in every placement. A client that goes
// away mid-stream cancels the response body, which aborts the generation. The browser may stop an
// idle service worker; the model then loads again (from the weight cache) on the next request.
// After a page's unload() the worker answers 503 model_unloaded until a page loads again.
// Browser code: nothing here may import Node modules.
import { modelUnloaded, type Engine } from '../api/engine.ts';
import { errorResponse, normalizeBasePath, type RequestHandlingEngine } from '../api/handler.ts';
import { installFetchShim, isApiRequest } from '../api/shim.ts';
import { loadModel, type LoadModelOptions } from '../api/load-model.ts';
import type { HubSource } from '../io/hub.ts';
import type { LoadProgress } from '../model/weights.ts';
import {
  serializeError,
  SERVICE_WORKER_MESSAGE,
  unloadAndReply,
  type LoadReply,
  type SerializedError,
  type TransferableLoadOptions,
  type UnloadReply,
} from './protocol.ts';
import { provideJinjaRuntime } from '../tokenizer/chat-template.ts';
import * as jinjaRuntime from '../tokenizer/jinja-runtime.ts';
import { preloadStructuredOutput } from '../grammar/preload.ts';
import { trackRequests } from './tracked-engine.ts';

// A service worker may not import() (the HTML spec refuses it), so the chat template engine and the
// structured-output grammars (XGrammar), which pages load on the first request that needs them,
// come with the worker's own script.
provideJinjaRuntime(jinjaRuntime);
preloadStructuredOutput();

export interface ServiceWorkerEngineOptions extends Omit<LoadModelOptions, 'gpu' | 'onProgress'> {
  /**
   * The model: an absolute or worker-relative URL (a .gguf file or a Hugging Face folder), or a Hub
   * repo. Default: the `model` query parameter of the worker script's URL (with `id` for the id),
   * else the last source a page sent with registerServiceWorkerEngine (kept across restarts).
   */
  source?: string | HubSource;
  /** Where the API lives; default '/v1' on the worker's origin. */
  baseUrl?: string;
  /** Take control of open pages at once (skipWaiting + clients.claim); default true. */
  claimClients?: boolean;
}

/** A load a page asked for, as kept in Cache Storage so a restarted worker loads it again. */
interface LoadConfig {
  source: string | HubSource;
  options: TransferableLoadOptions;
}

/** The parts of ServiceWorkerGlobalScope used here (the DOM lib has no service worker types). */
interface ServiceWorkerScope {
  location: { href: string };
  skipWaiting(): Promise<void>;
  clients: { claim(): Promise<void> };
  addEventListener(type: 'install' | 'activate', listener: (event: ExtendableEvent) => void): void;
  addEventListener(type: 'fetch', listener: (event: FetchEvent) => void): void;
  addEventListener(type: 'message', listener: (event: ExtendableMessageEvent) => void): void;
}
interface ExtendableEvent extends Event {
  waitUntil(promise: Promise<unknown>): void;
}
interface FetchEvent extends ExtendableEvent {
  readonly request: Request;
  respondWith(response: Promise<Response>): void;
}
interface ExtendableMessageEvent extends ExtendableEvent {
  readonly data: unknown;
  readonly ports: readonly MessagePort[];
}

/** A message a page sends the service worker (see registerServiceWorkerEngine). */
export type ServiceWorkerCommand =
  | { type: typeof SERVICE_WORKER_MESSAGE; command: 'load'; source: string | HubSource; options: TransferableLoadOptions }
  /** `id`: the model's, for the 503 that later requests get. */
  | { type: typeof SERVICE_WORKER_MESSAGE; command: 'unload'; id: string }
  | { type: typeof SERVICE_WORKER_MESSAGE; command: 'info' | 'stats' | 'claim' };

/** The service worker → page, on a claim's port. */
export type ClaimReply = { type: 'claimed' } | { type: 'failed'; error: SerializedError };

const CONFIG_CACHE = 'webgpu-llama-service-worker-v1';
const CONFIG_KEY = 'https://webgpu-llama.invalid/service-worker/load-config';
const UNLOADED_KEY = 'https://webgpu-llama.invalid/service-worker/unloaded';

/** Installs the service worker's listeners: call once, at the top level of the worker script. */
export function serveEngineFromServiceWorker(options: ServiceWorkerEngineOptions = {}): void {
  const scope = globalThis as unknown as ServiceWorkerScope;
  const { source, baseUrl, claimClients = true, ...loadOptions } = options;
  const initial: LoadConfig | null = source !== undefined ? { source, options: loadOptions } : configFromScriptUrl(scope.location.href, loadOptions);

  let current: { key: string; engine: Promise<Engine> } | null = null;
  // An unload message's work (waiting for the requests in flight, then freeing the model): a load
  // after it waits for it, so that two models never share the GPU.
  let unloading: Promise<void> = Promise.resolve();
  let progressListeners: ((progress: LoadProgress) => void)[] = [];
  const load = (config: LoadConfig): Promise<Engine> => {
    const { reportProgress: _p, reportWarnings: _w, accessToken: _t, ...rest } = config.options;
    // The model and how it loads, not who listens or with which token: a page with onProgress and
    // one without, or a restarted worker reading the stored config (no token), ask for the same model.
    const key = JSON.stringify({ source: config.source, options: rest });
    if (current?.key === key) return current.engine;
    const previous = current?.engine;
    const unloaded = unloading;
    const engine = (async () => {
      // One model at a time: the previous one gives its GPU memory back first.
      await unloaded;
      if (previous) await previous.then((e) => e.unload(), () => {});
      const token = config.options.accessToken ? { accessToken: config.options.accessToken } : {};
      return loadModel(config.source, { ...rest, ...token, onProgress: (p) => progressListeners.forEach((listener) => listener(p)) });
    })();
    // A failed load is answered with 503 to the requests that waited for it; the next one loads
    // again (the failure may have been a network error).
    engine.catch(() => {
      if (current?.engine === engine) current = null;
    });
    current = { key, engine };
    return engine;
  };
  // The model for a request: the one loaded, else the configured one (loading it now).
  const engineNow = async (): Promise<Engine> => {
    if (current) return current.engine;
    const config = initial ?? (await readConfig());
    if (!config) throw new Error('The service worker has no model: give it a source (serveEngineFromServiceWorker, ?model=, or registerServiceWorkerEngine).');
    return load(config);
  };
  // The id of the model a page unloaded, until a page loads again (a load or info message): the
  // requests in between get 503 model_unloaded, as the page's RemoteEngine answers, instead of
  // loading the model again. Kept in Cache Storage, so that a restarted worker answers so too.
  let unloadedId: Promise<string | null> = readUnloaded();
  // The writes in order (an unload then a load: the delete after the put), each kept alive by the
  // event that made it: a worker stopped in between would otherwise keep the wrong state.
  let written: Promise<void> = Promise.resolve();
  const setUnloaded = (id: string | null, event: ExtendableEvent) => {
    unloadedId = Promise.resolve(id);
    written = written.then(() => writeUnloaded(id));
    event.waitUntil(written);
  };

  const tracked = trackRequests(async () => {
    const unloaded = current ? null : await unloadedId;
    return unloaded !== null ? unloadedEngine(unloaded) : engineNow();
  });
  // The page's own fetch shim, on a private target: it answers what is under the base URL.
  const shimTarget = { fetch: (input: RequestInfo | URL, init?: RequestInit) => fetch(input, init), location: scope.location };
  installFetchShim(tracked, { target: shimTarget as unknown as typeof globalThis, ...(baseUrl ? { baseUrl } : {}) });
  const base = new URL(baseUrl ?? '/v1', scope.location.href);
  const basePath = normalizeBasePath(base.pathname);

  scope.addEventListener('install', (event) => {
    if (claimClients) event.waitUntil(scope.skipWaiting());
  });
  scope.addEventListener('activate', (event) => {
    if (claimClients) event.waitUntil(scope.clients.claim());
  });
  scope.addEventListener('fetch', (event) => {
    const url = new URL(event.request.url);
    if (!isApiRequest(url, event.request.method, base.origin, basePath)) return;
    event.respondWith(shimTarget.fetch(event.request));
  });
  scope.addEventListener('message', (event) => {
    const message = event.data as ServiceWorkerCommand;
    const port = event.ports[0];
    if (!port || typeof message !== 'object' || message === null || message.type !== SERVICE_WORKER_MESSAGE) return;
    const reply = (data: LoadReply | UnloadReply | object) => port.postMessage(data);
    switch (message.command) {
      case 'load':
      case 'info': {
        setUnloaded(null, event);
        const onProgress = (progress: LoadProgress) => reply({ type: 'progress', progress });
        if (message.command === 'load' && message.options.reportProgress) progressListeners.push(onProgress);
        const engine =
          message.command === 'load'
            ? (() => {
                const config: LoadConfig = { source: message.source, options: message.options };
                void writeConfig(config);
                return load(config);
              })()
            : engineNow();
        event.waitUntil(
          engine
            .then(
              // Where the API is: the page's RemoteEngine sends its requests there.
              (loaded) => reply({ type: 'loaded', info: loaded.info, baseUrl: base.origin + basePath }),
              (err: unknown) => reply({ type: 'failed', error: serializeError(err) }),
            )
            .finally(() => {
              progressListeners = progressListeners.filter((listener) => listener !== onProgress);
              port.close();
            }),
        );
        return;
      }
      case 'stats':
        reply({ ...tracked.stats });
        port.close();
        return;
      case 'unload': {
        const engine = current?.engine;
        current = null;
        setUnloaded(message.id, event);
        const done = unloadAndReply(engine, port);
        unloading = done.catch(() => {});
        event.waitUntil(done);
        return;
      }
      case 'claim': {
        // A page in scope that the active worker does not control asks for it: one loaded past the
        // worker (Shift+Reload). With claimClients: false the worker leaves open pages alone.
        const claimReply = (data: ClaimReply) => port.postMessage(data);
        if (!claimClients) {
          const message =
            'The service worker does not control this page and leaves open pages alone (claimClients: false): ' +
            'reload the page to have it controlled.';
          claimReply({ type: 'failed', error: { name: 'Error', message } });
          port.close();
          return;
        }
        event.waitUntil(
          scope.clients
            .claim()
            .then(
              () => claimReply({ type: 'claimed' }),
              (err: unknown) => claimReply({ type: 'failed', error: serializeError(err) }),
            )
            .finally(() => port.close()),
        );
        return;
      }
    }
  });
}

/** What answers requests after an unload: every one gets the 503 an unloaded Engine answers. */
function unloadedEngine(id: string): RequestHandlingEngine {
  return { handle: async () => errorResponse(modelUnloaded(id)) };
}

/** `sw.js?model=URL&id=NAME`: the model named at registration. */
function configFromScriptUrl(href: string, options: TransferableLoadOptions): LoadConfig | null {
  const params = new URL(href).searchParams;
  const model = params.get('model');
  if (!model) return null;
  const id = params.get('id');
  return { source: new URL(model, href).href, options: { ...options, ...(id ? { id } : {}) } };
}

async function readConfig(): Promise<LoadConfig | null> {
  try {
    const response = await (await caches.open(CONFIG_CACHE)).match(CONFIG_KEY);
    return response ? ((await response.json()) as LoadConfig) : null;
  } catch {
    return null; // no Cache Storage: only the configured source
  }
}

async function readUnloaded(): Promise<string | null> {
  try {
    const response = await (await caches.open(CONFIG_CACHE)).match(UNLOADED_KEY);
    return response ? ((await response.json()) as { id: string }).id : null;
  } catch {
    return null; // no Cache Storage: a restarted worker loads its model again
  }
}

/** Keeps the id of the model a page unloaded; null: a page loaded again. */
async function writeUnloaded(id: string | null): Promise<void> {
  try {
    const cache = await caches.open(CONFIG_CACHE);
    if (id === null) await cache.delete(UNLOADED_KEY);
    else await cache.put(UNLOADED_KEY, new Response(JSON.stringify({ id }), { headers: { 'content-type': 'application/json' } }));
  } catch {
    // not kept: a restarted worker loads its model again
  }
}

async function writeConfig(config: LoadConfig): Promise<void> {
  try {
    // The access token is not kept: Cache Storage is readable by every script of the origin.
    const { reportProgress: _p, reportWarnings: _w, accessToken: _t, ...options } = config.options;
    const body = JSON.stringify({ source: config.source, options });
    await (await caches.open(CONFIG_CACHE)).put(CONFIG_KEY, new Response(body, { headers: { 'content-type': 'application/json' } }));
  } catch {
    // not kept: a restarted worker falls back to its configured source
  }
}
