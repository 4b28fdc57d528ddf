import { describe, expect, it, vi } from 'vitest';
import { PipelineCache } from '../../src/gpu/pipelines.ts';
import { testGpu } from '../helpers/gpu.ts';

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

  it('shares what it compiled with the other caches of the device, for the same source only', async () => {
    const { device } = await testGpu();
    const source = (body: string) => ({ code: `@compute @workgroup_size(1) fn main() {${body}}`, entryPoint: 'main' });
    const first = await new PipelineCache(device).prepare('empty kernel', () => source(''));
    // Another model's cache takes it (a model loaded again compiles nothing)...
    expect(new PipelineCache(device).get('empty kernel', () => source(''))).toBe(first);
    expect(await new PipelineCache(device).prepare('empty kernel', () => source(''))).toBe(first);
    // ...but not under a key that misses a constant of the source: that one compiles its own.
    const other = new PipelineCache(device).get('empty kernel', () => source(' let x = 1u; '));
    expect(other).not.toBe(first);
  });

  it("does not share a pipeline whose source failed to compile: another cache's prepare() still reports it", async () => {
    const { device } = await testGpu();
    const first = new PipelineCache(device, { async: false });
    const messages: string[] = [];
    first.onCompileError = (message) => messages.push(message);
    device.pushErrorScope('validation');
    first.get('broken kernel, shared', () => broken);
    await device.popErrorScope();
    await vi.waitFor(() => expect(messages).toHaveLength(1));
    await expect(new PipelineCache(device).prepare('broken kernel, shared', () => broken)).rejects.toThrow(/WGSL compile error/);
  });
});
