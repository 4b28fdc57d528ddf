// The demo: load a model onto the GPU, install the fetch shim, then talk to it with plain
// fetch('/v1/completions') and server-sent events, exactly as code written for a server would.
import { sseJson } from './sse.ts';
import { installFetchShim, loadModel, type CompletionChunk, type Engine } from '../src/index.ts';

const DEFAULT_MODEL = '/models/stories260K/stories260K.gguf';
const DEFAULT_ID = 'stories260K';

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const form = $<HTMLFormElement>('form');
const promptInput = $<HTMLTextAreaElement>('prompt');
const maxTokensInput = $<HTMLInputElement>('max-tokens');
const temperatureInput = $<HTMLInputElement>('temperature');
const button = $<HTMLButtonElement>('generate');
const output = $<HTMLPreElement>('output');
const statusLine = $('status');
const adapterLine = $('adapter');
const modelLine = $('model-name');
const progress = $<HTMLProgressElement>('progress');
const errorBox = $('error');
const localControls = $<HTMLFieldSetElement>('local');
const fileInput = $<HTMLInputElement>('model-files');
const folderInput = $<HTMLInputElement>('model-folder');

type State = 'loading' | 'ready' | 'generating' | 'error';

function setState(state: State, status: string): void {
  document.body.dataset.state = state;
  statusLine.textContent = status;
}

function showError(error: unknown): void {
  errorBox.hidden = false;
  errorBox.textContent = error instanceof Error ? error.message : String(error);
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

// ---- loading -------------------------------------------------------------------------------

const params = new URLSearchParams(location.search);
const modelUrl = new URL(params.get('model') ?? DEFAULT_MODEL, location.href).href;
const modelId = params.get('id') ?? (params.has('model') ? undefined : DEFAULT_ID);
modelLine.textContent = `Model: ${modelUrl}`;

async function describeAdapter(): Promise<void> {
  if (!navigator.gpu) throw new Error('This browser has no WebGPU (navigator.gpu is missing). Try a recent Chrome, Edge or Safari.');
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error('WebGPU is present but found no GPU adapter.');
  const { vendor, architecture, description } = adapter.info;
  adapterLine.textContent = `GPU: ${[vendor, architecture, description].filter(Boolean).join(' · ') || 'unknown adapter'}`;
}

let loadSeconds = 0;

async function load(source: string | File[], id?: string) {
  await describeAdapter();
  const started = performance.now();
  const engine = await loadModel(source, {
    id,
    onProgress({ loadedBytes, totalBytes, loadedTensors, totalTensors, phase }) {
      progress.max = totalBytes || 1;
      progress.value = loadedBytes;
      const verb = phase === 'download' ? 'Downloading' : 'Uploading to GPU';
      const tensors = totalTensors > 0 ? `, tensor ${loadedTensors} of ${totalTensors}` : '';
      statusLine.textContent = `${verb}: ${formatBytes(loadedBytes)} of ${formatBytes(totalBytes)}${tensors}`;
    },
  });
  loadSeconds = (performance.now() - started) / 1000;
  const storage = engine.info.storage;
  const weights = storage ? `, weights ${storage.weightStorage} ${formatBytes(storage.weightBytes)}` : '';
  const local = typeof source === 'string' ? '' : ', from local files';
  modelLine.textContent = `Model: ${engine.info.id} (${engine.info.format}, context ${engine.info.contextLength}${weights}${local})`;
  return engine;
}

let enginePromise: Promise<Engine>;
let uninstallShim: () => void;

function start(source: string | File[], id?: string): void {
  setState('loading', 'Loading model…');
  button.disabled = true;
  localControls.disabled = true;
  progress.value = 0;
  enginePromise = load(source, id);
  // Installed at once: a request sent before the model is ready waits for it.
  uninstallShim = installFetchShim(enginePromise);
  enginePromise.then(
    () => {
      setState('ready', `Ready (loaded in ${loadSeconds.toFixed(1)} s).`);
      button.disabled = false;
    },
    (error) => {
      setState('error', 'Could not load the model.');
      showError(error);
    },
  ).finally(() => (localControls.disabled = false));
}

start(modelUrl, modelId);

// ---- a model from local files: file picker, folder picker, or dropped on the page ----------

async function loadLocal(files: File[]): Promise<void> {
  if (files.length === 0 || document.body.dataset.state === 'loading') return;
  setState('loading', 'Unloading the current model…');
  // Let the request in flight end (as 'aborted') before its engine goes away.
  running?.abort();
  await generation;
  uninstallShim();
  const old = await enginePromise.catch(() => undefined);
  old?.unload();
  errorBox.hidden = true;
  errorBox.textContent = '';
  modelLine.textContent = `Model: ${files.map((f) => f.name).join(', ')}`;
  start(files);
}

for (const input of [fileInput, folderInput]) {
  input.addEventListener('change', () => {
    void loadLocal([...(input.files ?? [])]);
    input.value = ''; // picking the same files again loads them again
  });
}
addEventListener('dragover', (event) => {
  event.preventDefault(); // allows the drop
  document.body.classList.add('dragging');
});
addEventListener('dragleave', () => document.body.classList.remove('dragging'));
addEventListener('drop', (event) => {
  event.preventDefault(); // the browser would otherwise open the file
  document.body.classList.remove('dragging');
  void loadLocal([...(event.dataTransfer?.files ?? [])]);
});

// ---- one completion, streamed --------------------------------------------------------------


let running: AbortController | undefined;
let generation: Promise<void> | undefined;

async function generate(): Promise<void> {
  const engine = await enginePromise;
  running = new AbortController();
  output.textContent = '';
  delete output.dataset.finish;
  errorBox.hidden = true;
  button.textContent = 'Stop';
  setState('generating', 'Generating…');
  const started = performance.now();
  let tokens = 0;
  try {
    const response = await fetch('/v1/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        model: engine.info.id,
        prompt: promptInput.value,
        max_tokens: Number(maxTokensInput.value),
        temperature: Number(temperatureInput.value),
        stream: true,
        stream_options: { include_usage: true }, // one last chunk carries the token counts
      }),
      signal: running.signal,
    });
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      throw new Error(body?.error?.message ?? `HTTP ${response.status}`);
    }
    let finish = '';
    for await (const chunk of sseJson<CompletionChunk & { error?: { message: string } }>(response)) {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      output.textContent += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    output.dataset.finish = finish || 'done';
    const seconds = (performance.now() - started) / 1000;
    setState('ready', `Done (${finish || 'complete'}): ${tokens} tokens in ${seconds.toFixed(2)} s.`);
  } catch (error) {
    if ((error as Error).name === 'AbortError') {
      output.dataset.finish = 'aborted';
      setState('ready', 'Stopped.');
    } else {
      output.dataset.finish = 'error';
      setState('ready', 'The request failed.');
      showError(error);
    }
  } finally {
    running = undefined;
    button.textContent = 'Generate';
  }
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  if (running) running.abort();
  else generation = generate();
});

addEventListener('unhandledrejection', (event) => showError(event.reason));
