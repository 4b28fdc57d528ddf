// The in-page half of `npm run bench` (bench/run.ts drives it with Playwright): load a model and
// time completions sent, as users send them, with fetch() through the shim.
import { installFetchShim, loadModel, type CompletionRequest, type Engine } from '../src/index.ts';
import { timeChunks, type RunTiming } from '../bench/measure.ts';
import { sseJson } from './sse.ts';

const DEFAULT_MODEL = '/models/stories260K/stories260K.gguf';

let uninstall: (() => void) | undefined;
let engine: Engine | undefined;

/** Loads `url` and routes /v1 to it; returns the wall time of the load. */
async function load(url = DEFAULT_MODEL, id?: string): Promise<{ loadMs: number; id: string; adapter: string }> {
  const start = performance.now();
  const loaded = await loadModel(new URL(url, location.href).href, { id });
  const loadMs = performance.now() - start;
  uninstall?.();
  engine?.unload();
  engine = loaded;
  uninstall = installFetchShim(engine);
  const info = (await navigator.gpu.requestAdapter())?.info;
  return { loadMs, id: engine.info.id, adapter: [info?.vendor, info?.architecture, info?.description].filter(Boolean).join(' ') };
}

/** One streamed completion through fetch, timed. `body` is a /v1/completions request body. */
async function run(body: CompletionRequest): Promise<RunTiming> {
  const start = performance.now();
  const response = await fetch('/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  return timeChunks(start, sseJson(response));
}

/** Prompt tokens `text` makes with the loaded model's tokenizer (BOS included when it adds one). */
async function countTokens(text: string): Promise<number> {
  if (!engine) throw new Error('no model loaded');
  return engine.generator.tokenizer.encode(text).length;
}

Object.assign(window, { bench: { load, run, countTokens } });

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
      const t = await run({ model: loaded.id, prompt: 'Once upon a time', max_tokens: 128, temperature: 0 });
      const decodeTps = (t.completionTokens - 1) / ((t.lastTokenMs - t.firstTokenMs) / 1000);
      log(`run ${i + 1}: first token ${t.firstTokenMs.toFixed(0)} ms, ${t.completionTokens} tokens, decode ${decodeTps.toFixed(1)} tok/s`);
    }
  } catch (error) {
    errorBox.hidden = false;
    errorBox.textContent = String(error);
  } finally {
    button.disabled = false;
  }
});
