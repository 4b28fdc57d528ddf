// webgpu-llama, Node entry: the same engine on Dawn (the `webgpu` package), models from disk
// paths or URLs, and an HTTP server that answers /v1 with the same handler as the page's shim.
import { Engine } from '../api/engine.ts';
import { loadModel as loadModelWithGpu, type LoadModelOptions, type ModelSource } from '../index.ts';
import { filesFromPath } from './files.ts';
import { nodeGpuContext } from './gpu.ts';

export * from '../index.ts';
export { startServer } from './http.ts';
export { createNodeGpu, nodeGpuContext } from './gpu.ts';
export { filesFromPath } from './files.ts';

/** Loads a model from a GGUF file or a Hugging Face folder on disk. */
export async function loadModelFromPath(path: string, options: LoadModelOptions = {}): Promise<Engine> {
  return loadModel(filesFromPath(path), options);
}

/**
 * Like the browser's loadModel (URLs, `{ repo, revision?, file?, host? }` Hugging Face sources), on
 * the process's Dawn GPU; a string that is not an http(s) URL is a path. Node has no Cache Storage:
 * the browser's weight cache is not used here, every load reads its files again.
 */
export async function loadModel(source: ModelSource, options: LoadModelOptions = {}): Promise<Engine> {
  const resolved = typeof source === 'string' && !/^https?:\/\//.test(source) ? filesFromPath(source) : source;
  return loadModelWithGpu(resolved, { ...options, gpu: options.gpu ?? (await nodeGpuContext()) });
}
