// The reusable decode step (LlamaModel.createDecodeStep) against forward() and the CPU reference,
// and the promise it makes: after it is created, a step creates no buffers, bind groups or pipelines.
import { describe, expect, it } from 'vitest';
import type { WeightDType } from '../../src/gpu/tensor.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { LlamaModel, type DecodeStep } from '../../src/model/llama.ts';
import type { KvCache } from '../../src/model/kv-cache.ts';
import { decodeLayerGroups } from '../../src/gpu/kernels/index.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { testGpu } from '../helpers/gpu.ts';
import { CpuLlama } from '../reference/cpu-llama.ts';
import { expectClose } from '../helpers/compare.ts';

// `layer`: whether decode_layer.wgsl can take the shape (sizes in whole vec4s, see decodeLayerFits).
// f32 weights share one arena there (several layers a dispatch, the embedding and the logits
// folded in) unless `arena` is false; `layerOnly` shapes run the decode-layer variants only.
const shapes: { name: string; config: LlamaConfig; dtype: WeightDType; layer?: boolean; arena?: false; layerOnly?: boolean }[] = [
  { name: 'GQA 6q/2kv, head_dim 4, halves, f32', config: tinyConfig(), dtype: 'f32' },
  { name: 'GQA 6q/2kv, head_dim 4, halves, f32, FFN 60', config: tinyConfig({ intermediateSize: 60 }), dtype: 'f32', layer: true },
  {
    name: 'GQA 6q/2kv, head_dim 4, halves, f32, FFN 60, a binding per matrix',
    config: tinyConfig({ intermediateSize: 60 }),
    dtype: 'f32',
    layer: true,
    arena: false,
    layerOnly: true,
  },
  {
    name: 'GQA 6q/2kv, head_dim 4, adjacent, tied, f32, FFN 60, 5 layers',
    config: tinyConfig({ intermediateSize: 60, numLayers: 5, ropePairing: 'adjacent', tieWordEmbeddings: true }),
    dtype: 'f32',
    layer: true,
    layerOnly: true,
  },
  {
    name: 'MHA 3 heads, head_dim 6, adjacent, tied, f16',
    config: tinyConfig({ hiddenSize: 18, numHeads: 3, numKvHeads: 3, headDim: 6, ropePairing: 'adjacent', tieWordEmbeddings: true, intermediateSize: 37, vocabSize: 53 }),
    dtype: 'f16',
  },
  {
    name: 'GQA 4q/1kv, head_dim 8 != hidden/heads, biases, bf16, sliding window 5',
    config: tinyConfig({ hiddenSize: 20, numHeads: 4, numKvHeads: 1, headDim: 8, attentionBias: true, numLayers: 3, ropeTheta: 500000, slidingWindow: 5 }),
    dtype: 'bf16',
  },
  {
    name: 'GQA 4q/1kv, head_dim 8, biases, f16, sliding window 5, FFN 44',
    config: tinyConfig({ hiddenSize: 20, numHeads: 4, numKvHeads: 1, headDim: 8, attentionBias: true, numLayers: 3, slidingWindow: 5, intermediateSize: 44 }),
    dtype: 'f16',
    layer: true,
  },
];

/** Counts the calls to device.createBuffer / createBindGroup / createComputePipeline(Async) while `counting` is on. */
function countCreations(device: GPUDevice) {
  const counts = { buffers: 0, bindGroups: 0, pipelines: 0 };
  let counting = false;
  const wrap = <K extends 'createBuffer' | 'createBindGroup' | 'createComputePipeline' | 'createComputePipelineAsync'>(
    name: K,
    field: keyof typeof counts,
  ) => {
    const original = device[name].bind(device) as (...args: unknown[]) => unknown;
    (device as unknown as Record<string, unknown>)[name] = (...args: unknown[]) => {
      if (counting) counts[field]++;
      return original(...args);
    };
    return () => {
      (device as unknown as Record<string, unknown>)[name] = original;
    };
  };
  const restore = [
    wrap('createBuffer', 'buffers'),
    wrap('createBindGroup', 'bindGroups'),
    wrap('createComputePipeline', 'pipelines'),
    wrap('createComputePipelineAsync', 'pipelines'),
  ];
  return {
    counts,
    during<T>(fn: () => T): T {
      counting = true;
      try {
        return fn();
      } finally {
        counting = false;
      }
    },
    restore: () => restore.forEach((r) => r()),
  };
}

async function readF32(device: GPUDevice, staging: GPUBuffer, floats: number): Promise<Float32Array> {
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(staging.getMappedRange(0, floats * 4).slice(0));
  staging.unmap();
  return out;
}

/** The lowest index of the largest value, and its log-softmax (f64). */
function argmaxLogprob(logits: Float32Array): { id: number; logprob: number } {
  let id = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[id]) id = i;
  let sum = 0;
  for (const l of logits) sum += Math.exp(l - logits[id]);
  return { id, logprob: -Math.log(sum) };
}

/**
 * DecodeStep.greedy, one step a submit from position p0 on: each step's token is the argmax of
 * the logits it leaves (lowest id on ties), written to tokenIn and to its record slot (p mod
 * slots) with its logprob; the next step embeds it (its logits match forward() on that token).
 */
async function checkGreedySteps(model: LlamaModel, step: DecodeStep, cache: KvCache, forwardCache: KvCache, p0: number, tolerance: number) {
  const device = model.ctx.device;
  const greedy = step.greedy!;
  const vocab = model.config.vocabSize;
  const read = async (buffer: GPUBuffer, offset: number, bytes: number) => {
    const staging = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, offset, staging, 0, bytes);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const out = staging.getMappedRange().slice(0);
    staging.destroy();
    return out;
  };
  let token = 5;
  device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([token]));
  const steps = Math.min(6, cache.capacity - p0);
  for (let pos = p0; pos < p0 + steps; pos++) {
    const encoder = device.createCommandEncoder();
    step.consecutive!.setPosition(encoder, pos, 1);
    const pass = encoder.beginComputePass();
    greedy.encodeInPass(pass);
    pass.end();
    device.queue.submit([encoder.finish()]);
    const logits = new Float32Array(await read(step.logits, 0, vocab * 4));
    expectClose(logits, await model.forward([token], pos, forwardCache), tolerance);
    const want = argmaxLogprob(logits);
    const slot = pos % greedy.records.slots;
    const record = new DataView(await read(greedy.records.buffer, greedy.records.offset + slot * greedy.records.bytes, greedy.records.bytes));
    expect(record.getUint32(0, true)).toBe(want.id);
    expect(record.getFloat32(4, true)).toBeCloseTo(want.logprob, 4);
    expect(new Uint32Array(await read(step.tokenIn, 0, 4))[0]).toBe(want.id);
    token = want.id;
  }
}

describe('decode step: createDecodeStep vs forward() and the CPU reference', () => {
  // chunkKeys: the attention split over the sequence in chunks of that many cache rows (two
  // dispatches a layer); undefined: the device's default, one pass for these short caches.
  // layer: a dispatch per layer (decode_layer.wgsl) where the shape fits, else five.
  const variants = [['f16', undefined, false], ['f32', undefined, false], ['f16', 5, false], ['f16', undefined, true], ['f32', undefined, true]] as const;
  for (const { name, config, dtype, layer: fits, arena, layerOnly } of shapes) for (const [kvDType, chunkKeys, layer] of variants) {
    if (layerOnly && !layer) continue;
    it(`${name}, ${kvDType} KV cache${chunkKeys ? `, attention in chunks of ${chunkKeys}` : ''}${layer ? ', a dispatch per layer' : ''}`, async () => {
      const ctx = await testGpu();
      const device = ctx.device;
      const { cpu, gpu } = buildRandomModel(ctx, config, dtype, 5);
      const model = await LlamaModel.create(ctx, config, gpu, {
        tuning: { decodeChunkKeys: chunkKeys, decodeLayer: () => layer, decodeArena: arena },
      });
      const capacity = 24;
      const forwardCache = model.createKvCache(capacity, kvDType);
      const stepCache = model.createKvCache(capacity, kvDType);
      const reference = new CpuLlama(config, cpu, capacity, kvDType);
      const vocabBytes = config.vocabSize * 4;
      const staging = device.createBuffer({ size: vocabBytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      const prefillLogits = device.createBuffer({ size: vocabBytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });

      const rand = mulberry32(9);
      const prompt = Array.from({ length: 7 }, () => Math.floor(rand() * config.vocabSize));
      const cpuPrefill = reference.forward(prompt, 0);
      const scale = Math.max(1, ...cpuPrefill.map(Math.abs));
      const wantLast = cpuPrefill.subarray((prompt.length - 1) * config.vocabSize);

      // Prefill into each cache: read back for one, left on the GPU (lastLogitsTo, no read-back) for the other.
      const readLogits = await model.forward(prompt, 0, forwardCache);
      expectClose(readLogits, wantLast, 2e-4);
      const none = await model.forward(prompt, 0, stepCache, { readBack: false, lastLogitsTo: prefillLogits });
      expect(none).toBeNull();
      const copy = device.createCommandEncoder();
      copy.copyBufferToBuffer(prefillLogits, 0, staging, 0, vocabBytes);
      device.queue.submit([copy.finish()]);
      expect(Array.from(await readF32(device, staging, config.vocabSize))).toEqual(Array.from(readLogits));

      const step = model.createDecodeStep(stepCache);
      // The fused step: embedding; per layer norm + Q/K/V, RoPE + K/V append + attention (split:
      // + combine), Wo + residual, norm + gate/up + SwiGLU, W_down + residual (or all of that as
      // one dispatch, or up to four layers with the embedding and the logits as a few); final
      // norm + lm_head.
      const arenaDispatches = decodeLayerGroups(config.numLayers, ctx.limits.maxStorageBuffersPerShaderStage, true, true).length;
      const layerDispatches = dtype === 'f32' && arena !== false ? arenaDispatches : 2 + config.numLayers;
      expect(step.dispatchCount).toBe(layer && fits ? layerDispatches : 2 + config.numLayers * (chunkKeys ? 6 : 5));
      expect(step.tokenIn.usage & GPUBufferUsage.STORAGE).toBeTruthy();
      expect(step.logits.size).toBeGreaterThanOrEqual(vocabBytes);
      const counter = countCreations(device);
      try {
        let token = prompt[prompt.length - 1];
        // Enough steps to pass the sliding window and to reach the last cache row.
        for (let pos = prompt.length; pos < capacity; pos++) {
          token = (token * 31 + 7) % config.vocabSize;
          const want = await model.forward([token], pos, forwardCache);
          const cpuWant = reference.forward([token], pos);

          device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([token]));
          const encoder = device.createCommandEncoder();
          counter.during(() => step.encodeStep(encoder, pos));
          encoder.copyBufferToBuffer(step.logits, 0, staging, 0, vocabBytes);
          device.queue.submit([encoder.finish()]);
          const got = await readF32(device, staging, config.vocabSize);

          // An f16 cache rounds k and v: where the two paths' f32 sums differ in the last bit, a
          // value can round to the neighbouring f16 (2^-11 apart), which moves logits by ~1e-4.
          expectClose(got, want, kvDType === 'f16' ? 1e-3 : 3e-5);
          expectClose(got, cpuWant, 2e-4 * scale / Math.max(...cpuWant.map(Math.abs)));
        }
        expect(counter.counts).toEqual({ buffers: 0, bindGroups: 0, pipelines: 0 });
      } finally {
        counter.restore();
      }
      expect(() => step.encodeStep(device.createCommandEncoder(), capacity)).toThrow(/outside the KV cache/);

      // A dispatch per layer advances the position on the GPU: a run of steps is one position
      // copy and one compute pass. Rewind to the prompt's end and run the same token 4 times.
      expect(!!step.consecutive).toBe(!!(layer && fits));
      if (step.consecutive) {
        const token = 3;
        const p0 = prompt.length;
        const run = 4;
        let want = await model.forward([token], p0, forwardCache);
        for (let pos = p0 + 1; pos < p0 + run; pos++) want = await model.forward([token], pos, forwardCache);
        device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([token]));
        const encoder = device.createCommandEncoder();
        step.consecutive.setPosition(encoder, p0, run);
        const pass = encoder.beginComputePass();
        for (let i = 0; i < run; i++) step.consecutive.encodeInPass(pass);
        pass.end();
        encoder.copyBufferToBuffer(step.logits, 0, staging, 0, vocabBytes);
        device.queue.submit([encoder.finish()]);
        expectClose(await readF32(device, staging, config.vocabSize), want, kvDType === 'f16' ? 1e-3 : 3e-5);
        expect(() => step.consecutive!.setPosition(device.createCommandEncoder(), capacity - 2, 3)).toThrow(/outside the KV cache/);
      }

      // The step that picks its next token itself (f32 arena with the logits folded in).
      expect(!!step.greedy).toBe(!!(layer && fits && dtype === 'f32' && arena !== false));
      if (step.greedy) await checkGreedySteps(model, step, stepCache, forwardCache, prompt.length, kvDType === 'f16' ? 1e-3 : 3e-5);

      step.destroy();
      staging.destroy();
      prefillLogits.destroy();
      forwardCache.destroy();
      stepCache.destroy();
      model.destroy();
    });
  }

  it('decode_layer.wgsl dispatches share out the layers within the storage-buffer limit', () => {
    // 10 bindings: st, the arena, the token (first) or the logits (last), two caches a layer.
    expect(decodeLayerGroups(2, 10, true, true)).toEqual([[0, 2]]);
    expect(decodeLayerGroups(3, 10, true, true)).toEqual([[0, 3]]);
    expect(decodeLayerGroups(5, 10, true, true)).toEqual([[0, 3], [3, 2]]);
    expect(decodeLayerGroups(11, 10, true, true)).toEqual([[0, 3], [3, 4], [7, 3], [10, 1]]);
    expect(decodeLayerGroups(8, 10, false, false)).toEqual([[0, 4], [4, 4]]);
    expect(decodeLayerGroups(4, 16, true, true)).toEqual([[0, 4]]);
    expect(() => decodeLayerGroups(2, 3, false, false)).toThrow(/cannot bind/);
  });

  it('the greedy pick takes the lowest id of tied logits, across the threads that share the vocabulary out', async () => {
    const ctx = await testGpu();
    const config = tinyConfig({ intermediateSize: 60 });
    const { gpu } = buildRandomModel(ctx, config, 'f32', 5);
    // W_lm_head rows: A at 5 and 7, -A at 6 and 9, zeros elsewhere. Logits v at 5 and 7, -v at 6
    // and 9: the pick is 5 (v > 0) or 6 (v < 0), each tied with an id of another thread.
    const rows = new Float32Array(config.vocabSize * config.hiddenSize);
    const a = Float32Array.from({ length: config.hiddenSize }, (_, i) => Math.sin(i + 1));
    for (const [r, sign] of [[5, 1], [7, 1], [6, -1], [9, -1]]) rows.set(a.map((v) => sign * v), r * config.hiddenSize);
    ctx.device.queue.writeBuffer(gpu.lmHead.buffer, 0, rows);
    const model = await LlamaModel.create(ctx, config, gpu, { tuning: { decodeLayer: () => true } });
    const cache = model.createKvCache(16);
    const forwardCache = model.createKvCache(16);
    await model.forward([1, 2, 3], 0, cache, { readBack: false });
    await model.forward([1, 2, 3], 0, forwardCache, { readBack: false });
    const step = model.createDecodeStep(cache);
    expect(step.greedy).toBeDefined();
    await checkGreedySteps(model, step, cache, forwardCache, 3, 3e-5);
    step.destroy();
    cache.destroy();
    forwardCache.destroy();
    model.destroy();
  });

  it('weights without COPY_SRC keep five dispatches a layer (their norms cannot be copied into the layer state)', async () => {
    const ctx = await testGpu();
    const config = tinyConfig({ intermediateSize: 60 });
    const { gpu } = buildRandomModel(ctx, config, 'f32', 5, { copySrc: false });
    const model = await LlamaModel.create(ctx, config, gpu, { tuning: { decodeLayer: () => true } });
    const cache = model.createKvCache(8);
    const step = model.createDecodeStep(cache);
    expect(step.dispatchCount).toBe(2 + 5 * config.numLayers);
    step.destroy();
    cache.destroy();
    model.destroy();
  });

  it('the counter sees what it counts (a forward() creates buffers and bind groups)', async () => {
    const ctx = await testGpu();
    const config = tinyConfig();
    const { gpu } = buildRandomModel(ctx, config, 'f32', 3);
    const model = await LlamaModel.create(ctx, config, gpu);
    const cache = model.createKvCache(8);
    const counter = countCreations(ctx.device);
    try {
      await counter.during(() => model.forward([1, 2], 0, cache));
      expect(counter.counts.buffers).toBeGreaterThan(0);
      expect(counter.counts.bindGroups).toBeGreaterThan(0);
    } finally {
      counter.restore();
    }
    cache.destroy();
    model.destroy();
  });
});
