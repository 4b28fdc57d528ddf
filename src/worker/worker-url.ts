// The worker loadModelInWorker starts when it is given none. From source (the Vite dev server,
// the tests) it is the entry's TypeScript beside this file. In dist, vite.lib.config.ts rewrites
// the call below to `new Worker(new URL("./worker.js", import.meta.url), { type: "module", ... })`:
// the one form bundlers (Vite, webpack, Parcel) recognise as a worker, and bundle with its imports
// into the application's build. Any other form (a URL computed apart from `new Worker`) they copy
// as a lone asset whose imports are left behind, and the worker fails to start.

export const WORKER_OPTIONS: WorkerOptions = { type: 'module', name: 'webgpu-llama' };

export function startDefaultWorker(): Worker {
  // The options spelled out, not WORKER_OPTIONS: bundlers read `type: 'module'` from the literal.
  return new Worker(sourceWorkerUrl(), { type: 'module', name: 'webgpu-llama' });
}

function sourceWorkerUrl(): URL {
  const entry = './worker-entry.ts'; // not a literal in `new URL`: Vite would copy the .ts as an asset
  return new URL(entry, import.meta.url);
}
