// The object users hold: a loaded model that answers completions, in-process or through any host.
import type { ModelInfo, TextGenerator } from '../engine/types.ts';
import { createCompletion, type CompletionChunk, type CompletionRequest, type CompletionResponse } from './completions.ts';
import { handleApiRequest, type ApiEngine, type ApiRequest, type ApiResponse } from './handler.ts';

/** A generator that can also give its GPU memory back. */
export interface UnloadableGenerator extends TextGenerator {
  destroy?(): void;
}

export class Engine implements ApiEngine {
  constructor(readonly generator: UnloadableGenerator) {}

  get info(): ModelInfo {
    return this.generator.info;
  }

  /**
   * One completion, exactly as `POST /v1/completions` would answer it: the response object, or,
   * with `stream: true`, an async iterable of chunks. Invalid requests throw an `ApiError`.
   */
  complete(request: CompletionRequest & { stream?: false | null }, options?: { signal?: AbortSignal }): Promise<CompletionResponse>;
  complete(request: CompletionRequest & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<CompletionChunk>>;
  complete(request: CompletionRequest, options?: { signal?: AbortSignal }): Promise<CompletionResponse | AsyncIterable<CompletionChunk>>;
  complete(request: CompletionRequest, options: { signal?: AbortSignal } = {}): Promise<CompletionResponse | AsyncIterable<CompletionChunk>> {
    return createCompletion(this.generator, request, options);
  }

  /** Answers an HTTP-shaped request (`/v1/completions`, `/v1/models`) as every host does. */
  handle(request: ApiRequest): Promise<ApiResponse> {
    return handleApiRequest(this, request);
  }

  /** Frees the model's GPU buffers; the engine cannot be used afterwards. */
  unload(): void {
    this.generator.destroy?.();
  }
}
