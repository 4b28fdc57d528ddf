// A lost GPU device (a driver reset, a GPU process crash; here device.destroy()): the engine on it
// answers every request with a 503 that says so, and the shared device of the process is acquired
// afresh, so that the model loaded again runs.
import { describe, expect, it } from 'vitest';
import { Engine } from '../src/api/engine.ts';
import { ApiError } from '../src/api/errors.ts';
import { loadModelFromPath } from '../src/node/index.ts';
import { nodeGpuContext } from '../src/node/gpu.ts';
import { FakeGenerator } from './helpers/fake-generator.ts';
import { STORIES_GGUF } from './helpers/model-files.ts';

const request = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 };

describe('a lost GPU device', () => {
  it('an engine whose generator reports a lost device answers 503 device_lost, not retried', async () => {
    let lose!: (message: string) => void;
    const generator = Object.assign(new FakeGenerator(), { deviceLost: new Promise<string>((resolve) => (lose = resolve)) });
    const engine = new Engine(generator);
    await expect(engine.complete({ model: 'fake-llama', prompt: 'Hi', max_tokens: 2 })).resolves.toBeDefined();
    lose('the driver reset');
    await Promise.resolve();
    const err = await engine.complete({ model: 'fake-llama', prompt: 'Hi', max_tokens: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).toJSON().error).toMatchObject({ type: 'service_unavailable', code: 'device_lost' });
    expect((err as ApiError).message).toContain('the driver reset');
    const response = await engine.handle({ method: 'POST', url: '/v1/completions', body: JSON.stringify({ model: 'fake-llama', prompt: 'Hi' }) });
    expect(response.status).toBe(503);
    expect(response.headers['x-should-retry']).toBe('false');
  });

  it('stories260K: after the shared device is lost its engine answers 503; the model loaded again runs on a new device', async () => {
    const first = await nodeGpuContext();
    const engine = await loadModelFromPath(STORIES_GGUF);
    const want = (await engine.complete(request)).choices[0].text;
    first.device.destroy();
    await first.device.lost;
    await new Promise((resolve) => setTimeout(resolve, 0)); // the engine hears of it through its own callbacks
    await expect(engine.complete(request)).rejects.toMatchObject({ status: 503, code: 'device_lost' });

    const second = await nodeGpuContext();
    expect(second.device).not.toBe(first.device);
    const again = await loadModelFromPath(STORIES_GGUF);
    expect((await again.complete(request)).choices[0].text).toBe(want);
    await again.unload();
  });
});
