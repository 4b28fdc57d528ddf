// Where loadModelInWorker finds the worker script when it is given none. In dist/ every file sits
// flat beside the worker entry, and vite.lib.config.ts defines its name; from source (the Vite dev
// server, the tests) it is the entry's TypeScript beside this file.
declare const __WEBGPU_LLAMA_WORKER_FILE__: string | undefined;

export function defaultWorkerUrl(): URL {
  const file = typeof __WEBGPU_LLAMA_WORKER_FILE__ === 'string' ? __WEBGPU_LLAMA_WORKER_FILE__ : './worker-entry.ts';
  return new URL(file, import.meta.url);
}
