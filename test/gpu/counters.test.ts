// GPU counters (src/gpu/counters.ts) on a real device: a hand-made sequence of calls gives exact
// counts, and the wrapped methods still do their work (the shader's own tally of workgroups and
// the bytes read back prove the arguments reach the device unchanged).
import { beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import { counterDelta, gpuCounters, hasGpuCounters, type GpuCounters } from '../../src/gpu/counters.ts';
import { readBufferF32 } from '../../src/gpu/buffers.ts';
import { testGpu } from '../helpers/gpu.ts';

// Each workgroup adds 1 to tally[0]: the number of workgroups that ran, whatever the dispatch kind.
const TALLY_WGSL = /* wgsl */ `
@group(0) @binding(0) var<storage, read_write> tally: array<atomic<u32>>;
@compute @workgroup_size(1)
fn main() { atomicAdd(&tally[0], 1u); }
`;

let ctx: GpuContext;
let device: GPUDevice;

beforeAll(async () => {
  ctx = await testGpu();
  device = ctx.device;
});

describe('gpuCounters', () => {
  it('are installed by acquireDevice', () => {
    expect(hasGpuCounters(device)).toBe(true);
  });

  it('count a hand-made sequence exactly, and the calls still work', async () => {
    const before = gpuCounters(device);

    const tally = device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    const indirect = device.createBuffer({ size: 12, usage: GPUBufferUsage.INDIRECT | GPUBufferUsage.COPY_DST });
    const staging = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const writable = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC });

    // Typed array: offset and size in elements (2 u32 = 8 bytes); ArrayBuffer: whole (12 bytes).
    device.queue.writeBuffer(tally, 0, new Uint32Array([0, 0, 0, 0, 7, 7]), 2, 2);
    device.queue.writeBuffer(indirect, 0, new Uint32Array([5, 1, 1]).buffer);

    const module = device.createShaderModule({ code: TALLY_WGSL });
    const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    const bindGroup = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: tally } }] });

    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(2);
    pass.dispatchWorkgroups(3, 1, 1);
    pass.dispatchWorkgroupsIndirect(indirect, 0);
    pass.end();
    const second = encoder.beginComputePass();
    second.setPipeline(pipeline);
    second.setBindGroup(0, bindGroup);
    second.dispatchWorkgroups(1);
    second.end();
    encoder.copyBufferToBuffer(tally, 0, staging, 0, 16);
    const empty = device.createCommandEncoder();
    device.queue.submit([encoder.finish(), empty.finish()]);
    device.queue.submit([]);

    await staging.mapAsync(GPUMapMode.READ);
    const ran = new Uint32Array(staging.getMappedRange().slice(0))[0];
    staging.unmap();
    await writable.mapAsync(GPUMapMode.WRITE); // a write mapping is not a read-back
    writable.unmap();

    const delta = counterDelta(gpuCounters(device), before);
    expect(ran).toBe(2 + 3 + 5 + 1);
    expect(delta).toEqual({
      dispatches: 4,
      computePasses: 2,
      copies: 1,
      submits: 2,
      commandBuffers: 2,
      readBacks: 1,
      buffersCreated: 4,
      bufferBytesCreated: 16 + 12 + 16 + 16,
      bindGroupsCreated: 1,
      commandEncodersCreated: 2,
      pipelinesCreated: 2,
      writeBuffers: 2,
      writeBufferBytes: 8 + 12,
    } satisfies GpuCounters);
    for (const b of [tally, indirect, staging, writable]) b.destroy();
  });

  it('count the helpers that read back: one staging buffer, one submit, one read-back', async () => {
    const buffer = device.createBuffer({ size: 32, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(buffer, 0, new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]));
    const before = gpuCounters(device);
    const values = await readBufferF32(device, buffer, 4, 8);
    const delta = counterDelta(gpuCounters(device), before);
    expect([...values]).toEqual([3, 4, 5, 6]);
    expect(delta).toMatchObject({ readBacks: 1, submits: 1, commandBuffers: 1, buffersCreated: 1, bufferBytesCreated: 16, dispatches: 0, writeBuffers: 0 });
    buffer.destroy();
  });

  it('give snapshots that later calls do not change', () => {
    const snapshot = gpuCounters(device);
    const buffersBefore = snapshot.buffersCreated;
    device.createBuffer({ size: 4, usage: GPUBufferUsage.STORAGE }).destroy();
    expect(snapshot.buffersCreated).toBe(buffersBefore);
    expect(Object.isFrozen(snapshot)).toBe(true);
    expect(gpuCounters(device).buffersCreated).toBe(buffersBefore + 1);
  });

  it('refuse a device without counters', () => {
    expect(() => gpuCounters({} as GPUDevice)).toThrow(/no counters/);
  });
});
