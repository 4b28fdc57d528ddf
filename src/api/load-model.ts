// loadModel, the page's way to a loaded model: resolves where the model's files come from (a URL,
// a Hugging Face repo, local Files, with the browser's weight cache and an access token), takes
// the page's GPU and returns an Engine. The browser entry (src/index.ts) re-exports it; the
// dedicated worker, the service worker and the Node host (src/node/load.ts) load through it.
import { Engine } from './engine.ts';
import { acquireDevice, sharedGpuContext, type GpuContext } from '../gpu/device.ts';
import { loadGenerator, type LoadOptions } from '../engine/load.ts';
import { withWeightCache } from '../io/cache.ts';
import type { LoadProgress } from '../model/weights.ts';
import { filesFromFileList, filesFromUrl, withAccessToken, type ModelFiles } from '../io/files.ts';
import { hubUrl, isHubSource, type HubSource } from '../io/hub.ts';

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
