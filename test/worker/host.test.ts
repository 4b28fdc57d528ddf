// The dedicated-worker placement in one realm: loadModelInWorker (the page's side) talking over real
// MessagePorts to serveEngineHost (the worker's side) in a stand-in Worker, with a fake model. What
// a worker that outlives a model does: a given Worker takes a new load after a failed one and after
// unload(), and nothing waits forever on a worker that unload() ended.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Engine } from '../../src/api/engine.ts';
import { serveEngineHost, type CommandSource, type ModelLoader } from '../../src/worker/host.ts';
import { loadModelInWorker } from '../../src/worker/worker-engine.ts';
import { FakeGenerator } from '../helpers/fake-generator.ts';

const SOURCE = 'https://app.example/models/m.gguf';

/** What happened, in order: each load the host started, each model freed. */
let log: string[] = [];
/** The next loads' outcomes, in order; an Error fails that load. */
let outcomes: (Error | 'ok')[] = [];

const loader: ModelLoader = async () => {
  log.push('load');
  const outcome = outcomes.shift() ?? 'ok';
  if (outcome instanceof Error) throw outcome;
  // 20 ms a token: a stream of a few tokens is still running when the test acts on it.
  const generator = Object.assign(new FakeGenerator({ script: ' Once upon a time there was a robot.', delayMs: 20 }), {
    destroy: () => void log.push('destroy'),
  });
  return new Engine(generator);
};

/** A Worker running the engine host in this realm; terminated, it drops every message, as a real one does. */
class FakeWorker extends EventTarget {
  terminated = false;
  private listener: ((event: MessageEvent) => void) | null = null;

  constructor(..._args: unknown[]) {
    super();
    const scope: CommandSource = { addEventListener: (_type, listener) => (this.listener = listener) };
    serveEngineHost(scope, loader);
  }

  postMessage(data: unknown, transfer: MessagePort[] = []): void {
    if (this.terminated) return;
    const event = { data: structuredClone(data), ports: transfer } as unknown as MessageEvent;
    setTimeout(() => this.listener?.(event), 0);
  }

  terminate(): void {
    this.terminated = true;
  }
}

/** The promise's outcome, or 'pending' if it has not settled within `ms`. */
async function settled<T>(promise: Promise<T>, ms = 1000): Promise<{ value: T } | { error: unknown } | 'pending'> {
  const timeout = new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms));
  return Promise.race([promise.then((value) => ({ value }), (error: unknown) => ({ error })), timeout]);
}

const request = { model: 'fake-llama', prompt: 'Hello', max_tokens: 4, temperature: 0 };

beforeEach(() => {
  log = [];
  outcomes = [];
  vi.stubGlobal('Worker', FakeWorker);
});
afterEach(() => {
  vi.unstubAllGlobals();
});

describe('loadModelInWorker over the engine host', () => {
  it('requestStats() after unload() of a worker it started rejects instead of waiting for the ended worker', async () => {
    const remote = await loadModelInWorker(SOURCE);
    expect(await remote.requestStats()).toEqual({ inFlight: 0, completed: 0, aborted: 0 });
    await remote.unload();
    const outcome = await settled(remote.requestStats());
    expect(outcome).not.toBe('pending');
    expect((outcome as { error: Error }).error.message).toMatch(/unloaded/);
  });

  it('a given Worker takes a new load after a failed load, and after unload()', async () => {
    const worker = new FakeWorker();
    outcomes = [new Error('network error')];
    await expect(loadModelInWorker(SOURCE, { worker: worker as unknown as Worker })).rejects.toThrow('network error');

    const second = await loadModelInWorker(SOURCE, { worker: worker as unknown as Worker });
    expect((await second.complete(request)).choices[0]!.text.length).toBeGreaterThan(0);
    // Loaded: a second model in the same worker is refused, with what to do.
    await expect(loadModelInWorker(SOURCE, { worker: worker as unknown as Worker })).rejects.toThrow(/unload it first/);

    await second.unload();
    expect(worker.terminated).toBe(false); // the page's worker: unload() leaves it running
    expect(await second.requestStats()).toMatchObject({ inFlight: 0 }); // and it still answers
    const third = await loadModelInWorker(SOURCE, { worker: worker as unknown as Worker });
    expect((await third.complete(request)).choices[0]!.text.length).toBeGreaterThan(0);
    expect(log).toEqual(['load', 'load', 'destroy', 'load']);
  });

  it('a load sent while the previous model still serves a stream waits until that model is freed', async () => {
    const worker = new FakeWorker() as unknown as Worker;
    const first = await loadModelInWorker(SOURCE, { worker });
    const stream = (await first.complete({ ...request, max_tokens: 8, stream: true }))[Symbol.asyncIterator]();
    await stream.next(); // the stream holds the model
    const unloaded = first.unload();
    const next = loadModelInWorker(SOURCE, { worker });
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(log).toEqual(['load']); // neither freed nor loaded while the stream runs
    while (!(await stream.next()).done) { /* read to the end */ }
    await unloaded;
    await next;
    expect(log).toEqual(['load', 'destroy', 'load']);
  });
});
