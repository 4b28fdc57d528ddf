// webgpu-llama, browser entry: load a Llama-family model onto WebGPU and answer OpenAI-style
// completions and chat in the page. Nothing here imports Node-only code (see src/node for the Node host).
// Only re-exports: the code lives in the layers below (test/layers.test.ts).
export { loadModel, resolveModelSource, type LoadModelOptions, type ModelSource } from './api/load-model.ts';
export { Engine } from './api/engine.ts';
export { installFetchShim } from './api/shim.ts';
export { handleApiRequest } from './api/handler.ts';
export type { ApiRequest, ApiResponse } from './api/handler.ts';
export { ApiError } from './api/errors.ts';
export type {
  CompletionRequest,
  CompletionResponse,
  CompletionChunk,
  CompletionChoice,
  CompletionChunkChoice,
  CompletionUsage,
  CompletionLogprobs,
  CompletionExtensions,
  ResponseFormat,
  StructuredOutputExtensions,
  ServiceTier,
} from './api/completions.ts';
export type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionChoice,
  ChatCompletionMessage,
  ChatCompletionRequest,
  ChatChunkChoice,
  ChatContentPart,
  ChatDelta,
  ChatExtensions,
  ChatFinishReason,
  ChatLogprobs,
  ChatMessage,
  ChatTokenLogprob,
  ChatToolCall,
  ChatToolCallDelta,
} from './api/chat.ts';
export type { TokenizeResponse } from './api/tokenize.ts';
export type {
  EmbeddingRequest,
  EmbeddingResponse,
  EmbeddingObject,
  EmbeddingUsage,
  EmbeddingInputValue,
  EmbeddingEncodingFormat,
} from './api/embeddings.ts';
export type { ToolCallFormat } from './api/tool-parsers.ts';
export type { LoadOptions } from './engine/load.ts';
export type { ModelInfo, ModelStorageInfo, EmbeddingInfo, EmbeddingPooling } from './engine/types.ts';
export type { MemoryEstimate } from './engine/memory.ts';
export type { LoadProgress, WeightStorage } from './model/weights.ts';
export type { GpuContext } from './gpu/device.ts';
export type { ModelFiles } from './io/files.ts';
export { acquireDevice } from './gpu/device.ts';
export { filesFromUrl, filesFromFileList } from './io/files.ts';
export { filesFromHub, hubUrl } from './io/hub.ts';
export type { HubSource } from './io/hub.ts';
export { listCachedModels, deleteCachedModel, weightCacheAvailable, type CachedModel } from './io/cache.ts';
export { gpuCounters, counterDelta, type GpuCounters } from './gpu/counters.ts';
export type { FetchShimOptions, RequestHandlingEngine, ShimEngine } from './api/shim.ts';
export type { ApiEngine, ApiEngines, ApiHandlerOptions, HostedEngine } from './api/handler.ts';
export type { ApiErrorBody, ApiErrorObject } from './api/errors.ts';
export type { CompletionParams } from './api/completions.ts';
export type { FinishReason } from './engine/types.ts';
// Engine placements: a dedicated Web Worker, and a Service Worker (its own entry,
// 'webgpu-llama/service-worker', runs inside the worker; this is the page's side).
export { loadModelInWorker, type WorkerEngineOptions, type WorkerModelSource } from './worker/worker-engine.ts';
export { registerServiceWorkerEngine, type ServiceWorkerRegistrationOptions } from './worker/register.ts';
export { RemoteEngine } from './worker/remote-engine.ts';
export type { RequestStats } from './worker/tracked-engine.ts';
