// The demo: load a model onto the GPU, install the fetch shim, then talk to it with plain
// fetch('/v1/completions') (the Completions view), fetch('/v1/chat/completions') (the Chat view,
// chat.ts) and server-sent events, or fetch('/v1/embeddings') (the Search view, search.ts),
// exactly as code written for a server would. The modules beside this one each do one part: the
// parameter panel, the token view, the cached models list, the snippets, the chat, the search;
// this file loads the model the views share and wires the page.
import OpenAI from 'openai';
import { acquireDevice, installFetchShim, loadModel, type CachedModel, type CompletionChunk, type Engine, type GpuContext, type ModelSource } from '../src/index.ts';
import { CachedModelsList } from './cached-models.ts';
import { ChatView } from './chat.ts';
import { SearchView } from './search.ts';
import { ApiRequestError, LiveStats, runCompletion } from './completion-run.ts';
import { errorMessage, formatBytes } from './format.ts';
import { parseModelSource } from './model-source.ts';
import { ParamsPanel, STRUCTURED_PARAMS } from './params-panel.ts';
import { prettyJson, StructuredPanel } from './structured-panel.ts';
import { copyText, curlSnippet, openaiSnippet } from './snippets.ts';
import { AlternativesPopover, ChoiceView } from './token-view.ts';

// Page options: ?model=URL&id=NAME (the model loaded first), ?hub=HOST (a Hugging Face mirror for
// repo ids: a host name or a URL), ?memoryBudgetMiB=N (the GPU memory a model may take); #chat
// opens the Chat view, #search the Search view.
const query = new URLSearchParams(location.search);
// Relative to the page: the built demo (npm run build:demo) may be served under any sub-path.
const DEFAULT_MODEL = './models/stories260K/stories260K.gguf';
const DEFAULT_ID = 'stories260K';
/** How many of a stream's chunks the response panel keeps. */
const LAST_CHUNKS = 3;

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const form = $<HTMLFormElement>('form');
const promptInput = $<HTMLTextAreaElement>('prompt');
const button = $<HTMLButtonElement>('generate');
const tintToggle = $<HTMLInputElement>('tint');
const output = $('output');
const stats = $('stats');
const statusLine = $('status');
const adapterLine = $('adapter');
const modelLine = $('model-name');
const progress = $<HTMLProgressElement>('progress');
const errorBox = $('error');
const sourceForm = $<HTMLFormElement>('source-form');
const sourceInput = $<HTMLInputElement>('model-source');
const sourceButton = $<HTMLButtonElement>('load-source');
const localControls = $<HTMLFieldSetElement>('local');
const fileInput = $<HTMLInputElement>('model-files');
const folderInput = $<HTMLInputElement>('model-folder');
const requestView = $('request-json');
const responseView = $('response-json');
const responseNote = $('response-note');
const copyStatus = $('copy-status');
const loadNote = $('load-note');
const tokenInput = $<HTMLInputElement>('hf-token');

// "Copy as openai code" gives code to paste into this page's DevTools console, where there are no
// imports: the client class is on window, as `import OpenAI from 'openai'` gives it in an app.
Object.assign(window, { OpenAI });

/** Phone width: one column, parameter groups closed until opened. */
const narrow = matchMedia('(max-width: 60rem)');
const params = new ParamsPanel($('params'), { collapsed: narrow.matches, omit: STRUCTURED_PARAMS });
const structured = new StructuredPanel($('params'), 'completions', { collapsed: narrow.matches });
const structuredView = $('structured-json');
const popover = new AlternativesPopover(output);
const chat = new ChatView({
  popover,
  narrow: narrow.matches,
  setState: (state, status) => setState(state, status),
  completionRunning: () => running !== undefined,
});
const search = new SearchView();
const cachedModels = new CachedModelsList($('cached-models'), {
  load: (model: CachedModel) => void switchModel(model.url, model.id, model.id),
  error: (message) => showError(message, 'model'),
});

// ---- the views: Completions, Chat and Search, one model ----------------------------------------

type View = 'completions' | 'chat' | 'search';
const HASH_VIEWS: Record<string, View> = { '#chat': 'chat', '#search': 'search' };

function showView(view: View): void {
  document.body.dataset.view = view;
  for (const button of document.querySelectorAll<HTMLButtonElement>('nav.views button')) {
    button.setAttribute('aria-pressed', String(button.dataset.view === view));
  }
  popover.hide();
}

for (const button of document.querySelectorAll<HTMLButtonElement>('nav.views button')) {
  button.addEventListener('click', () => {
    const view = button.dataset.view as View;
    showView(view);
    // The view is in the address (#chat, #search), so that a reload or a shared link opens it.
    history.replaceState(null, '', view === 'completions' ? location.pathname + location.search : `#${view}`);
  });
}
showView(HASH_VIEWS[location.hash] ?? 'completions');

// ---- page state and errors -------------------------------------------------------------------

type State = 'loading' | 'ready' | 'generating' | 'error';

function setState(state: State, status: string): void {
  document.body.dataset.state = state;
  statusLine.textContent = status;
}

/** Shows an error in the page, next to what failed (the model card, or the output). */
function showError(error: unknown, where: 'model' | 'request'): void {
  const home = where === 'model' ? document.querySelector('.card.model')! : document.querySelector('.card.result')!;
  if (errorBox.parentElement !== home) home.append(errorBox);
  errorBox.hidden = false;
  errorBox.textContent = errorMessage(error);
  errorBox.scrollIntoView({ block: 'nearest' });
}

function clearError(): void {
  errorBox.hidden = true;
  errorBox.textContent = '';
}

addEventListener('unhandledrejection', (event) => showError(event.reason, 'request'));

// ---- the GPU ---------------------------------------------------------------------------------

/** The page's GPU, once: every model loads onto it. */
async function pageGpu(): Promise<GpuContext> {
  if (!navigator.gpu) {
    adapterLine.textContent = 'GPU: none (this browser has no WebGPU)';
    throw new Error(
      'This browser has no WebGPU (navigator.gpu is missing), so the model cannot run here. ' +
        'Try a recent Chrome or Edge (on Linux, Chromium with --enable-unsafe-webgpu), or Safari 26.',
    );
  }
  const gpu = await acquireDevice(navigator.gpu).catch((error) => {
    adapterLine.textContent = 'GPU: none (WebGPU could not open a device)';
    throw new Error(`WebGPU is present but no GPU device could be opened: ${errorMessage(error)}`);
  });
  const { vendor, architecture, description } = gpu.adapter;
  const name = [vendor, architecture, description].filter(Boolean).join(' · ') || 'unknown adapter';
  adapterLine.textContent = `GPU: ${name} · shader-f16: ${gpu.features.shaderF16 ? 'yes' : 'no'} · subgroups: ${gpu.features.subgroups ? 'yes' : 'no'}`;
  adapterLine.dataset.shaderF16 = String(gpu.features.shaderF16);
  return gpu;
}

const gpuPromise = pageGpu();

// ---- loading a model -------------------------------------------------------------------------

let enginePromise: Promise<Engine> = Promise.reject(new Error('No model loaded yet.'));
enginePromise.catch(() => {});
let uninstallShim: () => void = () => {};
let loadSeconds = 0;

async function load(source: ModelSource, id: string | undefined, fromLocalFiles: boolean): Promise<Engine> {
  const gpu = await gpuPromise;
  const started = performance.now();
  // The Hugging Face token goes with hub and URL loads only (local files need none); it is read
  // from the field at each load and kept nowhere else.
  const accessToken = fromLocalFiles ? '' : tokenInput.value.trim();
  const engine = await loadModel(source, {
    id,
    gpu,
    ...(accessToken ? { accessToken } : {}),
    memoryBudgetBytes: memoryBudgetBytes(),
    onProgress({ loadedBytes, totalBytes, loadedTensors, totalTensors, phase }) {
      progress.max = totalBytes || 1;
      progress.value = loadedBytes;
      progress.dataset.phase = phase;
      const verb = phase === 'download' ? 'Downloading' : 'Uploading to GPU';
      const tensors = totalTensors > 0 ? `, tensor ${loadedTensors} of ${totalTensors}` : '';
      statusLine.textContent = `${verb}: ${formatBytes(loadedBytes)} of ${formatBytes(totalBytes)}${tensors}`;
    },
  });
  const seconds = (performance.now() - started) / 1000;
  const { info } = engine;
  const weights = info.storage ? `, weights ${info.storage.weightStorage} ${formatBytes(info.storage.weightBytes)}, KV cache ${info.storage.kvCacheDType}` : '';
  const local = fromLocalFiles ? ', from local files' : '';
  modelLine.textContent = `Model: ${info.id} (${info.format}, ${info.architecture}, context ${info.contextLength}${weights}${local})`;
  loadSeconds = seconds;
  return engine;
}

/** `?memoryBudgetMiB=N`: refuse models that need more GPU memory than that (as a small device would). */
function memoryBudgetBytes(): number | undefined {
  const mib = query.get('memoryBudgetMiB');
  if (mib === null) return undefined;
  const value = mib.trim() === '' ? NaN : Number(mib);
  if (!Number.isFinite(value) || value < 0) {
    throw new Error(`The page option ?memoryBudgetMiB= must be a number of MiB, 0 or more (e.g. ?memoryBudgetMiB=512), got ${JSON.stringify(mib)}.`);
  }
  return value * 1024 ** 2;
}

/** `?hub=HOST`: a host name (https:// is added) or a URL. */
function hubHost(): string | undefined {
  const hub = query.get('hub')?.trim();
  if (!hub) return undefined;
  return /^[a-z][a-z\d+.-]*:\/\//i.test(hub) ? hub : `https://${hub}`;
}

/** True while a model loads (or the old one is being unloaded): another waits for it. */
let loadBusy = false;

/** One model loads at a time: the ways to pick another wait for it. */
function setLoadControlsDisabled(disabled: boolean): void {
  loadBusy = disabled;
  localControls.disabled = disabled;
  sourceButton.disabled = disabled;
  cachedModels.setLoadDisabled(disabled);
}

function start(source: ModelSource, id: string | undefined, label: string): void {
  setState('loading', 'Loading model…');
  modelLine.textContent = `Model: ${label}`;
  button.disabled = true;
  chat.modelLoading();
  search.modelLoading();
  setLoadControlsDisabled(true);
  loadNote.hidden = true;
  progress.value = 0;
  const fromLocalFiles = typeof source !== 'string' && !(source instanceof URL) && !('repo' in source);
  enginePromise = load(source, id, fromLocalFiles);
  // Installed at once: a request sent before the model is ready waits for it.
  uninstallShim = installFetchShim(enginePromise);
  enginePromise
    .then(
      (engine) => {
        setState('ready', `Ready (loaded in ${loadSeconds.toFixed(1)} s).`);
        button.disabled = false;
        updateRequestView(engine.info.id);
        chat.modelReady(engine.info.id);
        search.modelReady(engine.info.id);
      },
      (error) => {
        setState('error', 'Could not load the model.');
        showError(error, 'model');
      },
    )
    .finally(() => {
      setLoadControlsDisabled(false);
      void cachedModels.refresh();
    });
}

/** Replaces the loaded model: stops the request in flight, frees the old model, loads the new one. */
async function switchModel(source: ModelSource, id: string | undefined, label: string): Promise<void> {
  if (loadBusy) return;
  // From here on nothing else may start: no other model, no request for the old one.
  setLoadControlsDisabled(true);
  button.disabled = true;
  chat.modelLoading();
  search.modelLoading();
  search.stop();
  setState('loading', 'Unloading the current model…');
  // Let the requests in flight end (as 'aborted') before their engine goes away.
  running?.abort();
  await generation;
  await chat.stop();
  uninstallShim();
  const old = await enginePromise.catch(() => undefined);
  old?.unload();
  clearError();
  start(source, id, label);
}

const initialUrl = new URL(query.get('model') ?? DEFAULT_MODEL, location.href).href;
start(initialUrl, query.get('id') ?? (query.has('model') ? undefined : DEFAULT_ID), initialUrl);

sourceForm.addEventListener('submit', (event) => {
  event.preventDefault();
  try {
    const { source, label } = parseModelSource(sourceInput.value, { hubHost: hubHost() });
    void switchModel(source, undefined, label);
  } catch (error) {
    showError(error, 'model');
  }
});

// A model from local files: file picker, folder picker, or dropped on the page.
function loadLocal(files: File[]): void {
  if (files.length > 0) void switchModel(files, undefined, files.map((f) => f.name).join(', '));
}

for (const input of [fileInput, folderInput]) {
  input.addEventListener('change', () => {
    loadLocal([...(input.files ?? [])]);
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
  const files = [...(event.dataTransfer?.files ?? [])];
  if (files.length > 0 && loadBusy) {
    loadNote.textContent = 'Ignored the dropped files: a model was loading. Drop them again once it is ready.';
    loadNote.hidden = false;
    return;
  }
  loadLocal(files);
});

// ---- the request, as it will be sent -----------------------------------------------------------

let modelId = DEFAULT_ID;

/** The request body from the prompt and the panel; throws on a malformed JSON field. */
function requestBody(): Record<string, unknown> {
  return { model: modelId, prompt: promptInput.value, ...params.read(), ...structured.read() };
}

function updateRequestView(id = modelId): void {
  modelId = id;
  try {
    const body = requestBody();
    requestView.textContent = JSON.stringify(body, null, 2);
    $('curl-snippet').textContent = curlSnippet(body);
    $('openai-snippet').textContent = openaiSnippet(body);
  } catch (error) {
    requestView.textContent = errorMessage(error);
  }
}

for (const source of [$('params'), promptInput]) {
  source.addEventListener('input', () => updateRequestView());
  source.addEventListener('change', () => updateRequestView());
}

// Tinting needs logprobs: turning it on asks for 5 alternatives if the request asked for none.
tintToggle.addEventListener('change', () => {
  output.classList.toggle('tinted', tintToggle.checked);
  const logprobs = params.control('logprobs');
  if (tintToggle.checked && logprobs && logprobs.value === '') {
    logprobs.value = '5';
    updateRequestView();
  }
});

for (const [id, snippet] of [['copy-curl', curlSnippet], ['copy-openai', openaiSnippet]] as const) {
  $(id).addEventListener('click', async () => {
    try {
      await copyText(snippet(requestBody()));
      copyStatus.textContent = 'Copied.';
    } catch (error) {
      copyStatus.textContent = errorMessage(error);
    }
  });
}

// ---- one completion ----------------------------------------------------------------------------

let running: AbortController | undefined;
let generation: Promise<void> | undefined;
/** The click that submits, as its click count: 2 for the second click of a double click, 0 for a key. */
let submitClicks = 0;
button.addEventListener('click', (event) => (submitClicks = event.detail));

async function generate(): Promise<void> {
  clearError();
  popover.hide();
  if (chat.generating) {
    showError(new Error('A chat reply is streaming in the Chat view: stop it first (the page runs one request at a time).'), 'request');
    return;
  }
  let body: Record<string, unknown>;
  try {
    body = requestBody();
  } catch (error) {
    showError(error, 'request');
    return;
  }
  requestView.textContent = JSON.stringify(body, null, 2);
  responseView.textContent = '';
  responseNote.textContent = '';
  output.replaceChildren();
  structuredView.replaceChildren();
  structuredView.hidden = true;
  delete output.dataset.finish;
  running = new AbortController();
  button.textContent = 'Stop';
  setState('generating', 'Generating…');

  const choices = new Map<number, ChoiceView>();
  const live = new LiveStats();
  const lastChunks: CompletionChunk[] = [];
  let chunkCount = 0;
  const promptLength = body.echo && typeof body.prompt === 'string' ? body.prompt.length : 0;
  const context = typeof body.prompt === 'string' ? body.prompt : '';
  const finishes: string[] = [];
  const texts = new Map<number, string>();
  const choice = (index: number) => {
    let view = choices.get(index);
    if (!view) {
      view = new ChoiceView(index, promptLength, body.echo ? '' : context);
      choices.set(index, view);
      // Choices in index order, whatever order they arrive in.
      const after = [...output.children].find((c) => Number((c as HTMLElement).dataset.index) > index);
      output.insertBefore(view.element, after ?? null);
    }
    return view;
  };
  stats.textContent = live.describe();
  try {
    const result = await runCompletion(body, running.signal, {
      text(index, text, logprobs) {
        const view = choice(index);
        texts.set(index, (texts.get(index) ?? '') + text);
        const before = view.tokens;
        view.append(text, logprobs);
        // With logprobs each generated token is counted; without, each piece of text (one per token, nearly).
        live.add(logprobs ? view.tokens - before : text ? 1 : 0);
        if (body.stream) stats.textContent = live.describe();
      },
      finish(index, reason) {
        choice(index).finish(reason);
        finishes.push(reason);
      },
      chunk(chunk) {
        chunkCount++;
        lastChunks.push(chunk);
        if (lastChunks.length > LAST_CHUNKS) lastChunks.shift();
      },
    });
    if (result.usage) live.setUsage(result.usage);
    if (result.response) {
      responseView.textContent = JSON.stringify(result.response, null, 2);
      responseNote.textContent = '(the whole response)';
      stats.textContent = `${live.tokens} tokens in ${live.elapsedSeconds.toFixed(2)} s, not streamed (no time to first token)`;
    } else {
      responseView.textContent = JSON.stringify(lastChunks, null, 2);
      responseNote.textContent = `(the last ${lastChunks.length} of ${chunkCount} chunks)`;
      stats.textContent = live.describe();
    }
    const finish = finishes.length === 1 ? finishes[0]! : finishes.join(', ') || 'done';
    output.dataset.finish = finish;
    if (structured.wantsJson) showPrettyJson(texts);
    setState('ready', `Done (${finish}): ${live.tokens} tokens in ${live.elapsedSeconds.toFixed(2)} s.`);
  } catch (error) {
    if ((error as Error).name === 'AbortError') {
      output.dataset.finish = 'aborted';
      responseView.textContent = JSON.stringify(lastChunks, null, 2);
      responseNote.textContent = `(stopped: the last ${lastChunks.length} of ${chunkCount} chunks)`;
      setState('ready', 'Stopped.');
    } else {
      output.dataset.finish = 'error';
      if (error instanceof ApiRequestError && error.body) responseView.textContent = JSON.stringify(error.body, null, 2);
      responseNote.textContent = !(error instanceof ApiRequestError) ? '(failed)' : error.inStream ? '(error event in the stream)' : `(HTTP ${error.status})`;
      setState('ready', 'The request failed.');
      showError(error, 'request');
    }
  } finally {
    running = undefined;
    button.textContent = 'Generate';
  }
}

/** Each choice's JSON output, pretty-printed (a choice cut by max_tokens is not JSON: said so). */
function showPrettyJson(texts: Map<number, string>): void {
  const blocks = [...texts.entries()].sort(([a], [b]) => a - b).map(([index, text]) => {
    const pretty = prettyJson(text);
    const pre = document.createElement('pre');
    pre.textContent = pretty ?? `(choice ${index} is not whole JSON: it ended before the structure did)`;
    pre.dataset.index = String(index);
    if (pretty === null) pre.classList.add('incomplete');
    return pre;
  });
  structuredView.replaceChildren(...blocks);
  structuredView.hidden = blocks.length === 0;
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  const clicks = submitClicks;
  submitClicks = 0;
  // Ctrl/Cmd+Enter submits too: nothing while the button is off (a model loading, or none loaded).
  if (button.disabled) return;
  // The second click of a double click on Generate is neither a Stop nor another Generate.
  if (clicks > 1) return;
  if (running) {
    running.abort();
    return;
  }
  generation = generate();
  // On a narrow screen the output is below the fold: bring it up.
  if (narrow.matches) output.scrollIntoView({ block: 'nearest' });
});

// Ctrl/Cmd+Enter in the prompt generates, as in most playgrounds.
promptInput.addEventListener('keydown', (event) => {
  // Not the key's auto-repeat: held down, it would start and stop the completion.
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey) && !event.repeat) form.requestSubmit();
});

updateRequestView();
