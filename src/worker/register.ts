// registerServiceWorkerEngine: the page's side of the service-worker placement. It registers the
// application's module service worker (which calls serveEngineFromServiceWorker), waits until it
// controls the page, optionally tells it which model to load, and returns a RemoteEngine whose
// requests are plain fetches to the worker's base URL (/v1 by default) — answered by the service
// worker, as every other page's are.
// Browser code: nothing here may import Node modules.
import { routeNotFound } from '../api/errors.ts';
import { errorResponse, normalizeBasePath, type ApiRequest, type ApiResponse } from '../api/handler.ts';
import type { LoadOptions } from '../engine/load.ts';
import { isHubSource, type HubSource } from '../io/hub.ts';
import { deserializeError, SERVICE_WORKER_MESSAGE, type LoadReply, type UnloadReply } from './protocol.ts';
import { RemoteEngine } from './remote-engine.ts';
import type { ClaimReply, ServiceWorkerCommand } from './service-worker.ts';
import type { RequestStats } from './tracked-engine.ts';

export interface ServiceWorkerRegistrationOptions extends Omit<LoadOptions, 'onWarning'> {
  /**
   * A Hugging Face token for gated repos, as loadModel's. The worker uses it for this load only and
   * never stores it: a restarted worker reloads from the weight cache, where the first load put the
   * files (with `cache: false`, a restarted worker cannot load a gated model until a page sends the token again).
   */
  accessToken?: string;
  /**
   * The model the service worker should load: a URL (relative to the page) or a Hub repo. Omit it
   * when the worker script names its model itself (or with `?model=` in its URL); it is kept by
   * the worker across restarts. Local Files cannot be used here (the worker outlives the page).
   */
  source?: string | URL | HubSource;
  /** Browser weight cache for URL and repo sources (default true). */
  cache?: boolean;
  /** The registration's scope (default: the script's folder); the page must be inside it. */
  scope?: string;
}

/** How long an uncontrolled page waits for the worker to claim it (it takes a moment when it does). */
const CLAIM_TIMEOUT_MS = 10_000;

/**
 * Registers `scriptUrl` as a module service worker and resolves, once the model is loaded, with
 * a RemoteEngine (`info`, `complete()`, `handle()`, `unload()`). Every page and frame of the scope
 * then has `/v1/*` (the worker's base URL) answered by the worker: no installFetchShim anywhere.
 * Rejects, saying what to do, when the worker does not take control of the page.
 */
export async function registerServiceWorkerEngine(scriptUrl: string | URL, options: ServiceWorkerRegistrationOptions = {}): Promise<RemoteEngine> {
  const container = navigator.serviceWorker;
  if (!container) throw new Error('Service workers are not available here (an insecure origin, or a private mode that refuses them).');
  // The fetch of this moment: a shim installed later must not answer our own requests.
  const fetchDirect = globalThis.fetch.bind(globalThis);
  const { source, scope, onProgress, ...loadOptions } = options;
  const registration = await container.register(scriptUrl, { type: 'module', ...(scope ? { scope } : {}) });
  const worker = await activeWorker(registration);
  // Pages in the scope come under the worker's control (it claims them); one outside never would.
  if (location.href.startsWith(registration.scope)) await controlled(container, worker);

  const command: ServiceWorkerCommand =
    source === undefined
      ? { type: SERVICE_WORKER_MESSAGE, command: 'info' }
      : {
          type: SERVICE_WORKER_MESSAGE,
          command: 'load',
          source: isHubSource(source) ? { ...source } : new URL(String(source), location.href).href,
          options: { ...loadOptions, reportProgress: !!onProgress },
        };
  const loaded = await new Promise<Extract<LoadReply, { type: 'loaded' }>>((resolve, reject) => {
    const port = post(worker, command);
    port.onmessage = (event: MessageEvent<LoadReply>) => {
      const reply = event.data;
      if (reply.type === 'progress') onProgress?.(reply.progress);
      else if (reply.type === 'loaded') resolve(reply);
      else if (reply.type === 'failed') reject(deserializeError(reply.error));
    };
  });
  const { info } = loaded;
  // Where the worker answers the API (its serveEngineFromServiceWorker baseUrl).
  const apiBase = loaded.baseUrl ?? new URL('/v1', location.href).href;

  return new RemoteEngine(info, {
    transport: (request, basePath) => fetchTransport(fetchDirect, request, basePath, apiBase),
    unload: async () => {
      const reply = await ask<UnloadReply>(worker, { type: SERVICE_WORKER_MESSAGE, command: 'unload', id: info.id });
      if (reply.type === 'failed') throw deserializeError(reply.error);
    },
    stats: () => ask<RequestStats>(worker, { type: SERVICE_WORKER_MESSAGE, command: 'stats' }),
  });
}

/**
 * Resolves once the worker controls the page. The worker claims open pages when it activates; a
 * page it is already active for but does not control (one loaded with Shift+Reload, which passes
 * the service worker by) asks it to. Rejects, saying what to do, when the worker declines (its
 * claimClients is false) or does not take control in time (a script older than this code).
 */
async function controlled(container: ServiceWorkerContainer, worker: ServiceWorker): Promise<void> {
  if (container.controller) return;
  // Listening before asking: the claim's controllerchange may come before its reply.
  const changed = new Promise<void>((resolve) => container.addEventListener('controllerchange', () => resolve(), { once: true }));
  const claimed = ask<ClaimReply>(worker, { type: SERVICE_WORKER_MESSAGE, command: 'claim' }).then((reply) => {
    if (reply.type === 'failed') throw deserializeError(reply.error);
    return changed;
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    const message =
      `The service worker did not take control of this page within ${CLAIM_TIMEOUT_MS / 1000} s: reload the page ` +
      "(a page loads under the worker's control), or update the worker script to this version of webgpu-llama.";
    timer = setTimeout(() => reject(new Error(message)), CLAIM_TIMEOUT_MS);
  });
  try {
    await Promise.race([changed, claimed, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

async function activeWorker(registration: ServiceWorkerRegistration): Promise<ServiceWorker> {
  if (registration.active) return registration.active;
  const pending = registration.installing ?? registration.waiting;
  if (!pending) throw new Error('The service worker registration has no worker.');
  await new Promise<void>((resolve, reject) => {
    const onState = () => {
      if (pending.state === 'activated') resolve();
      else if (pending.state === 'redundant') reject(new Error('The service worker failed to install (see its console).'));
      else return;
      pending.removeEventListener('statechange', onState);
    };
    pending.addEventListener('statechange', onState);
  });
  return registration.active ?? pending;
}

function post(worker: ServiceWorker, command: ServiceWorkerCommand): MessagePort {
  const channel = new MessageChannel();
  worker.postMessage(command, [channel.port2]);
  return channel.port1;
}

function ask<T>(worker: ServiceWorker, command: ServiceWorkerCommand): Promise<T> {
  const port = post(worker, command);
  return new Promise<T>((resolve) => {
    port.onmessage = (event: MessageEvent<T>) => {
      port.close();
      resolve(event.data);
    };
  });
}

/**
 * The request as a real fetch to the worker's API (`apiBase`, where `basePath` was: the caller's
 * base path), its response read back into the handler's shape.
 */
async function fetchTransport(fetchDirect: typeof fetch, request: ApiRequest, basePath: string, apiBase: string): Promise<ApiResponse> {
  const url = new URL(request.url, location.href);
  const base = normalizeBasePath(basePath);
  // Not under the base path: the handler's 404, as every other host answers.
  if (url.pathname !== base && !url.pathname.startsWith(base + '/')) {
    return errorResponse(routeNotFound(request.method.toUpperCase(), url.pathname));
  }
  const response = await fetchDirect(new URL(apiBase + url.pathname.slice(base.length) + url.search), {
    method: request.method,
    ...(request.body !== null ? { body: request.body, headers: { 'content-type': 'application/json' } } : {}),
    ...(request.signal ? { signal: request.signal } : {}),
  });
  const headers = Object.fromEntries(response.headers.entries());
  const isStream = (response.headers.get('content-type') ?? '').startsWith('text/event-stream');
  if (!isStream || !response.body) return { status: response.status, headers, body: await response.text() };
  return { status: response.status, headers, body: serverSentEvents(response.body) };
}

/** One string per event ('data: ...\n\n'), as the handler yields them. */
async function* serverSentEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<string, void, void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        yield buffered.slice(0, end + 2);
        buffered = buffered.slice(end + 2);
      }
    }
    finished = true;
  } finally {
    // Left early: cancelling the body tells the service worker, which aborts the generation.
    if (!finished) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
