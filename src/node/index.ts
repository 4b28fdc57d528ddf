// webgpu-llama, Node entry: the same engine on Dawn (the `webgpu` package), models from disk
// paths or URLs, and an HTTP server that answers /v1 with the same handler as the page's shim.
// Only re-exports: everything the browser entry has, with Node's loadModel in place of the page's.
export * from '../index.ts';
export { loadModel, loadModelFromPath } from './load.ts';
export { startServer } from './http.ts';
export { createNodeGpu, nodeGpuContext } from './gpu.ts';
export { filesFromPath } from './files.ts';
