// Philox4x32-10: the Random123 known-answer vectors, the 32x32 -> 64 multiply against BigInt,
// the seed's key, and the WGSL copy (shaders/sample.wgsl) against the TypeScript one.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import { mulHi32, philox4x32, philoxKey, philoxUniform } from '../../src/sampling/philox.ts';
import { createRandomStream } from '../../src/sampling/random.ts';
import sampleWgsl from '../../shaders/sample.wgsl?raw';
import { testGpu } from '../helpers/gpu.ts';
import { mulberry32 } from '../helpers/prng.ts';

const hex = (words: Uint32Array) => Array.from(words, (w) => w.toString(16).padStart(8, '0')).join(' ');

describe('Philox4x32-10 on the CPU', () => {
  it('gives the Random123 known answers (kat_vectors: philox4x32 10)', () => {
    expect(hex(philox4x32([0, 0, 0, 0], [0, 0]))).toBe('6627e8d5 e169c58d bc57ac4c 9b00dbd8');
    const ones = 0xffffffff;
    expect(hex(philox4x32([ones, ones, ones, ones], [ones, ones]))).toBe('408f276d 41c83b0e a20bc7c6 6d5451fd');
    expect(hex(philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]))).toBe(
      'd16cfe09 94fdcceb 5001e420 24126ea1',
    );
  });

  it('mulHi32 is the high word of the exact 64-bit product', () => {
    const next = mulberry32(5);
    const cases: [number, number][] = [[0xffffffff, 0xffffffff], [0xd2511f53, 0xffffffff], [0x10000, 0x10000], [0, 7]];
    for (let i = 0; i < 2000; i++) cases.push([Math.floor(next() * 2 ** 32), Math.floor(next() * 2 ** 32)]);
    for (const [a, b] of cases) expect(mulHi32(a, b)).toBe(Number((BigInt(a) * BigInt(b)) >> 32n));
  });

  it('keys a seed by its 64-bit two\'s complement integer part', () => {
    expect(philoxKey(0)).toEqual([0, 0]);
    expect(philoxKey(-0)).toEqual([0, 0]);
    expect(philoxKey(1)).toEqual([1, 0]);
    expect(philoxKey(1.9)).toEqual([1, 0]);
    expect(philoxKey(-1)).toEqual([0xffffffff, 0xffffffff]);
    expect(philoxKey(-1.5)).toEqual([0xffffffff, 0xffffffff]);
    expect(philoxKey(2 ** 32 + 5)).toEqual([5, 1]);
    expect(philoxKey(2 ** 53 - 1)).toEqual([0xffffffff, 0x1fffff]);
    expect(philoxKey(-(2 ** 53))).toEqual([0, 0xffe00000]);
    expect(() => philoxKey(Infinity)).toThrow(RangeError);
  });

  it('u is the top 24 bits of the first word, exact in f32, in [0, 1)', () => {
    for (let step = 0; step < 200; step++) {
      const u = philoxUniform([7, 9], 3, step);
      expect(Math.fround(u)).toBe(u);
      expect(u >= 0 && u < 1).toBe(true);
      expect(u * 2 ** 24).toBe(philox4x32([3, step, 0, 0], [7, 9])[0] >>> 8);
    }
  });

  it('the random stream of (seed, stream) returns the numbers of steps 0, 1, 2, ...', () => {
    const r = createRandomStream(-12345, 6);
    const key = philoxKey(-12345);
    for (let step = 0; step < 10; step++) expect(r.next()).toBe(philoxUniform(key, 6, step));
    expect(r.at(3)).toBe(philoxUniform(key, 6, 3));
  });
});

describe('Philox4x32-10 in WGSL', () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await testGpu();
  });
  afterAll(() => ctx?.device.destroy());

  it('equals the TypeScript one word for word, and u bit for bit', async () => {
    const device = ctx.device;
    // The shader's Philox section alone, plus an entry point that runs it on a list of inputs.
    const start = sampleWgsl.indexOf('// ---- Philox4x32-10');
    const end = sampleWgsl.indexOf('// ----', start + 10);
    expect(start).toBeGreaterThanOrEqual(0);
    const code = `${sampleWgsl.slice(start, end)}
@group(0) @binding(0) var<storage, read> inputs: array<u32>;
@group(0) @binding(1) var<storage, read_write> outputs: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i * 6u >= arrayLength(&inputs)) { return; }
  let b = i * 6u;
  let r = philox(vec4<u32>(inputs[b], inputs[b + 1u], inputs[b + 2u], inputs[b + 3u]), vec2<u32>(inputs[b + 4u], inputs[b + 5u]));
  outputs[i * 5u] = r.x;
  outputs[i * 5u + 1u] = r.y;
  outputs[i * 5u + 2u] = r.z;
  outputs[i * 5u + 3u] = r.w;
  outputs[i * 5u + 4u] = bitcast<u32>(f32(r.x >> 8u) * (1.0 / 16777216.0));
}`;
    const next = mulberry32(17);
    const rows: number[][] = [
      [0, 0, 0, 0, 0, 0],
      [0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff],
      [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0],
    ];
    const seeds = [0, 1, -1, 42, 2 ** 53 - 1, -(2 ** 53), 123456789012, -987654321];
    for (const seed of seeds) for (let stream = 0; stream < 8; stream++) for (let step = 0; step < 16; step++) rows.push([stream, step, 0, 0, ...philoxKey(seed)]);
    while (rows.length < 4096) rows.push(Array.from({ length: 6 }, () => Math.floor(next() * 2 ** 32)));
    const inputs = Uint32Array.from(rows.flat());
    const inBuffer = device.createBuffer({ size: inputs.byteLength, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(inBuffer, 0, inputs);
    const outBytes = rows.length * 5 * 4;
    const outBuffer = device.createBuffer({ size: outBytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    const staging = device.createBuffer({ size: outBytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main' } });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: inBuffer } },
        { binding: 1, resource: { buffer: outBuffer } },
      ],
    }));
    pass.dispatchWorkgroups(Math.ceil(rows.length / 64));
    pass.end();
    encoder.copyBufferToBuffer(outBuffer, 0, staging, 0, outBytes);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const out = new Uint32Array(staging.getMappedRange().slice(0));
    staging.unmap();
    const outF = new Float32Array(out.buffer);
    let mismatches = 0;
    rows.forEach((row, i) => {
      const want = philox4x32(row.slice(0, 4), row.slice(4));
      for (let w = 0; w < 4; w++) if (out[i * 5 + w] !== want[w]) mismatches++;
      if (outF[i * 5 + 4] !== philoxUniform([row[4], row[5]], row[0], row[1]) && row[2] === 0 && row[3] === 0) mismatches++;
    });
    expect(mismatches).toBe(0);
    expect(hex(out.subarray(0, 4))).toBe('6627e8d5 e169c58d bc57ac4c 9b00dbd8');
    for (const b of [inBuffer, outBuffer, staging]) b.destroy();
  });
});
