// webgpu-llama, browser entry: load a Llama-family model onto WebGPU and answer OpenAI-style
// completions and chat in the page. Nothing here imports Node-only code (see src/node for the Node host).
import { Engine } from './api/engine.ts';
import { acquireDevice, sharedGpuContext, type GpuContext } from './gpu/device.ts';
import { loadGenerator, type LoadOptions } from './engine/load.ts';
import { withWeightCache } from './io/cache.ts';
import type { LoadProgress } from './model/weights.ts';
import { filesFromFileList, filesFromUrl, withAccessToken, type ModelFiles } from './io/files.ts';
import { filesFromHub, hubUrl, isHubSource, type HubSource } from './io/hub.ts';

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
export type { ToolCallFormat } from './api/tool-parsers.ts';
export type { LoadOptions } from './engine/load.ts';
export type { ModelInfo, ModelStorageInfo } from './engine/types.ts';
export type { MemoryEstimate } from './engine/memory.ts';
export type { LoadProgress, WeightStorage } from './model/weights.ts';
export type { GpuContext } from './gpu/device.ts';
export type { ModelFiles } from './io/files.ts';
export { acquireDevice, filesFromUrl, filesFromFileList, filesFromHub, hubUrl };
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

/**
 * Where a model comes from: a URL (a Hugging Face folder's base, or a .gguf file), a Hugging Face
 * repo (`{ repo, revision?, file?, host? }`), local `File`s, or any ModelFiles.
 */
export type ModelSource = string | URL | HubSource | Iterable<File> | ModelFiles;

export interface LoadModelOptions extends LoadOptions {
  /** The GPU to use; default: a device from `navigator.gpu`. */
  gpu?: GpuContext;
  /**
   * Keep the files of URL and repo sources in the browser's persistent weight cache (Cache
   * Storage), so that the next load reads no network; default true. Unused where there is no
   * Cache Storage (Node, insecure origins).
   */
  cache?: boolean;
  /**
   * An access token for URL and repo sources: a Hugging Face token (`hf_...`) for gated or
   * private repos (Llama 3.2, ...). Every request for the model's files carries it as
   * `Authorization: Bearer <token>`; it is not part of the weight cache (keyed by URL alone), nor
   * kept by the engine. Unused for local files.
   */
  accessToken?: string;
}

export function resolveModelSource(source: ModelSource, options: Pick<LoadModelOptions, 'cache' | 'onProgress' | 'accessToken'> = {}): ModelFiles {
  let url: string;
  if (typeof source === 'string' || source instanceof URL) url = String(source);
  else if (isHubSource(source)) url = hubUrl(source);
  else if (isModelFiles(source)) return source;
  else return filesFromFileList(source);
  const fetchImpl: typeof fetch = (...args) => fetch(...args);
  const authorized = options.accessToken ? withAccessToken(fetchImpl, options.accessToken) : fetchImpl;
  const files = filesFromUrl(url, authorized);
  if (options.cache === false) return files;
  const onProgress = options.onProgress;
  return withWeightCache(files, url, {
    fetch: authorized,
    // A file downloading into the cache: reported as 'download' of that file's bytes.
    onDownload: onProgress
      ? (_name, loadedBytes, totalBytes) => onProgress({ loadedBytes, totalBytes, loadedTensors: 0, totalTensors: 0, phase: 'download' } satisfies LoadProgress)
      : undefined,
  });
}

function isModelFiles(source: unknown): source is ModelFiles {
  return typeof (source as ModelFiles).open === 'function' && typeof (source as ModelFiles).id === 'string';
}

const pageGpu = sharedGpuContext(() => acquireDevice(globalThis.navigator?.gpu));

/** Loads a model onto the page's GPU and returns an Engine that answers chat and completions. */
export async function loadModel(source: ModelSource, options: LoadModelOptions = {}): Promise<Engine> {
  const { accessToken: _token, ...loadOptions } = options; // the token stays with the files' fetches
  const files = resolveModelSource(source, options);
  const gpu = options.gpu ?? (await pageGpu(undefined));
  return new Engine(await loadGenerator(gpu, files, loadOptions));
}
