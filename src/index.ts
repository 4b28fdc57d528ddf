// webgpu-llama, browser entry: load a Llama-family model onto WebGPU and answer OpenAI-style
// completions in the page. Nothing here imports Node-only code (see src/node for the Node host).
import { Engine } from './api/engine.ts';
import { acquireDevice, type GpuContext } from './gpu/device.ts';
import { loadGenerator, type LoadOptions } from './engine/load.ts';
import { filesFromFileList, filesFromUrl, type ModelFiles } from './model/files.ts';

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
export type { LoadOptions } from './engine/load.ts';
export type { ModelInfo } from './engine/types.ts';
export type { GpuContext } from './gpu/device.ts';
export type { ModelFiles } from './model/files.ts';
export { acquireDevice, filesFromUrl, filesFromFileList };

/** Where a model comes from: a URL (a Hugging Face folder's base, or a .gguf file), local `File`s, or any ModelFiles. */
export type ModelSource = string | URL | Iterable<File> | ModelFiles;

export interface LoadModelOptions extends LoadOptions {
  /** The GPU to use; default: a device from `navigator.gpu`. */
  gpu?: GpuContext;
}

export function resolveModelSource(source: ModelSource): ModelFiles {
  if (typeof source === 'string' || source instanceof URL) return filesFromUrl(String(source));
  if (isModelFiles(source)) return source;
  return filesFromFileList(source);
}

function isModelFiles(source: unknown): source is ModelFiles {
  return typeof (source as ModelFiles).open === 'function' && typeof (source as ModelFiles).id === 'string';
}

let pageGpu: Promise<GpuContext> | undefined;

/** Loads a model onto the page's GPU and returns an Engine that answers completions. */
export async function loadModel(source: ModelSource, options: LoadModelOptions = {}): Promise<Engine> {
  const files = resolveModelSource(source);
  const gpu = options.gpu ?? (await (pageGpu ??= acquireDevice(globalThis.navigator?.gpu)));
  return new Engine(await loadGenerator(gpu, files, options));
}
