// What the GPU can fail at. A lost device (a driver reset, a GPU process crash; here
// device.destroy()): the engine on it answers every request with a 503 that says so, and the
// shared device of the process is acquired afresh, so that the model loaded again runs. A load the
// device reports out of memory for (the decode step's buffers included, made by the load): an
// error that says so, and no GPU memory left behind.
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/api/engine.ts';
import { ApiError } from '../../src/api/errors.ts';
import { loadModelFromPath } from '../../src/node/index.ts';
import { nodeGpuContext } from '../../src/node/gpu.ts';
import { loadGenerator } from '../../src/engine/load.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { FakeGenerator } from '../helpers/fake-generator.ts';
import { STORIES_GGUF } from '../helpers/model-files.ts';

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

  it('a load during which the device reports out of memory fails saying so, and frees what it made', async () => {
    const ctx = await nodeGpuContext();
    const real = ctx.device;
    let scopes = 0;
    const made: GPUBuffer[] = [];
    const freed = new Set<GPUBuffer>();
    const device = new Proxy(real, {
      get(target, key) {
        if (key === 'popErrorScope') {
          // The inner scope (out-of-memory) pops first.
          return async () => (await target.popErrorScope(), scopes++ === 0 ? { message: 'fake: allocation failed' } : null);
        }
        if (key === 'createBuffer') {
          return (descriptor: GPUBufferDescriptor) => {
            const buffer = target.createBuffer(descriptor);
            const destroy = buffer.destroy.bind(buffer);
            buffer.destroy = () => (freed.add(buffer), destroy());
            made.push(buffer);
            return buffer;
          };
        }
        const value = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    await expect(loadGenerator({ ...ctx, device }, filesFromPath(STORIES_GGUF))).rejects.toThrow(/ran out of memory loading stories260K.*fake: allocation failed/);
    expect(made.length).toBeGreaterThan(0);
    // The batch's step and read-back buffers, the sampler's too: made by the load, inside its scopes.
    expect(made.map((b) => b.label)).toEqual(expect.arrayContaining(['batch_tokens', 'batch_records_readback', 'decode_records_readback']));
    expect(made.filter((b) => !freed.has(b)).map((b) => b.label)).toEqual([]);
  });

  it('two loads on one device take turns with their error scopes (a scope catches only its own load)', async () => {
    const ctx = await nodeGpuContext();
    const calls: string[] = [];
    const device = new Proxy(ctx.device, {
      get(target, key) {
        if (key === 'pushErrorScope') return (filter: GPUErrorFilter) => (calls.push('push'), target.pushErrorScope(filter));
        if (key === 'popErrorScope') return () => (calls.push('pop'), target.popErrorScope());
        const value = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const shared = { ...ctx, device };
    const [a, b] = await Promise.all([loadGenerator(shared, filesFromPath(STORIES_GGUF)), loadGenerator(shared, filesFromPath(STORIES_GGUF))]);
    expect(calls).toEqual(['push', 'push', 'pop', 'pop', 'push', 'push', 'pop', 'pop']);
    a.destroy();
    b.destroy();
  });
});
