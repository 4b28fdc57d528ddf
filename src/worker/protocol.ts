// The messages between a page and an engine that lives in another realm (a dedicated Web Worker,
// or the service worker's load messages). Everything here is structured-clone data: requests and
// responses travel in their HTTP shape (ApiRequest / ApiResponse), so the worker answers with the
// very handler every other host uses, and the page side rebuilds nothing but the stream.
// Browser code: nothing here may import Node modules.
import { ApiError } from '../api/errors.ts';
import type { ModelInfo } from '../engine/types.ts';
import type { HubSource } from '../io/hub.ts';
import type { LoadProgress } from '../model/weights.ts';
import type { LoadOptions } from '../engine/load.ts';
import type { Engine } from '../api/engine.ts';

/** A model source that can cross to another realm: an absolute URL, a Hub repo, or File objects. */
export type TransferableModelSource = string | HubSource | File[];

/** LoadOptions without the callbacks (they become progress and warning messages). */
export type TransferableLoadOptions = Omit<LoadOptions, 'onProgress' | 'onWarning'> & {
  cache?: boolean;
  /** A Hugging Face token for the model's files (loadModel's); a service worker never stores it. */
  accessToken?: string;
  /** Whether the page listens for progress / warnings (so that the worker sends them). */
  reportProgress?: boolean;
  reportWarnings?: boolean;
};

/** An error as data: an ApiError keeps its status, type, param and code. */
export interface SerializedError {
  name: string;
  message: string;
  status?: number;
  type?: string;
  param?: string | null;
  code?: string | null;
}

/** Page → engine host, on the worker itself; each carries a MessagePort for its replies. */
export type HostCommand =
  | { type: 'load'; source: TransferableModelSource; options: TransferableLoadOptions }
  | { type: 'request'; request: { method: string; url: string; body: string | null }; basePath?: string }
  | { type: 'unload' };

/** Engine host → page, on a load's port; the service worker's 'loaded' says where it answers the API (`baseUrl`). */
export type LoadReply =
  | { type: 'progress'; progress: LoadProgress }
  | { type: 'warning'; message: string }
  | { type: 'loaded'; info: ModelInfo; baseUrl?: string }
  | { type: 'failed'; error: SerializedError };

/** Engine host → page, on a request's port: the head, then (for a stream) each event, then the end. */
export type ResponseReply =
  | { type: 'head'; status: number; headers: Record<string, string>; body: string | null }
  | { type: 'event'; data: string }
  | { type: 'end' }
  | { type: 'failed'; error: SerializedError };

/** Page → engine host, on a request's port. */
export type RequestControl = { type: 'abort'; reason: SerializedError };

/** Engine host → page, on an unload's port. */
export type UnloadReply = { type: 'unloaded' } | { type: 'failed'; error: SerializedError };

export function serializeError(error: unknown): SerializedError {
  if (error instanceof ApiError) {
    return { name: error.name, message: error.message, status: error.status, type: error.type, param: error.param, code: error.code };
  }
  if (error instanceof Error || error instanceof DOMException) return { name: error.name, message: error.message };
  return { name: 'Error', message: String(error) };
}

/** The error again, in this realm: an ApiError, an AbortError DOMException, or an Error. */
export function deserializeError(error: SerializedError): Error {
  if (error.status !== undefined) {
    return new ApiError(error.status, error.message, { type: error.type, param: error.param ?? null, code: error.code ?? null });
  }
  if (error.name === 'AbortError') return new DOMException(error.message, 'AbortError');
  const plain = new Error(error.message);
  plain.name = error.name;
  return plain;
}

/** Prefix of the messages the service worker answers (so they never mix with an app's own). */
export const SERVICE_WORKER_MESSAGE = 'webgpu-llama';

/**
 * Answers an 'unload' command on `port`: unloads the engine (if one was loaded; unload waits for
 * its requests in flight), replies 'unloaded' or 'failed', and closes the port.
 */
export async function unloadAndReply(engine: Engine | Promise<Engine> | null | undefined, port: MessagePort): Promise<void> {
  const reply = (message: UnloadReply) => port.postMessage(message);
  try {
    if (engine) await (await engine).unload();
    reply({ type: 'unloaded' });
  } catch (err) {
    reply({ type: 'failed', error: serializeError(err) });
  } finally {
    port.close();
  }
}
