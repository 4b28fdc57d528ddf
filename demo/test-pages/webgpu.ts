// Driven by test/browser/webgpu.spec.ts: does this browser give us a device, and does a compute
// shader run on it?
import { acquireDevice } from '../../src/gpu/device.ts';

async function webgpuSmoke() {
  const ctx = await acquireDevice(navigator.gpu);
  const { device } = ctx;
  const n = 1000;
  const module = device.createShaderModule({
    code: /* wgsl */ `
      @group(0) @binding(0) var<storage, read> a: array<f32>;
      @group(0) @binding(1) var<storage, read_write> b: array<f32>;
      @compute @workgroup_size(64)
      fn main(@builtin(global_invocation_id) id: vec3u) {
        if (id.x < arrayLength(&a)) { b[id.x] = a[id.x] * 2.0 + 1.0; }
      }`,
  });
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  const input = Float32Array.from({ length: n }, (_, i) => i - 500);
  const a = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  const b = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const readback = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(a, 0, input);
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(
    0,
    device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: a } },
        { binding: 1, resource: { buffer: b } },
      ],
    }),
  );
  pass.dispatchWorkgroups(Math.ceil(n / 64));
  pass.end();
  encoder.copyBufferToBuffer(b, 0, readback, 0, n * 4);
  device.queue.submit([encoder.finish()]);
  await readback.mapAsync(GPUMapMode.READ);
  const result = new Float32Array(readback.getMappedRange().slice(0));
  readback.unmap();
  let mismatches = 0;
  for (let i = 0; i < n; i++) if (result[i] !== input[i] * 2 + 1) mismatches++;
  device.destroy();
  return { adapter: ctx.adapter, features: ctx.features, limits: ctx.limits, mismatches, sample: Array.from(result.slice(0, 4)) };
}

Object.assign(window, { webgpuSmoke });
