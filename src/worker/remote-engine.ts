// The page's handle on an engine that runs in another realm (a dedicated Web Worker, or the
// service worker): the same surface as Engine — `info`, `complete()`, `chat()`, `embed()`, `handle()`,
// `unload()` — over a transport that carries one HTTP-shaped request and brings its response back.
// installFetchShim accepts it (it has `handle` and no generator). complete() is handle() on
// POST /v1/completions, read back into objects, so every placement validates, streams and fails
// exactly as the handler does.
// Browser code: nothing here may import Node modules.
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionRequest } from '../api/chat.ts';
import type { CompletionChunk, CompletionRequest, CompletionResponse } from '../api/completions.ts';
import type { EmbeddingRequest, EmbeddingResponse } from '../api/embeddings.ts';
import { ApiError, type ApiErrorBody } from '../api/errors.ts';
import { modelUnloaded } from '../api/engine.ts';
import { DEFAULT_BASE_PATH, errorResponse, sseData, type ApiHandlerOptions, type ApiRequest, type ApiResponse } from '../api/handler.ts';
import { requestData } from '../api/request-data.ts';
import type { RequestHandlingEngine } from '../api/shim.ts';
import type { ModelInfo } from '../engine/types.ts';
import type { RequestStats } from './tracked-engine.ts';

/** Carries one request to the engine and its response back; `signal` aborts it there. */
export type RequestTransport = (request: ApiRequest, basePath: string) => Promise<ApiResponse>;

export interface RemoteEngineHooks {
  transport: RequestTransport;
  unload: () => Promise<void>;
  stats: () => Promise<RequestStats>;
}

export class RemoteEngine implements RequestHandlingEngine {
  /** Set by unload(): the realm may be gone (a terminated worker drops messages), so answer here. */
  private unloading: Promise<void> | null = null;

  constructor(
    /** The loaded model, as the engine's host reported it. */
    readonly info: ModelInfo,
    private readonly hooks: RemoteEngineHooks,
  ) {}

  /**
   * One completion, exactly as `POST /v1/completions` would answer it: the response object, or,
   * with `stream: true`, an async iterable of chunks. Errors throw an `ApiError` (status, type,
   * param, code as the response body has them). `signal` aborts the generation in the worker.
   */
  complete(request: CompletionRequest & { stream?: false | null }, options?: { signal?: AbortSignal }): Promise<CompletionResponse>;
  complete(request: CompletionRequest & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<CompletionChunk>>;
  complete(request: CompletionRequest, options?: { signal?: AbortSignal }): Promise<CompletionResponse | AsyncIterable<CompletionChunk>>;
  complete(request: CompletionRequest, options: { signal?: AbortSignal } = {}): Promise<CompletionResponse | AsyncIterable<CompletionChunk>> {
    return this.post('/completions', request, options.signal);
  }

  /**
   * One chat completion, exactly as `POST /v1/chat/completions` would answer it (see complete()).
   */
  chat(request: ChatCompletionRequest & { stream?: false | null }, options?: { signal?: AbortSignal }): Promise<ChatCompletion>;
  chat(request: ChatCompletionRequest & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<ChatCompletionChunk>>;
  chat(request: ChatCompletionRequest, options?: { signal?: AbortSignal }): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
  chat(request: ChatCompletionRequest, options: { signal?: AbortSignal } = {}): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    return this.post('/chat/completions', request, options.signal);
  }

  /**
   * Embeddings, exactly as `POST /v1/embeddings` would answer them; errors throw an `ApiError`.
   * `signal` aborts the request in the worker.
   */
  embed(request: EmbeddingRequest, options: { signal?: AbortSignal } = {}): Promise<EmbeddingResponse> {
    return this.post<EmbeddingResponse, never>('/embeddings', request, options.signal) as Promise<EmbeddingResponse>;
  }

  /**
   * POSTs a request to a route, read back as the response object, or the chunks of a stream. The
   * request is sent as requestData's copy: one that is cyclic, nested too deeply or unreadable is
   * the engine's 400 here, as JSON.stringify would throw on it (or recurse past the stack).
   */
  private async post<T, C>(route: string, request: unknown, signal: AbortSignal | undefined): Promise<T | AsyncIterable<C>> {
    const response = await this.handle({
      method: 'POST',
      url: `${DEFAULT_BASE_PATH}${route}`,
      body: JSON.stringify(requestData(request)),
      ...(signal ? { signal } : {}),
    });
    if (typeof response.body !== 'string') return chunksOf<C>(response.body, signal);
    if (response.status !== 200) throw errorOf(response.status, response.body, response.headers);
    return JSON.parse(response.body) as T;
  }

  /**
   * Answers an HTTP-shaped request (`/v1/completions`, `/v1/chat/completions`, `/v1/models`, ...) as every host does.
   * `onError` is told about every 5xx the engine answers, a stream's error events included (the
   * handler that made them runs in the other realm, where nobody listens).
   */
  async handle(request: ApiRequest, options: ApiHandlerOptions = {}): Promise<ApiResponse> {
    // As an unloaded Engine answers: a 503 for the caller, not a server error to report.
    if (this.unloading) return errorResponse(modelUnloaded(this.info.id));
    const response = await this.hooks.transport(request, options.basePath ?? DEFAULT_BASE_PATH);
    const { onError } = options;
    if (!onError) return response;
    if (typeof response.body !== 'string') return { ...response, body: reportingErrors(response.body, onError) };
    if (response.status >= 500) {
      const error = errorOf(response.status, response.body, response.headers);
      // As an in-page Engine: a model unloaded (by this page or, for a service worker, another) is not a server error.
      if (error.code !== 'model_unloaded') onError(error);
    }
    return response;
  }

  /**
   * Frees the model's GPU memory (after the requests in flight); the engine cannot be used
   * afterwards: later requests get 503 model_unloaded, as an unloaded Engine answers.
   */
  unload(): Promise<void> {
    this.unloading ??= this.hooks.unload();
    return this.unloading;
  }

  /** Requests in flight, completed and aborted, as the engine's host counts them (diagnostics, tests). */
  requestStats(): Promise<RequestStats> {
    return this.hooks.stats();
  }
}

function errorOf(status: number, body: string, headers: Record<string, string> = {}): ApiError {
  let parsed: Partial<ApiErrorBody> = {};
  try {
    parsed = JSON.parse(body) as ApiErrorBody;
  } catch {
    // not JSON: the text is the message
  }
  const error = parsed.error;
  return new ApiError(status, error?.message ?? body, {
    type: error?.type,
    param: error?.param ?? null,
    code: error?.code ?? null,
    headers,
  });
}

/** The HTTP status of an error that came as a stream's event (the event carries none): by its type. */
function streamErrorStatus(error: Partial<ApiErrorBody['error']>): number {
  switch (error.type) {
    case 'server_error':
      return 500;
    case 'service_unavailable':
      return 503;
    case 'rate_limit_error':
      return 429;
    default:
      return error.code === 'aborted' ? 499 : 400;
  }
}

/** The events as they come, telling `onError` about each 5xx error event (as the handler's stream does). */
async function* reportingErrors(events: AsyncIterable<string>, onError: (error: ApiError) => void): AsyncGenerator<string, void, void> {
  for await (const event of events) {
    // Only an error event starts so: chunks start with their id.
    if (event.startsWith('data: {"error"')) {
      const body = event.slice('data: '.length).trim();
      const status = streamErrorStatus((JSON.parse(body) as ApiErrorBody).error);
      if (status >= 500) onError(errorOf(status, body));
    }
    yield event;
  }
}

/**
 * The chunks of a server-sent event stream; an error event throws, with the status its type
 * implies. A stream that ends before its [DONE] throws too: the abort's reason when `signal`
 * ended it (as Engine.complete's stream does), else an error saying so.
 */
async function* chunksOf<C>(events: AsyncIterable<string>, signal: AbortSignal | undefined): AsyncGenerator<C, void, void> {
  for await (const data of sseData(events)) {
    if (data === '[DONE]') return;
    const value = JSON.parse(data) as C | ApiErrorBody;
    if (typeof value === 'object' && value !== null && 'error' in value) throw errorOf(streamErrorStatus(value.error), JSON.stringify(value));
    yield value as C;
  }
  if (signal?.aborted) throw signal.reason;
  throw new Error('the stream ended before its [DONE] event');
}
