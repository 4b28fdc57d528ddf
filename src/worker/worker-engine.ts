// loadModelInWorker: the model loads and runs in a dedicated Web Worker, so a busy engine never
// blocks the page; the page holds a RemoteEngine whose requests cross over MessagePorts, one port
// per request, with the stream's events coming back one message each.
// Browser code: nothing here may import Node modules.
import type { ApiRequest, ApiResponse } from '../api/handler.ts';
import type { ModelFiles } from '../io/files.ts';
import { isHubSource, type HubSource } from '../io/hub.ts';
import type { LoadProgress } from '../model/weights.ts';
import type { LoadOptions } from '../engine/load.ts';
import {
  deserializeError,
  serializeError,
  type HostCommand,
  type LoadReply,
  type ResponseReply,
  type TransferableModelSource,
  type UnloadReply,
} from './protocol.ts';
import { RemoteEngine } from './remote-engine.ts';
import type { RequestStats } from './tracked-engine.ts';
import { startDefaultWorker, WORKER_OPTIONS } from './worker-url.ts';

export interface WorkerEngineOptions extends LoadOptions {
  /** A Hugging Face token for gated repos, as loadModel's (sent to the model's own URLs only). */
  accessToken?: string;
  /** Browser weight cache for URL and repo sources (default true), as loadModel's. */
  cache?: boolean;
  /**
   * The worker to load into: a Worker running webgpu-llama's worker script (`webgpu-llama/worker`,
   * dist/worker.js), or that script's URL. Default: dist/worker.js next to this module, started as
   * a module worker. The worker is terminated by unload() only when this function started it.
   */
  worker?: Worker | string | URL;
}

/** A model source a worker can receive: a URL (relative to the page), a Hub repo, or local Files. */
export type WorkerModelSource = string | URL | HubSource | Iterable<File>;

/**
 * Loads a model in a dedicated Web Worker on the worker's own WebGPU device. The promise resolves
 * once the model is loaded (or rejects with the load error) with a RemoteEngine: `info`,
 * `complete()`, `chat()`, `embed()`, `handle()`, `unload()`, and installFetchShim accepts it (or its promise) as it
 * accepts a main-thread Engine. `onProgress` and `onWarning` are called on the page.
 */
export async function loadModelInWorker(source: WorkerModelSource, options: WorkerEngineOptions = {}): Promise<RemoteEngine> {
  const { worker: workerOption, onProgress, onWarning, ...loadOptions } = options;
  const transferable = transferableSource(source);
  const given = typeof Worker !== 'undefined' && workerOption instanceof Worker ? workerOption : null;
  const ownsWorker = given === null;
  const worker = given ?? (workerOption === undefined ? startDefaultWorker() : new Worker(workerOption as string | URL, WORKER_OPTIONS));

  const info = await new Promise<RemoteEngine['info']>((resolve, reject) => {
    // A worker script that fails to load or throws reports here, not on a port.
    const onError = (event: ErrorEvent) => {
      event.preventDefault();
      reject(new Error(`The webgpu-llama worker failed: ${event.message || 'its script did not load'}.`));
    };
    worker.addEventListener('error', onError, { once: true });
    const port = send(worker, {
      type: 'load',
      source: transferable,
      options: { ...loadOptions, reportProgress: !!onProgress, reportWarnings: true },
    });
    port.onmessage = (event: MessageEvent<LoadReply>) => {
      const reply = event.data;
      if (reply.type === 'progress') onProgress?.(reply.progress as LoadProgress);
      else if (reply.type === 'warning') (onWarning ?? console.warn)(reply.message);
      else {
        worker.removeEventListener('error', onError);
        port.close();
        if (reply.type === 'loaded') resolve(reply.info);
        else reject(deserializeError(reply.error));
      }
    };
  }).catch((err: unknown) => {
    if (ownsWorker) worker.terminate();
    throw err;
  });

  // Set when unload() ended the worker: it drops every message from then on, so nothing may wait for a reply.
  let terminated = false;
  return new RemoteEngine(info, {
    transport: (request, basePath) => requestOverPort(worker, request, basePath),
    unload: async () => {
      const reply = await ask<UnloadReply>(worker, { type: 'unload' });
      if (ownsWorker) {
        worker.terminate();
        terminated = true;
      }
      if (reply.type === 'failed') throw deserializeError(reply.error);
    },
    stats: async () => {
      if (terminated) throw new Error('The model was unloaded and its worker ended: it has no request stats any more.');
      return ask<RequestStats>(worker, { type: 'stats' });
    },
  });
}

/** Posts a command with a fresh port for its replies; returns our end of it. */
function send(worker: Worker, command: HostCommand | { type: 'stats' }): MessagePort {
  const channel = new MessageChannel();
  worker.postMessage(command, [channel.port2]);
  return channel.port1;
}

function ask<T>(worker: Worker, command: HostCommand | { type: 'stats' }): Promise<T> {
  const port = send(worker, command);
  return new Promise<T>((resolve) => {
    port.onmessage = (event: MessageEvent<T>) => {
      port.close();
      resolve(event.data);
    };
  });
}

function transferableSource(source: WorkerModelSource): TransferableModelSource {
  if (typeof source === 'string' || source instanceof URL) {
    // The worker's base URL is its script's, not the page's: resolve against the page here.
    return new URL(String(source), globalThis.location?.href).href;
  }
  if (isHubSource(source)) return { ...source };
  if (typeof (source as unknown as ModelFiles).open === 'function') {
    throw new TypeError('loadModelInWorker takes a URL, a Hub repo or File objects; a ModelFiles object cannot cross to a worker.');
  }
  return Array.from(source as Iterable<File>);
}

/**
 * One request to the worker: resolves with the response head; a stream's events follow as an
 * async iterable. The request's signal, or leaving the iteration early, aborts it in the worker.
 */
function requestOverPort(worker: Worker, request: ApiRequest, basePath: string): Promise<ApiResponse> {
  const { signal } = request;
  signal?.throwIfAborted();
  const port = send(worker, { type: 'request', request: { method: request.method, url: request.url, body: request.body }, basePath });
  const events = new EventQueue();
  let settled = false;
  const abort = (reason: unknown) => {
    if (settled) return;
    settled = true;
    port.postMessage({ type: 'abort', reason: serializeError(reason) });
    port.close();
    events.end();
  };
  const onAbort = () => abort(signal!.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const finish = () => {
    settled = true;
    signal?.removeEventListener('abort', onAbort);
    port.close();
  };

  return new Promise<ApiResponse>((resolve, reject) => {
    // Aborted before the head: the request fails with the abort (after it, the stream just ends).
    const onEarlyAbort = () => reject(signal!.reason);
    signal?.addEventListener('abort', onEarlyAbort, { once: true });
    port.onmessage = (event: MessageEvent<ResponseReply>) => {
      const reply = event.data;
      switch (reply.type) {
        case 'head':
          signal?.removeEventListener('abort', onEarlyAbort);
          if (reply.body !== null) {
            finish();
            resolve({ status: reply.status, headers: reply.headers, body: reply.body });
          } else {
            resolve({ status: reply.status, headers: reply.headers, body: events.iterate(() => abort(new DOMException('The stream was closed', 'AbortError'))) });
          }
          return;
        case 'event':
          events.push(reply.data);
          return;
        case 'end':
          finish();
          events.end();
          return;
        case 'failed': {
          signal?.removeEventListener('abort', onEarlyAbort);
          finish();
          const error = deserializeError(reply.error);
          events.fail(error);
          reject(error);
          return;
        }
      }
    };
  });
}

/** Events that arrive before they are read wait here; the reader waits for the next one. */
class EventQueue {
  private readonly items: string[] = [];
  private done = false;
  private error: unknown = null;
  private wake: (() => void) | null = null;

  push(item: string): void {
    this.items.push(item);
    this.notify();
  }

  end(): void {
    this.done = true;
    this.notify();
  }

  fail(error: unknown): void {
    this.error = error;
    this.end();
  }

  private notify(): void {
    this.wake?.();
    this.wake = null;
  }

  /** The events in order; `onLeave` runs when the reader stops before the end. */
  async *iterate(onLeave: () => void): AsyncGenerator<string, void, void> {
    let finished = false;
    try {
      for (;;) {
        if (this.items.length > 0) {
          yield this.items.shift()!;
          continue;
        }
        if (this.error) throw this.error;
        if (this.done) break;
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
      finished = true;
    } finally {
      if (!finished) onLeave();
    }
  }
}
