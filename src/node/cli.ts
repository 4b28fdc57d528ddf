// The `webgpu-llama` command (bin/webgpu-llama.mjs runs this file, from source or from dist/cli.js).
//   webgpu-llama serve --model PATH [--id NAME] [--weight-storage TYPE] [--host 127.0.0.1] [--port 8080]
//   webgpu-llama complete --model PATH --prompt TEXT|- [--max-tokens N] [--temperature T] [--top-p P] [--seed S]
//                         [--stop TEXT]... [--top-k K] [--min-p P] [--repetition-penalty R]
//                         [--presence-penalty P] [--frequency-penalty F] [--logit-bias ID=BIAS]...
//                         [--ignore-eos] [--json BODY]
import { realpathSync } from 'node:fs';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createCompletion, type CompletionChunk, type CompletionResponse } from '../api/completions.ts';
import { errorMessage } from '../api/errors.ts';
import type { ApiEngine } from '../api/handler.ts';
import { validateCompletionRequest } from '../api/schema.ts';
import { WEIGHT_STORAGES, type WeightStorage } from '../model/weights.ts';
import { checkModelPath } from './files.ts';
import { startServer, type RunningServer } from './http.ts';

export const USAGE = `Usage:
  webgpu-llama serve --model PATH [--id NAME] [--weight-storage TYPE] [--host HOST] [--port PORT]
      Load the model and serve the OpenAI-style API (POST /v1/completions, GET /v1/models)
      over HTTP. Defaults: --host 127.0.0.1 --port 8080. CORS is open to any origin: any web
      page you visit can call the server (and, with --host 0.0.0.0, anyone on your network).
      Ctrl-C (SIGINT) or SIGTERM stops it (exit code 130 or 143).
  webgpu-llama complete --model PATH --prompt TEXT|- [--id NAME] [--weight-storage TYPE]
                        [--max-tokens N] [--temperature T] [--top-p P] [--seed S]
                        [--stop TEXT]... [--top-k K] [--min-p P] [--repetition-penalty R]
                        [--presence-penalty P] [--frequency-penalty F]
                        [--logit-bias ID=BIAS]... [--ignore-eos] [--json BODY]
      Load the model, complete the prompt and print the completion to stdout as it is
      generated. --prompt - reads the prompt from stdin (less one trailing newline).
      Defaults: --max-tokens 16 --temperature 1 (0 = greedy) --top-p 1.
      --json takes any further /v1/completions parameters as a JSON object (e.g.
      '{"n": 2, "min_tokens": 4}'); it wins over the flags. With n > 1 the choices are printed
      one after another. '{"stream": false}' prints the completion once it is done; so does
      best_of > n (the best are known only at the end).
  webgpu-llama --help
      Show this help.

--model is a model file or folder (GGUF file, or a Hugging Face folder with config.json,
*.safetensors and tokenizer.json). --id is the name the model answers to in requests
(default: derived from the path). --weight-storage f16|f32|source|q8_0|q4_0 sets how a Hugging
Face model's weights are kept on the GPU (default f16; GGUF files keep their types).
Numbers are plain decimals (integers for --port, --max-tokens, --seed, --top-k).
`;

/** What the CLI loads: the Engine's API, and its unload() when it has one (serve frees the GPU on exit). */
export type CliEngine = ApiEngine & { unload?(): Promise<void> };

/** How the CLI loads a model (src/node/index.ts loadModelFromPath by default). */
export type ModelLoader = (path: string, options: { id?: string; weightStorage?: WeightStorage }) => Promise<CliEngine>;

/** Where the CLI writes. A stream's `error` events (EPIPE: the reader has gone) stop `complete`. */
export interface CliOutput {
  write(text: string): unknown;
  on?(event: 'error', listener: (err: Error) => void): unknown;
  off?(event: 'error', listener: (err: Error) => void): unknown;
}

export interface CliIo {
  loadModel?: ModelLoader;
  stdout?: CliOutput;
  stderr?: { write(text: string): unknown };
  /** Read for `--prompt -` (default: process.stdin). */
  stdin?: AsyncIterable<string | Uint8Array>;
  /**
   * Stops `serve` (default: SIGINT / SIGTERM). An abort whose reason is a signal's name
   * ('SIGINT') exits as that signal does (130); any other reason exits 0.
   */
  signal?: AbortSignal;
  /** Told the server once it listens (tests). */
  onListening?: (server: RunningServer) => void;
}

class UsageError extends Error {}

const DAWN_PACKAGE = 'webgpu@0.6.2';

/**
 * Imports Dawn (the `webgpu` package) so that its failure is one clear line: the package
 * missing, or its native binary failing to load (no build for this platform, a missing shared
 * library), which would otherwise surface as a stack trace from deep inside the load.
 */
export async function loadDawn(importDawn: () => Promise<unknown> = () => import('webgpu')): Promise<void> {
  try {
    await importDawn();
  } catch (err) {
    const message = errorMessage(err);
    if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' && /['"]webgpu['"]/.test(message)) {
      throw new Error(`the Node host needs the \`webgpu\` package (Dawn): npm install ${DAWN_PACKAGE}`);
    }
    // Node's "Cannot find module" message goes on with the require stack: the first line says it.
    throw new Error(
      `the \`webgpu\` package (Dawn) failed to load: ${message.split('\n')[0]} ` +
        `(reinstall it, npm install ${DAWN_PACKAGE}, on a platform it has a build for: linux, macOS or Windows, x64 or arm64)`,
    );
  }
}

const defaultLoader: ModelLoader = async (path, options) => {
  // The path before Dawn and the GPU: a typo is reported at once, whatever the machine.
  await checkModelPath(path);
  await loadDawn();
  const { loadModelFromPath } = await import('./index.ts');
  return loadModelFromPath(path, options);
};

// Plain decimals only: Number() also takes '0x1F90', '0b11', ' 8 ' and, for an integer, '1e3'.
const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+(\.\d+)?|\.\d+)(e[+-]?\d+)?$/i;

/** `value` as a number, or undefined when it is not a plain decimal (an integer one if `integer`). */
function parseDecimal(value: string, integer: boolean): number | undefined {
  const n = Number(value);
  if (!(integer ? INTEGER : DECIMAL).test(value) || !Number.isFinite(n) || (integer && !Number.isSafeInteger(n))) return undefined;
  return n;
}

function numberOption(name: string, value: string | undefined, integer: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = parseDecimal(value, integer);
  if (n === undefined) throw new UsageError(`--${name} must be ${integer ? 'an integer' : 'a number'}, got '${value}'`);
  return n;
}

const OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  model: { type: 'string', short: 'm' },
  id: { type: 'string' },
  'weight-storage': { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  prompt: { type: 'string', short: 'p' },
  'max-tokens': { type: 'string' },
  temperature: { type: 'string' },
  'top-p': { type: 'string' },
  seed: { type: 'string' },
  stop: { type: 'string', multiple: true },
  'top-k': { type: 'string' },
  'min-p': { type: 'string' },
  'repetition-penalty': { type: 'string' },
  'presence-penalty': { type: 'string' },
  'frequency-penalty': { type: 'string' },
  'logit-bias': { type: 'string', multiple: true },
  'ignore-eos': { type: 'boolean' },
  json: { type: 'string' },
} as const;

/**
 * parseArgs refuses `--presence-penalty -0.5` (a value that starts with a dash reads as a
 * forgotten one); a negative number after a flag that takes a value is that value.
 */
function joinNegativeNumbers(argv: readonly string[]): string[] {
  const options = OPTIONS as Record<string, { type: string; short?: string }>;
  const takesValue = (arg: string) =>
    Object.entries(options).some(([name, o]) => o.type === 'string' && (arg === `--${name}` || (o.short !== undefined && arg === `-${o.short}`)));
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return [...out, ...argv.slice(i)];
    const next = argv[i + 1];
    if (next !== undefined && /^-\.?\d/.test(next) && takesValue(arg)) {
      out.push(arg.startsWith('--') ? `${arg}=${next}` : arg + next); // -p-1: a short option's inline value
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true; strict: true }>>['values'];

/** Runs the CLI on `argv` (without node and script); resolves to the exit code. */
export async function runCli(argv: readonly string[], io: CliIo = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  const loadModel = io.loadModel ?? defaultLoader;
  try {
    const { values, positionals } = parseArgs({ args: joinNegativeNumbers(argv), allowPositionals: true, strict: true, options: OPTIONS });
    if (values.help) {
      stdout.write(USAGE);
      return 0;
    }
    const [command, ...extra] = positionals;
    if (!command) throw new UsageError('a command is required (serve or complete)');
    if (extra.length > 0) throw new UsageError(`unexpected argument '${extra[0]}'`);
    if (command !== 'serve' && command !== 'complete') throw new UsageError(`unknown command '${command}'`);
    const modelPath = values.model;
    if (!modelPath) throw new UsageError('--model PATH is required');
    const weightStorage = values['weight-storage'];
    if (weightStorage !== undefined && !(WEIGHT_STORAGES as readonly string[]).includes(weightStorage)) {
      throw new UsageError(`--weight-storage must be one of ${WEIGHT_STORAGES.join(', ')}, got '${weightStorage}'`);
    }
    const loadOptions = {
      ...(values.id === undefined ? {} : { id: values.id }),
      ...(weightStorage === undefined ? {} : { weightStorage: weightStorage as WeightStorage }),
    };

    const completeOnly = [
      'prompt', 'max-tokens', 'temperature', 'top-p', 'seed', 'stop', 'top-k', 'min-p', 'repetition-penalty',
      'presence-penalty', 'frequency-penalty', 'logit-bias', 'ignore-eos', 'json',
    ] as const;
    if (command === 'serve') {
      for (const name of completeOnly) {
        if (values[name] !== undefined) throw new UsageError(`--${name} is for 'complete', not 'serve'`);
      }
      const port = numberOption('port', values.port, true) ?? 8080;
      if (port < 0 || port > 65535) throw new UsageError(`--port must be in 0..65535, got ${port}`);
      return await serve(loadModel, modelPath, loadOptions, values.host ?? '127.0.0.1', port, stdout, stderr, io);
    }

    for (const name of ['host', 'port'] as const) {
      if (values[name] !== undefined) throw new UsageError(`--${name} is for 'serve', not 'complete'`);
    }
    if (values.prompt === undefined) throw new UsageError('--prompt TEXT is required (--prompt - reads it from stdin)');
    const prompt = values.prompt === '-' ? await readPrompt(io.stdin ?? process.stdin) : values.prompt;
    const request = completionRequest(prompt, values);
    // Checked before the load: a bad parameter should not wait for a multi-GB model. (The
    // model's own limits, the context length and vocabulary, are checked once it is loaded.)
    const { stream } = validateCompletionRequest({ ...request, model: 'placeholder' });
    let engine: CliEngine;
    try {
      engine = await loadModel(modelPath, loadOptions);
    } catch (err) {
      throw new Error(`failed to load ${modelPath}: ${errorMessage(err)}`, { cause: err });
    }
    return await complete(engine, request, stream, stdout);
  } catch (err) {
    stderr.write(`webgpu-llama: ${errorMessage(err)}\n`);
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      stderr.write(`Run 'webgpu-llama --help' for usage.\n`);
    }
    return 1;
  }
}

/** All of stdin as text, less the one trailing newline that `echo` and heredocs add. */
async function readPrompt(stdin: AsyncIterable<string | Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of stdin) text += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
  return (text + decoder.decode()).replace(/\r?\n$/, '');
}

/** The /v1/completions body the flags and --json ask for (without `model`). */
function completionRequest(prompt: string, values: Values): Record<string, unknown> {
  const request: Record<string, unknown> = { prompt };
  const numeric: [string, keyof Values, boolean][] = [
    ['max_tokens', 'max-tokens', true],
    ['temperature', 'temperature', false],
    ['top_p', 'top-p', false],
    ['seed', 'seed', true],
    ['top_k', 'top-k', true],
    ['min_p', 'min-p', false],
    ['repetition_penalty', 'repetition-penalty', false],
    ['presence_penalty', 'presence-penalty', false],
    ['frequency_penalty', 'frequency-penalty', false],
  ];
  for (const [param, flag, integer] of numeric) {
    const value = numberOption(flag, values[flag] as string | undefined, integer);
    if (value !== undefined) request[param] = value;
  }
  if (values.stop) request.stop = values.stop;
  if (values['ignore-eos']) request.ignore_eos = true;
  if (values['logit-bias']) {
    const bias: Record<string, number> = {};
    for (const pair of values['logit-bias']) {
      const m = /^(\d+)=(.+)$/.exec(pair);
      const value = m ? parseDecimal(m[2]!, false) : undefined;
      if (!m || value === undefined) throw new UsageError(`--logit-bias takes ID=BIAS (e.g. 13=-100), got '${pair}'`);
      bias[m[1]!] = value;
    }
    request.logit_bias = bias;
  }
  if (values.json !== undefined) {
    let extra: unknown;
    try {
      extra = JSON.parse(values.json);
    } catch (err) {
      throw new UsageError(`--json must be a JSON object: ${errorMessage(err)}`);
    }
    if (typeof extra !== 'object' || extra === null || Array.isArray(extra)) throw new UsageError('--json must be a JSON object');
    Object.assign(request, extra);
  }
  if (given(request, 'stream') === undefined) request.stream = !wantsBestOf(request);
  return request;
}

/** A parameter as validation sees it: at the top level, or in `extra_body`. */
function given(request: Record<string, unknown>, name: string): unknown {
  const extra = request.extra_body;
  return request[name] ?? (typeof extra === 'object' && extra !== null ? (extra as Record<string, unknown>)[name] : undefined);
}

/** best_of > n: the best choices are known only once all are done, so the CLI does not stream then. */
function wantsBestOf(request: Record<string, unknown>): boolean {
  const bestOf = given(request, 'best_of');
  const n = given(request, 'n') ?? 1;
  return typeof bestOf === 'number' && typeof n === 'number' && bestOf > n;
}

/**
 * Prints the completion: choice 0 as it streams, the others (n > 1, batches) once done, one after
 * another. If stdout's reader goes away (EPIPE: `| head`), the generation stops and the exit is a
 * quiet 0, as for any command in a pipe; another stdout error is reported.
 */
async function complete(engine: CliEngine, request: Record<string, unknown>, stream: boolean, stdout: CliOutput): Promise<number> {
  const controller = new AbortController();
  const output: { error: (Error & { code?: string }) | null } = { error: null };
  const onError = (err: Error) => {
    output.error ??= err;
    controller.abort(err);
  };
  stdout.on?.('error', onError);
  const write = (text: string) => {
    if (text && !output.error) stdout.write(text);
  };
  try {
    const body = { ...request, model: engine.generator.info.id };
    const later = new Map<number, string>();
    if (stream) {
      const chunks = (await createCompletion(engine.generator, body, { signal: controller.signal })) as AsyncIterable<CompletionChunk>;
      for await (const chunk of chunks) {
        for (const choice of chunk.choices) {
          if (choice.index === 0) write(choice.text);
          else later.set(choice.index, (later.get(choice.index) ?? '') + choice.text);
        }
      }
      write('\n');
    } else {
      const response = (await createCompletion(engine.generator, body, { signal: controller.signal })) as CompletionResponse;
      for (const choice of response.choices) later.set(choice.index, choice.text);
      write(`${later.get(0) ?? ''}\n`);
      later.delete(0);
    }
    for (const index of [...later.keys()].sort((a, b) => a - b)) write(`--- choice ${index}\n${later.get(index)}\n`);
  } catch (err) {
    if (!output.error) throw err; // else: the generation was aborted because stdout failed
  } finally {
    stdout.off?.('error', onError);
  }
  if (output.error && output.error.code !== 'EPIPE') throw new Error(`cannot write the completion: ${errorMessage(output.error)}`);
  return 0;
}

/** The exit code for a stop: 128 + the signal's number when `reason` names one (SIGINT 130, SIGTERM 143), else 0. */
function exitCodeFor(reason: unknown): number {
  const signals: Partial<Record<string, number>> = constants.signals;
  const number = typeof reason === 'string' && Object.hasOwn(signals, reason) ? signals[reason] : undefined;
  return number === undefined ? 0 : 128 + number;
}

async function serve(
  loadModel: ModelLoader,
  modelPath: string,
  loadOptions: { id?: string },
  host: string,
  port: number,
  stdout: CliOutput,
  stderr: NonNullable<CliIo['stderr']>,
  io: CliIo,
): Promise<number> {
  // Listen at once: requests wait for the model while it loads.
  const engine = loadModel(modelPath, loadOptions);
  engine.catch(() => {});
  const server = await startServer(engine, { host, port, log: (message) => stderr.write(message + '\n') });
  stderr.write(`webgpu-llama: loading ${modelPath} ...\n`);
  io.onListening?.(server);
  let stop: (reason: unknown) => void = () => {};
  const stopped = new Promise<unknown>((resolve) => (stop = resolve));
  const onSignal = (signal: NodeJS.Signals) => stop(signal);
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  const { signal } = io;
  if (signal) {
    if (signal.aborted) stop(signal.reason);
    else signal.addEventListener('abort', () => stop(signal.reason), { once: true });
  } else {
    // `once`: a second Ctrl-C, while the model is being unloaded, ends the process at once.
    for (const s of signals) process.once(s, onSignal);
  }
  let loaded: CliEngine | null = null;
  try {
    try {
      loaded = await Promise.race([engine, stopped.then(() => null)]);
      if (loaded) {
        stdout.write(`webgpu-llama: serving '${loaded.generator.info.id}' at ${server.url}/v1 (POST /v1/completions, GET /v1/models)\n`);
      }
    } catch (err) {
      stderr.write(`webgpu-llama: failed to load ${modelPath}: ${errorMessage(err)}\n`);
      return 1;
    }
    return exitCodeFor(await stopped);
  } finally {
    if (!signal) for (const s of signals) process.off(s, onSignal);
    await server.close();
    // Closing the server aborted its generations; unload() frees the GPU memory once they end.
    // (Stopped while the model was still loading, there is nothing to free yet: the exit frees it.)
    await loaded?.unload?.();
  }
}

/** Whether `script` (process.argv[1]) is the module at `moduleUrl`, by its real path (links resolved). */
export function isMainScript(script: string | undefined, moduleUrl: string): boolean {
  if (script === undefined) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(moduleUrl));
  } catch {
    return false;
  }
}

/**
 * Runs the CLI on process.argv and exits with its code. bin/webgpu-llama.mjs calls it; so does
 * this module when it is the program itself (`node dist/cli.js`, `bin/run-ts.mjs src/node/cli.ts`).
 */
export async function main(): Promise<void> {
  let running = true;
  // While runCli runs it handles stdout's errors itself; after it, a reader gone (EPIPE) as the
  // last line went out is no news, and another failure is reported as the exit.
  process.stdout.on('error', (err: Error & { code?: string }) => {
    if (running || err.code === 'EPIPE') return;
    process.stderr.write(`webgpu-llama: cannot write to stdout: ${errorMessage(err)}\n`);
    process.exit(1);
  });
  const code = await runCli(process.argv.slice(2));
  running = false;
  // The GPU device may hold the event loop open; the work is done once stdout is flushed.
  process.stdout.write('', () => process.exit(code));
}

if (isMainScript(process.argv[1], import.meta.url)) await main();
