// The engine's side of a dedicated Web Worker: loads the model when the page says so, and answers
// each request the page forwards with the one API handler, streaming the events back over the
// request's own MessagePort. An abort from the page (its signal, a cancelled body) aborts the
// request here, so its generation stops at the next token and the GPU is free for the next one.
// Browser code: nothing here may import Node modules.
import type { Engine } from '../api/engine.ts';
import type { LoadProgress } from '../model/weights.ts';
import {
  deserializeError,
  serializeError,
  type HostCommand,
  type LoadReply,
  type RequestControl,
  type ResponseReply,
  type TransferableLoadOptions,
  type TransferableModelSource,
  unloadAndReply,
} from './protocol.ts';
import { trackRequests, type RequestStats, type TrackedEngine } from './tracked-engine.ts';

/** How the host loads a model: loadModel of the browser entry, in practice. */
export type ModelLoader = (
  source: TransferableModelSource,
  options: Omit<TransferableLoadOptions, 'reportProgress' | 'reportWarnings'> & {
    onProgress?: (progress: LoadProgress) => void;
    onWarning?: (message: string) => void;
  },
) => Promise<Engine>;

/** Where commands arrive: the worker's global scope. */
export interface CommandSource {
  addEventListener(type: 'message', listener: (event: MessageEvent) => void): void;
}

/**
 * Serves the commands of src/worker/protocol.ts that arrive at `scope`; one model at a time per
 * worker. After an unload, or a load that failed, the worker takes a new load.
 */
export function serveEngineHost(scope: CommandSource, load: ModelLoader): { readonly stats: Readonly<RequestStats> } {
  let engine: Promise<Engine> | null = null;
  // An unload's work (waiting for the requests in flight, then freeing the model): the next load
  // waits for it, so that two models never share the GPU.
  let unloading: Promise<void> = Promise.resolve();
  const noModel = Promise.reject(new Error('No model is loaded in this worker.'));
  noModel.catch(() => {});
  // Requests sent while the model loads wait for it; before any load they get a 503.
  const tracked = trackRequests(() => engine ?? noModel);

  scope.addEventListener('message', (event: MessageEvent) => {
    const command = event.data as HostCommand | { type: 'stats' };
    const port = event.ports[0];
    if (!port || typeof command !== 'object' || command === null) return;
    switch (command.type) {
      case 'load': {
        const reply = (message: LoadReply) => port.postMessage(message);
        if (engine) {
          const message = 'This worker has a model loaded already: unload it first, or create another worker.';
          reply({ type: 'failed', error: { name: 'Error', message } });
          port.close();
          return;
        }
        const { reportProgress, reportWarnings, ...options } = command.options;
        const loadOptions = {
          ...options,
          ...(reportProgress ? { onProgress: (progress: LoadProgress) => reply({ type: 'progress', progress }) } : {}),
          ...(reportWarnings ? { onWarning: (message: string) => reply({ type: 'warning', message }) } : {}),
        };
        const loading = unloading.then(() => load(command.source, loadOptions));
        engine = loading;
        loading.then(
          (loaded) => reply({ type: 'loaded', info: loaded.info }),
          (err: unknown) => {
            // Nothing is loaded: the worker takes the next load (the failure may have been a network error).
            if (engine === loading) engine = null;
            reply({ type: 'failed', error: serializeError(err) });
          },
        ).finally(() => port.close());
        return;
      }
      case 'request':
        void answer(tracked, command, port);
        return;
      case 'unload': {
        // From now on requests get the 503 of no model, and the worker takes a new load.
        const unloaded = engine;
        engine = null;
        const done = unloadAndReply(unloaded, port);
        unloading = done.catch(() => {});
        return;
      }
      case 'stats':
        port.postMessage({ ...tracked.stats });
        port.close();
        return;
    }
  });
  return tracked;
}

async function answer(
  engine: TrackedEngine,
  command: Extract<HostCommand, { type: 'request' }>,
  port: MessagePort,
): Promise<void> {
  const controller = new AbortController();
  port.onmessage = (event: MessageEvent<RequestControl>) => {
    if (event.data?.type === 'abort') controller.abort(deserializeError(event.data.reason));
  };
  const reply = (message: ResponseReply) => port.postMessage(message);
  try {
    const response = await engine.handle({ ...command.request, signal: controller.signal }, { basePath: command.basePath });
    const stream = typeof response.body === 'string' ? null : response.body;
    reply({ type: 'head', status: response.status, headers: response.headers, body: stream ? null : (response.body as string) });
    if (stream) {
      // The events go as they come; the page queues them (they are small) and may abort any time.
      for await (const data of stream) reply({ type: 'event', data });
      reply({ type: 'end' });
    }
  } catch (err) {
    reply({ type: 'failed', error: serializeError(err) });
  } finally {
    port.close();
  }
}
