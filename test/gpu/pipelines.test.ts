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

  it('compiles an explicit layout: one bind group serves every pipeline of it, a dynamic offset included', async () => {
    const { device } = await testGpu();
    const layout = [[{ type: 'uniform', hasDynamicOffset: true, minBindingSize: 16 }, { type: 'storage' }]] as const;
    const code = `@group(0) @binding(0) var<uniform> p: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1) fn first() { out[p.x] = 1u; }
@compute @workgroup_size(1) fn second() { out[p.x] += 2u; }`;
    const cache = new PipelineCache(device);
    const first = await cache.prepare('explicit first', () => ({ code, entryPoint: 'first', layout }));
    const second = await cache.prepare('explicit second', () => ({ code, entryPoint: 'second', layout }));
    // The same source under another layout is not the same pipeline.
    expect(new PipelineCache(device).get('explicit first', () => ({ code, entryPoint: 'first' }))).not.toBe(first);
    const params = device.createBuffer({ size: 512, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(params, 256, Uint32Array.of(3, 0, 0, 0));
    const out = device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    const staging = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const group = device.createBindGroup({
      layout: first.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: params, size: 16 } },
        { binding: 1, resource: { buffer: out } },
      ],
    });
    device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setBindGroup(0, group, [256]);
    for (const pipeline of [first, second]) {
      pass.setPipeline(pipeline);
      pass.dispatchWorkgroups(1);
    }
    pass.end();
    encoder.copyBufferToBuffer(out, 0, staging, 0, 16);
    device.queue.submit([encoder.finish()]);
    expect(await device.popErrorScope()).toBeNull();
    await staging.mapAsync(GPUMapMode.READ);
    expect([...new Uint32Array(staging.getMappedRange())]).toEqual([0, 0, 0, 3]);
    staging.unmap();
    for (const b of [params, out, staging]) b.destroy();
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
