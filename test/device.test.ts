import { describe, expect, it, vi } from 'vitest';
import { PipelineCache } from '../src/gpu/pipelines.ts';
import { testGpu } from './helpers/gpu.ts';

describe('device acquisition', () => {
  it('reports features and limits it read from the adapter', async () => {
    const ctx = await testGpu();
    expect(typeof ctx.features.shaderF16).toBe('boolean');
    expect(typeof ctx.features.subgroups).toBe('boolean');
    expect(ctx.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
    expect(ctx.limits.maxComputeInvocationsPerWorkgroup).toBeGreaterThanOrEqual(256);
    expect(ctx.device.limits.maxStorageBufferBindingSize).toBe(ctx.limits.maxStorageBufferBindingSize);
  });
});

describe('pipeline cache', () => {
  const broken = { code: '@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }', entryPoint: 'main' };

  it('reports the compiler errors of a pipeline compiled on first use (otherwise only a validation error)', async () => {
    const { device } = await testGpu();
    const cache = new PipelineCache(device, { async: false });
    const messages: string[] = [];
    cache.onCompileError = (message) => messages.push(message);
    device.pushErrorScope('validation');
    cache.get('broken kernel, on first use', () => broken);
    expect(await device.popErrorScope()).not.toBeNull();
    await vi.waitFor(() => expect(messages).toHaveLength(1));
    expect(messages[0]).toMatch(/^WGSL compile error in broken kernel, on first use:\n {2}1:\d+ /);
  });

  it('rejects a prepared pipeline that does not compile, with the same message', async () => {
    const { device } = await testGpu();
    const cache = new PipelineCache(device);
    await expect(cache.prepare('broken kernel, prepared', () => broken)).rejects.toThrow(/^WGSL compile error in broken kernel, prepared:\n {2}1:\d+ /);
  });

  it('shares what it compiled with the other caches of the device (a model loaded again compiles nothing)', async () => {
    const { device } = await testGpu();
    const spec = { code: '@compute @workgroup_size(1) fn main() {}', entryPoint: 'main' };
    const first = await new PipelineCache(device).prepare('empty kernel', () => spec);
    const compile = vi.fn(() => spec);
    const second = new PipelineCache(device);
    expect(second.has('empty kernel')).toBe(true);
    expect(second.get('empty kernel', compile)).toBe(first);
    expect(compile).not.toHaveBeenCalled();
  });
});
