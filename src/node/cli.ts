// The `webgpu-llama` command (bin/webgpu-llama.mjs runs this file from source).
//   webgpu-llama serve --model PATH [--id NAME] [--weight-storage TYPE] [--host 127.0.0.1] [--port 8080]
//   webgpu-llama complete --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--seed S]
//                         [--stop TEXT]... [--top-k K] [--min-p P] [--repetition-penalty R]
//                         [--presence-penalty P] [--frequency-penalty F] [--logit-bias ID=BIAS]...
//                         [--ignore-eos] [--json BODY]
import { basename } from 'node:path';
import { parseArgs } from 'node:util';
import { createCompletion, type CompletionChunk } from '../api/completions.ts';
import { errorMessage } from '../api/errors.ts';
import type { ApiEngine } from '../api/handler.ts';
import { WEIGHT_STORAGES, type WeightStorage } from '../model/weights.ts';
import { startServer, type RunningServer } from './http.ts';

export const USAGE = `Usage:
  webgpu-llama serve --model PATH [--id NAME] [--host HOST] [--port PORT]
      Load the model and serve the OpenAI-style API (POST /v1/completions, GET /v1/models)
      over HTTP. Defaults: --host 127.0.0.1 --port 8080.
  webgpu-llama complete --model PATH --prompt TEXT [--max-tokens N] [--temperature T]
                        [--top-p P] [--seed S] [--id NAME] [--stop TEXT]... [--top-k K]
                        [--min-p P] [--repetition-penalty R] [--presence-penalty P]
                        [--frequency-penalty F] [--logit-bias ID=BIAS]... [--ignore-eos]
                        [--json BODY]
      Load the model, complete the prompt and print the completion to stdout.
      Defaults: --max-tokens 16 --temperature 1 (0 = greedy) --top-p 1.
      --json takes any further /v1/completions parameters as a JSON object (e.g.
      '{"n": 2, "min_tokens": 4}'); with n > 1 the choices are printed one after another.
  webgpu-llama --help
      Show this help.

--model is a model file or folder (GGUF file, or a Hugging Face folder with config.json,
*.safetensors and tokenizer.json). --id is the name the model answers to in requests
(default: derived from the path). --weight-storage f16|f32|source|q8_0|q4_0 sets how a Hugging
Face model's weights are kept on the GPU (default f16; GGUF files keep their types).
`;

/** How the CLI loads a model (src/node/index.ts loadModelFromPath by default). */
export type ModelLoader = (path: string, options: { id?: string; weightStorage?: WeightStorage }) => Promise<ApiEngine>;

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
    if (values.prompt === undefined) throw new UsageError('--prompt TEXT is required');
    const request: Record<string, unknown> = { prompt: values.prompt };
    const numeric: [string, keyof typeof values, boolean][] = [
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
        const value = m ? Number(m[2]) : NaN;
        if (!m || !Number.isFinite(value)) throw new UsageError(`--logit-bias takes ID=BIAS (e.g. 13=-100), got '${pair}'`);
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
    const { generator } = await loadModel(modelPath, loadOptions);
    const chunks = (await createCompletion(generator, { ...request, model: generator.info.id, stream: true })) as AsyncIterable<CompletionChunk>;
    // Choice 0 is printed as it streams; the others (n > 1, batches) once done, one after another.
    const later = new Map<number, string>();
    for await (const chunk of chunks) {
      for (const choice of chunk.choices) {
        if (choice.index === 0) {
          if (choice.text) stdout.write(choice.text);
        } else {
          later.set(choice.index, (later.get(choice.index) ?? '') + choice.text);
        }
      }
    }
    stdout.write('\n');
    for (const index of [...later.keys()].sort((a, b) => a - b)) stdout.write(`--- choice ${index}\n${later.get(index)}\n`);
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
