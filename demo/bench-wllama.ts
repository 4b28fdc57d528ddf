// The wllama half of `npm run bench`: llama.cpp compiled to WebAssembly (@wllama/wllama, pinned
// devDependency, served by vite from node_modules), on the CPU (n_gpu_layers 0: the path a user
// would pick instead of WebGPU), with 1 or more threads. Threads need SharedArrayBuffer, so this
// page is served cross-origin isolated (bench/vite-isolation-plugin.ts). Completions are timed
// exactly as webgpu-llama's (bench/measure.ts timeChunks over the streamed chunks).
import { LoggerWithoutDebug, Wllama } from '@wllama/wllama/esm/index.js';
import wasmUrl from '@wllama/wllama/esm/wasm/wllama.wasm?url';
import { timeChunks, type CompletionChunk, type RunTiming } from '../bench/measure.ts';

let wllama: Wllama | undefined;

export interface WllamaLoadOptions {
  url: string;
  threads: number;
  contextLength: number;
}

export interface WllamaLoaded {
  loadMs: number;
  threads: number;
  multiThread: boolean;
  crossOriginIsolated: boolean;
}

/** Loads the GGUF at `url` afresh (no cache: every load downloads, as ours does in the bench). */
async function load(options: WllamaLoadOptions): Promise<WllamaLoaded> {
  await wllama?.exit();
  const start = performance.now();
  // The worker runs from a blob: URL, so the wasm's URL must be absolute.
  wllama = new Wllama({ default: new URL(wasmUrl, location.href).href }, { logger: { ...LoggerWithoutDebug, log: () => {} }, suppressNativeLog: true });
  await wllama.loadModelFromUrl(new URL(options.url, location.href).href, {
    n_threads: options.threads,
    n_ctx: options.contextLength,
    n_gpu_layers: 0,
    useCache: false,
  });
  const loadMs = performance.now() - start;
  return { loadMs, threads: wllama.getNumThreads(), multiThread: wllama.isMultithread(), crossOriginIsolated: globalThis.crossOriginIsolated };
}

export interface WllamaRunOptions {
  prompt: string;
  maxTokens: number;
}

/** One greedy streamed completion of `maxTokens` tokens (EOS ignored), timed; with wllama's own timings. */
async function run(options: WllamaRunOptions): Promise<RunTiming & { timings?: unknown }> {
  if (!wllama) throw new Error('wllama: no model loaded');
  let timings: unknown;
  const start = performance.now();
  const chunks = await wllama.createCompletion({
    prompt: options.prompt,
    max_tokens: options.maxTokens,
    temperature: 0,
    ignore_eos: true,
    stream: true,
    // llama.cpp's server keeps the last prompt's KV cache by default: every run prefills afresh here.
    ...({ cache_prompt: false } as object),
  });
  async function* keepTimings(): AsyncIterable<CompletionChunk> {
    for await (const chunk of chunks) {
      if (chunk.timings) timings = chunk.timings;
      yield chunk as CompletionChunk;
    }
  }
  const t = await timeChunks(start, keepTimings());
  return { ...t, timings };
}

async function unload(): Promise<void> {
  await wllama?.exit();
  wllama = undefined;
}

document.getElementById('isolated')!.textContent = String(globalThis.crossOriginIsolated);
Object.assign(window, { wllamaBench: { load, run, unload } });
