// The object users hold: a loaded model that answers completions, chat and embeddings, in-process or through any host.
//
// unload() may be called while other callers' requests still run on the model's GPU buffers (a
// stream another script is reading, say), so the engine counts the requests in flight and frees
// the buffers only after the last one ends; from unload() on, new requests are refused with 503.
// Hosts that take the engine as an ApiEngine (the fetch shim, the Node server) reach the model
// through `engine.generator`, which counts each session, generation and embed() it opens the same way.
import type { FinishReason, GenerationRequest, GenerationSession, ModelInfo, SessionRequest, TextGenerator } from '../engine/types.ts';
import { createChatCompletion, type ChatCompletion, type ChatCompletionChunk, type ChatCompletionRequest } from './chat.ts';
import { createCompletion, type CompletionChunk, type CompletionRequest, type CompletionResponse } from './completions.ts';
import { createEmbeddings, type EmbeddingRequest, type EmbeddingResponse } from './embeddings.ts';
import { ApiError, NO_RETRY } from './errors.ts';
import { errorResponse, handleApiRequest, type ApiEngine, type ApiHandlerOptions, type ApiRequest, type ApiResponse } from './handler.ts';

/** A generator that can also give its GPU memory back. */
export interface UnloadableGenerator extends TextGenerator {
  destroy?(): void;
  /** Resolves, with what the driver said, if the generator's GPU device is lost: it can run nothing more. */
  readonly deviceLost?: Promise<string>;
}

/** 503: a request to an engine whose GPU device was lost (a driver reset, a GPU process crash). */
export function deviceLost(id: string, message: string): ApiError {
  return new ApiError(503, `The GPU device of model '${id}' was lost (${message || 'no reason given'}); load the model again.`, {
    type: 'service_unavailable',
    code: 'device_lost',
    headers: NO_RETRY,
  });
}

/** 503: a request to an engine after its unload(). */
export function modelUnloaded(id: string): ApiError {
  return new ApiError(503, `The model '${id}' has been unloaded and takes no more requests.`, {
    type: 'service_unavailable',
    code: 'model_unloaded',
    headers: NO_RETRY,
  });
}

export class Engine implements ApiEngine {
  /**
   * The loaded generator as hosts use it: everything passes through to it, except that each
   * session or generation it opens counts as a request in flight, and none opens after unload().
   */
  readonly generator: UnloadableGenerator;
  private readonly loaded: UnloadableGenerator;
  private inFlight = 0;
  private unloaded: Promise<void> | null = null;
  private destroyLoaded: (() => void) | null = null;
  /** Set once the GPU device is lost: every request from then on gets the 503. */
  private lostMessage: string | null = null;

  constructor(generator: UnloadableGenerator) {
    this.loaded = generator;
    this.generator = countingGenerator(generator, () => this.admit());
    generator.deviceLost?.then((message) => (this.lostMessage = message));
  }

  get info(): ModelInfo {
    return this.loaded.info;
  }

  /** Requests running now (completions, streams not yet ended, and sessions opened through `generator`). */
  get requestsInFlight(): number {
    return this.inFlight;
  }

  /**
   * One completion, exactly as `POST /v1/completions` would answer it: the response object, or,
   * with `stream: true`, an async iterable of chunks. Invalid requests throw an `ApiError`; after
   * unload(), a 503 one. A stream counts as in flight until it ends, fails, or its consumer stops
   * (return(), as `break` in for-await does); one never read nor returned keeps the model loaded.
   */
  complete(request: CompletionRequest & { stream?: false | null }, options?: { signal?: AbortSignal }): Promise<CompletionResponse>;
  complete(request: CompletionRequest & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<CompletionChunk>>;
  complete(request: CompletionRequest, options?: { signal?: AbortSignal }): Promise<CompletionResponse | AsyncIterable<CompletionChunk>>;
  complete(request: CompletionRequest, options: { signal?: AbortSignal } = {}): Promise<CompletionResponse | AsyncIterable<CompletionChunk>> {
    return this.run(createCompletion, request, options);
  }

  /**
   * One chat completion, exactly as `POST /v1/chat/completions` would answer it (see complete()).
   */
  chat(request: ChatCompletionRequest & { stream?: false | null }, options?: { signal?: AbortSignal }): Promise<ChatCompletion>;
  chat(request: ChatCompletionRequest & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<ChatCompletionChunk>>;
  chat(request: ChatCompletionRequest, options?: { signal?: AbortSignal }): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
  chat(request: ChatCompletionRequest, options: { signal?: AbortSignal } = {}): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    return this.run(createChatCompletion, request, options);
  }

  /**
   * Embeddings, exactly as `POST /v1/embeddings` would answer them. Invalid requests (and a model
   * that cannot embed) throw an `ApiError`; after unload(), a 503 one. `signal` aborts it.
   */
  embed(request: EmbeddingRequest, options: { signal?: AbortSignal } = {}): Promise<EmbeddingResponse> {
    return this.run(createEmbeddings, request, options) as Promise<EmbeddingResponse>;
  }

  /** Runs one request counted in flight: until it returns, or, for a stream, until the stream ends. */
  private async run<R extends object, C>(
    create: (generator: TextGenerator, body: unknown, options: { signal?: AbortSignal }) => Promise<R | AsyncIterable<C>>,
    request: unknown,
    options: { signal?: AbortSignal },
  ): Promise<R | AsyncIterable<C>> {
    const release = this.admit();
    let result: R | AsyncIterable<C>;
    try {
      // The request as a whole is counted: its sessions use the generator directly.
      result = await create(this.loaded, request, options);
    } catch (err) {
      release();
      throw err;
    }
    if (isAsyncIterable<C>(result)) return releaseWhenDone(result, release);
    release();
    return result;
  }

  /**
   * Answers an HTTP-shaped request (`/v1/completions`, `/v1/models`) as every host does; after
   * unload(), a 503 response. A streamed body counts as in flight until it is read to the end or
   * its reader stops. `options`: as handleApiRequest's (`basePath`, `onError`).
   */
  async handle(request: ApiRequest, options: ApiHandlerOptions = {}): Promise<ApiResponse> {
    let release: () => void;
    try {
      release = this.admit();
    } catch (err) {
      return errorResponse(err);
    }
    let response: ApiResponse;
    try {
      response = await handleApiRequest({ generator: this.loaded }, request, options);
    } catch (err) {
      release();
      throw err;
    }
    if (typeof response.body === 'string') {
      release();
      return response;
    }
    return { ...response, body: releaseWhenDone(response.body, release) };
  }

  /**
   * Frees the model's GPU buffers once the requests in flight have ended; from now on new
   * requests get a 503. Resolves when the buffers are freed; calling it again returns the same
   * promise. It need not be awaited.
   */
  unload(): Promise<void> {
    if (!this.unloaded) {
      this.unloaded = new Promise<void>((resolve, reject) => {
        this.destroyLoaded = () => {
          try {
            this.loaded.destroy?.();
            resolve();
          } catch (err) {
            reject(err);
          }
        };
      });
      // Callers need not await it: a failure to free must not become an unhandled rejection.
      this.unloaded.catch(() => {});
      this.destroyIfIdle();
    }
    return this.unloaded;
  }

  /** Counts a request in; returns its release (idempotent). Throws the 503 after unload() or a lost device. */
  private admit(): () => void {
    if (this.unloaded) throw modelUnloaded(this.loaded.info.id);
    if (this.lostMessage !== null) throw deviceLost(this.loaded.info.id, this.lostMessage);
    this.inFlight++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight--;
      this.destroyIfIdle();
    };
  }

  private destroyIfIdle(): void {
    if (this.inFlight > 0 || !this.destroyLoaded) return;
    const destroy = this.destroyLoaded;
    this.destroyLoaded = null; // exactly once
    destroy();
  }
}

function isAsyncIterable<T>(value: unknown): value is AsyncIterable<T> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}

/**
 * `source` as an async iterable that calls `release` once when the iteration ends: done, thrown,
 * or stopped by return() (also before the first next(), which an async generator would skip).
 */
function releaseWhenDone<T>(source: AsyncIterable<T>, release: () => void): AsyncIterableIterator<T> {
  const iterator = source[Symbol.asyncIterator]();
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    release();
  };
  return {
    async next(): Promise<IteratorResult<T>> {
      if (ended) return { done: true, value: undefined };
      try {
        const step = await iterator.next();
        if (step.done) end();
        return step;
      } catch (err) {
        end();
        throw err;
      }
    },
    async return(value?: unknown): Promise<IteratorResult<T>> {
      try {
        if (!ended) await iterator.return?.();
      } finally {
        end();
      }
      return { done: true, value };
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}

/**
 * `generator` with each session (until close()), each generate() stream (from its first next()
 * until it ends) and each embed() (until it settles) counted through `admit`, which returns the release or throws to refuse. All else
 * (info, tokenizer, and whatever the concrete generator has, such as `model`) passes through.
 */
function countingGenerator<G extends TextGenerator>(generator: G, admit: () => () => void): G {
  async function openSession(request: SessionRequest): Promise<GenerationSession> {
    const release = admit();
    let session: GenerationSession;
    try {
      session = await generator.openSession(request);
    } catch (err) {
      release();
      throw err;
    }
    return {
      promptLogprobs: session.promptLogprobs,
      cachedTokens: session.cachedTokens,
      sequence: (options) => session.sequence(options),
      close() {
        try {
          session.close();
        } finally {
          release();
        }
      },
    };
  }
  async function* generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void> {
    const release = admit();
    try {
      return yield* generator.generate(request);
    } finally {
      release();
    }
  }
  async function embed(inputs: readonly (readonly number[])[], options?: { signal?: AbortSignal }): Promise<Float32Array[]> {
    const release = admit();
    try {
      return await generator.embed!(inputs, options);
    } finally {
      release();
    }
  }
  return new Proxy(generator, {
    get(target, property) {
      if (property === 'openSession') return openSession;
      if (property === 'generate') return generate;
      if (property === 'embed') return typeof target.embed === 'function' ? embed : undefined;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
