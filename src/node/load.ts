// Loading a model in Node: the browser's loadModel (src/api/load-model.ts) on Dawn, with disk
// paths besides URLs and hub repos. The Node entry (src/node/index.ts) re-exports it; the CLI
// imports it on demand (cli-load.ts), once Dawn is known to load.
import type { Engine } from '../api/engine.ts';
import { loadModel as loadModelWithGpu, type LoadModelOptions, type ModelSource } from '../api/load-model.ts';
import { checkModelPath, filesFromPath } from './files.ts';
import { nodeGpuContext } from './gpu.ts';

/**
 * Loads a model from a GGUF file or a Hugging Face folder on disk. The path is checked first (an
 * error naming it), before the GPU is acquired.
 */
export async function loadModelFromPath(path: string, options: LoadModelOptions = {}): Promise<Engine> {
  await checkModelPath(path);
  return loadModelWithGpu(filesFromPath(path), { ...options, gpu: options.gpu ?? (await nodeGpuContext()) });
}

/**
 * Like the browser's loadModel (URLs, `{ repo, revision?, file?, host? }` Hugging Face sources), on
 * the process's Dawn GPU; a string that is not an http(s) URL is a path (see loadModelFromPath).
 * `accessToken` (a Hugging Face token for gated repos) goes with the requests of URL and repo
 * sources; paths do not use it. Node has no Cache Storage: the browser's weight cache is not used
 * here, every load reads its files again.
 */
export async function loadModel(source: ModelSource, options: LoadModelOptions = {}): Promise<Engine> {
  if (typeof source === 'string' && !/^https?:\/\//.test(source)) return loadModelFromPath(source, options);
  return loadModelWithGpu(source, { ...options, gpu: options.gpu ?? (await nodeGpuContext()) });
}
