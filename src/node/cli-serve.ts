// `webgpu-llama serve`: one HTTP server for one model or several, each request routed by its
// `model`. It listens at once (requests wait for the loads) and unloads the models when stopped.
import { constants } from 'node:os';
import { errorMessage } from '../api/errors.ts';
import type { CliIo, CliOutput } from './cli-io.ts';
import { loadFailureHint, type CliEngine, type CliLoadOptions, type CliModelSource, type ModelLoader } from './cli-load.ts';
import type { AccessOptions } from './access.ts';
import { startServer } from './http.ts';

/** One model to serve: --model as given, what it resolved to, and its load options. */
export interface ServedModel {
  model: string;
  resolved: CliModelSource;
  options: CliLoadOptions;
}

/** Where the server listens, and whom it answers (--allow-origin, --allow-host, --api-key). */
export interface ListenOptions extends AccessOptions {
  host: string;
  port: number;
}

/** What the server answers (the startup line lists it). */
export const ENDPOINTS = 'POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings, GET /v1/models, POST /tokenize, POST /detokenize, GET /health';

/** The exit code for a stop: 128 + the signal's number when `reason` names one (SIGINT 130, SIGTERM 143), else 0. */
export function exitCodeFor(reason: unknown): number {
  const signals: Partial<Record<string, number>> = constants.signals;
  const number = typeof reason === 'string' && Object.hasOwn(signals, reason) ? signals[reason] : undefined;
  return number === undefined ? 0 : 128 + number;
}

/**
 * Serves `models` until a signal (or `io.signal`) stops it; resolves to the exit code. A model
 * that fails to load ends the server (exit 1): a server missing one of its models would answer
 * its requests with 404s that look like a typo in `model`.
 */
export async function serve(
  loadModel: ModelLoader,
  models: readonly ServedModel[],
  listen: ListenOptions,
  stdout: CliOutput,
  stderr: NonNullable<CliIo['stderr']>,
  io: CliIo,
): Promise<number> {
  // Listen at once: requests wait for the models while they load.
  const loads = models.map(({ model, options }) => loadModel(model, options));
  for (const load of loads) load.catch(() => {});
  const server = await startServer(loads.length === 1 ? loads[0]! : loads, { ...listen, log: (message) => stderr.write(message + '\n') });
  for (const { model } of models) stderr.write(`webgpu-llama: loading ${model} ...\n`);
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
    // `once`: a second Ctrl-C, while the models are being unloaded, ends the process at once.
    for (const s of signals) process.once(s, onSignal);
  }
  // Each engine as it arrives, for the unload at the end; one that arrives after it is unloaded at once.
  const loaded: CliEngine[] = [];
  let closed = false;
  for (const load of loads) load.then((engine) => (closed ? void engine.unload?.() : loaded.push(engine)), () => {});
  try {
    const outcome = await Promise.race([allLoaded(models, loads), stopped.then(() => 'stopped' as const)]);
    if (outcome === 'stopped') return exitCodeFor(await stopped);
    if (typeof outcome === 'string') {
      stderr.write(`webgpu-llama: ${outcome}\n`);
      return 1;
    }
    const ids = outcome.map((engine) => `'${engine.generator.info.id}'`).join(', ');
    stdout.write(`webgpu-llama: serving ${ids} at ${server.url}/v1 (${ENDPOINTS})\n`);
    return exitCodeFor(await stopped);
  } finally {
    if (!signal) for (const s of signals) process.off(s, onSignal);
    closed = true;
    await server.close();
    // Closing the server aborted its generations; unload() frees the GPU memory once they end.
    await Promise.all(loaded.map((engine) => engine.unload?.()));
  }
}

/**
 * The engines, in the order of `models`, once all have loaded; or, as soon as one load fails,
 * what went wrong (also when two models turn out to answer to the same id).
 */
async function allLoaded(models: readonly ServedModel[], loads: readonly Promise<CliEngine>[]): Promise<CliEngine[] | string> {
  const failed = new Promise<string>((resolve) => {
    loads.forEach((load, i) => {
      const { model, resolved, options } = models[i]!;
      load.catch((err: unknown) => resolve(`failed to load ${model}: ${errorMessage(err)}${loadFailureHint(resolved, options.accessToken !== undefined, err)}`));
    });
  });
  const engines = await Promise.race([Promise.all(loads), failed]);
  if (typeof engines === 'string') return engines;
  const seen = new Set<string>();
  for (const engine of engines) {
    const { id } = engine.generator.info;
    if (seen.has(id)) return `two models answer to '${id}': give each an --id`;
    seen.add(id);
  }
  return engines;
}
