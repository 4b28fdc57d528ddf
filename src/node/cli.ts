// The `webgpu-llama` command (bin/webgpu-llama.mjs runs this file from source).
//   webgpu-llama serve --model PATH [--id NAME] [--host 127.0.0.1] [--port 8080]
//   webgpu-llama complete --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--seed S]
import { basename } from 'node:path';
import { parseArgs } from 'node:util';
import { createCompletion, type CompletionChunk, type CompletionRequest } from '../api/completions.ts';
import { errorMessage } from '../api/errors.ts';
import type { ApiEngine } from '../api/handler.ts';
import { startServer, type RunningServer } from './http.ts';

export const USAGE = `Usage:
  webgpu-llama serve --model PATH [--id NAME] [--host HOST] [--port PORT]
      Load the model and serve the OpenAI-style API (POST /v1/completions, GET /v1/models)
      over HTTP. Defaults: --host 127.0.0.1 --port 8080.
  webgpu-llama complete --model PATH --prompt TEXT [--max-tokens N] [--temperature T]
                        [--top-p P] [--seed S] [--id NAME]
      Load the model, complete the prompt and print the completion to stdout.
      Defaults: --max-tokens 16 --temperature 1 (0 = greedy) --top-p 1.
  webgpu-llama --help
      Show this help.

--model is a model file or folder (GGUF file, or a Hugging Face folder with config.json,
*.safetensors and tokenizer.json). --id is the name the model answers to in requests
(default: derived from the path).
`;

/** How the CLI loads a model (src/node/index.ts loadModelFromPath by default). */
export type ModelLoader = (path: string, options: { id?: string }) => Promise<ApiEngine>;

export interface CliIo {
  loadModel?: ModelLoader;
  stdout?: { write(text: string): unknown };
  stderr?: { write(text: string): unknown };
  /** Stops `serve` (default: SIGINT / SIGTERM). */
  signal?: AbortSignal;
  /** Told the server once it listens (tests). */
  onListening?: (server: RunningServer) => void;
}

class UsageError extends Error {}

const defaultLoader: ModelLoader = async (path, options) => {
  const { loadModelFromPath } = await import('./index.ts');
  return loadModelFromPath(path, options);
};

function numberOption(name: string, value: string | undefined, integer: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n))) {
    throw new UsageError(`--${name} must be ${integer ? 'an integer' : 'a number'}, got '${value}'`);
  }
  return n;
}

/** Runs the CLI on `argv` (without node and script); resolves to the exit code. */
export async function runCli(argv: readonly string[], io: CliIo = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  const loadModel = io.loadModel ?? defaultLoader;
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        help: { type: 'boolean', short: 'h' },
        model: { type: 'string', short: 'm' },
        id: { type: 'string' },
        host: { type: 'string' },
        port: { type: 'string' },
        prompt: { type: 'string', short: 'p' },
        'max-tokens': { type: 'string' },
        temperature: { type: 'string' },
        'top-p': { type: 'string' },
        seed: { type: 'string' },
      },
    });
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
    const loadOptions = values.id === undefined ? {} : { id: values.id };

    if (command === 'serve') {
      for (const name of ['prompt', 'max-tokens', 'temperature', 'top-p', 'seed'] as const) {
        if (values[name] !== undefined) throw new UsageError(`--${name} is for 'complete', not 'serve'`);
      }
      const port = numberOption('port', values.port, true) ?? 8080;
      if (port < 0 || port > 65535) throw new UsageError(`--port must be in 0..65535, got ${port}`);
      return await serve(loadModel, modelPath, loadOptions, values.host ?? '127.0.0.1', port, stdout, stderr, io);
    }

    for (const name of ['host', 'port'] as const) {
      if (values[name] !== undefined) throw new UsageError(`--${name} is for 'serve', not 'complete'`);
    }
    if (values.prompt === undefined) throw new UsageError('--prompt TEXT is required');
    const request: Partial<CompletionRequest> = { prompt: values.prompt, stream: true };
    const maxTokens = numberOption('max-tokens', values['max-tokens'], true);
    const temperature = numberOption('temperature', values.temperature, false);
    const topP = numberOption('top-p', values['top-p'], false);
    const seed = numberOption('seed', values.seed, true);
    if (maxTokens !== undefined) request.max_tokens = maxTokens;
    if (temperature !== undefined) request.temperature = temperature;
    if (topP !== undefined) request.top_p = topP;
    if (seed !== undefined) request.seed = seed;
    const { generator } = await loadModel(modelPath, loadOptions);
    const chunks = (await createCompletion(generator, { ...request, model: generator.info.id })) as AsyncIterable<CompletionChunk>;
    for await (const chunk of chunks) {
      const text = chunk.choices[0]?.text;
      if (text) stdout.write(text);
    }
    stdout.write('\n');
    return 0;
  } catch (err) {
    stderr.write(`webgpu-llama: ${errorMessage(err)}\n`);
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      stderr.write(`Run 'webgpu-llama --help' for usage.\n`);
    }
    return 1;
  }
}

async function serve(
  loadModel: ModelLoader,
  modelPath: string,
  loadOptions: { id?: string },
  host: string,
  port: number,
  stdout: NonNullable<CliIo['stdout']>,
  stderr: NonNullable<CliIo['stderr']>,
  io: CliIo,
): Promise<number> {
  // Listen at once: requests wait for the model while it loads.
  const engine = loadModel(modelPath, loadOptions);
  engine.catch(() => {});
  const server = await startServer(engine, { host, port, log: (message) => stderr.write(message + '\n') });
  stderr.write(`webgpu-llama: loading ${modelPath} ...\n`);
  io.onListening?.(server);
  let stop: () => void = () => {};
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  if (io.signal) io.signal.addEventListener('abort', stop, { once: true });
  else for (const s of signals) process.once(s, stop);
  try {
    try {
      const loaded = await Promise.race([engine, stopped.then(() => null)]);
      if (loaded) {
        stdout.write(`webgpu-llama: serving '${loaded.generator.info.id}' at ${server.url}/v1 (POST /v1/completions, GET /v1/models)\n`);
      }
    } catch (err) {
      stderr.write(`webgpu-llama: failed to load ${modelPath}: ${errorMessage(err)}\n`);
      return 1;
    }
    await stopped;
    return 0;
  } finally {
    if (!io.signal) for (const s of signals) process.off(s, stop);
    await server.close();
  }
}

/** Whether this module is the program (bin/webgpu-llama.mjs, or run-ts.mjs src/node/cli.ts). */
function isMain(): boolean {
  const script = process.argv[1];
  return script !== undefined && /^(webgpu-llama(\.mjs)?|cli\.ts)$/.test(basename(script));
}

if (isMain()) {
  const code = await runCli(process.argv.slice(2));
  // The GPU device may hold the event loop open; the work is done.
  process.stdout.write('', () => process.exit(code));
}
