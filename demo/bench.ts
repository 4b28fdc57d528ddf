// The in-page half of `npm run bench` (bench/run.ts drives it with Playwright): load a model and
// time completions sent, as users send them, with fetch() through the shim; read the device's
// counters (src/gpu/counters.ts) around them; run the adapter probes (bench/probes.ts).
import { acquireDevice, installFetchShim, loadModel, type CompletionRequest, type Engine, type GpuContext, type WeightStorage } from '../src/index.ts';
import { gpuCounters, type GpuCounters } from '../src/gpu/counters.ts';
import { timeChunks, type RunTiming } from '../bench/measure.ts';
import { DEFAULT_PROBE_OPTIONS, runProbes, type ProbeFigures, type ProbeOptions } from '../bench/probes.ts';
import { sseJson } from './sse.ts';

const DEFAULT_MODEL = '/models/stories260K/stories260K.gguf';

let uninstall: (() => void) | undefined;
let engine: Engine | undefined;
let gpu: Promise<GpuContext> | undefined;

const context = () => (gpu ??= acquireDevice(navigator.gpu));

function describeAdapter(ctx: GpuContext): string {
  return [ctx.adapter.vendor, ctx.adapter.architecture, ctx.adapter.description].filter(Boolean).join(' ');
}

export interface BenchLoadOptions {
  id?: string;
  weightStorage?: WeightStorage;
  contextLength?: number;
}

/** Frees the loaded model and its GPU buffers. */
function unload(): void {
  uninstall?.();
  uninstall = undefined;
  engine?.unload();
  engine = undefined;
}

/**
 * Loads `url` (bypassing the weight cache, so every load fetches and uploads: the figure a first
 * visit sees) and routes /v1 to it; returns the wall time of the load.
 */
async function load(url = DEFAULT_MODEL, options: BenchLoadOptions = {}): Promise<{ loadMs: number; id: string; adapter: string }> {
  const ctx = await context();
  unload(); // one model on the device at a time, as in Node
  const start = performance.now();
  engine = await loadModel(new URL(url, location.href).href, { ...options, gpu: ctx, cache: false });
  const loadMs = performance.now() - start;
  uninstall = installFetchShim(engine);
  return { loadMs, id: engine.info.id, adapter: describeAdapter(ctx) };
}

/** One streamed completion through fetch, timed, with the device's counters before it, at its first token and at its end. */
async function run(body: CompletionRequest): Promise<RunTiming<GpuCounters> & { atStart: GpuCounters }> {
  const { device } = await context();
  const atStart = gpuCounters(device);
  const start = performance.now();
  const response = await fetch('/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  return { ...(await timeChunks(start, sseJson(response), () => gpuCounters(device))), atStart };
}

/** Prompt tokens `text` makes with the loaded model's tokenizer (BOS included when it adds one). */
async function countTokens(text: string): Promise<number> {
  if (!engine) throw new Error('no model loaded');
  return engine.generator.tokenizer.encode(text).length;
}

async function probes(options: Partial<ProbeOptions> = {}): Promise<ProbeFigures & { adapter: string }> {
  const ctx = await context();
  return { adapter: describeAdapter(ctx), ...(await runProbes(ctx, { ...DEFAULT_PROBE_OPTIONS, ...options }, (m) => console.log(`probe: ${m}`))) };
}

Object.assign(window, { bench: { load, run, countTokens, probes, unload, crossOriginIsolated: globalThis.crossOriginIsolated } });

// ---- the button: a short run by hand ---------------------------------------------------------

const results = document.getElementById('results')!;
const errorBox = document.getElementById('error')!;
const button = document.getElementById('run') as HTMLButtonElement;

button.addEventListener('click', async () => {
  button.disabled = true;
  errorBox.hidden = true;
  results.textContent = '';
  const log = (line: string) => (results.textContent += line + '\n');
  try {
    const model = new URLSearchParams(location.search).get('model') ?? DEFAULT_MODEL;
    const loaded = await load(model);
    log(`${loaded.id} on ${loaded.adapter || 'unknown adapter'}: loaded in ${loaded.loadMs.toFixed(0)} ms`);
    await run({ model: loaded.id, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }); // warm-up
    for (let i = 0; i < 3; i++) {
      const t = await run({ model: loaded.id, prompt: 'Once upon a time', max_tokens: 128, temperature: 0, ignore_eos: true });
      const decodeTps = (t.completionTokens - 1) / ((t.lastTokenMs - t.firstTokenMs) / 1000);
      const steps = t.completionTokens - 1;
      const d = t.atEnd && t.atFirstToken ? (t.atEnd.dispatches - t.atFirstToken.dispatches) / steps : NaN;
      const r = t.atEnd && t.atFirstToken ? (t.atEnd.readBacks - t.atFirstToken.readBacks) / steps : NaN;
      log(`run ${i + 1}: first token ${t.firstTokenMs.toFixed(0)} ms, ${t.completionTokens} tokens, decode ${decodeTps.toFixed(1)} tok/s; per token ${d.toFixed(1)} dispatches, ${r.toFixed(2)} read-backs`);
    }
  } catch (error) {
    errorBox.hidden = false;
    errorBox.textContent = String(error);
  } finally {
    button.disabled = false;
  }
});
