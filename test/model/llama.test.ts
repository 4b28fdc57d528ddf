// The GPU forward pass against the CPU reference on random-weight models of odd shapes.
import { describe, expect, it } from 'vitest';
import type { WeightDType } from '../../src/gpu/tensor.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { KvCache } from '../../src/model/kv-cache.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { testGpu } from '../helpers/gpu.ts';
import { CpuLlama } from '../reference/cpu-llama.ts';
import { maxAbsDiff } from '../helpers/compare.ts';
import { counterDelta, gpuCounters } from '../../src/gpu/counters.ts';

const shapes: { name: string; config: LlamaConfig; dtype: WeightDType }[] = [
  { name: 'GQA 6q/2kv, head_dim 4, halves, f32', config: tinyConfig(), dtype: 'f32' },
  {
    name: 'MHA 3 heads, head_dim 6, adjacent, tied, f16',
    config: tinyConfig({ hiddenSize: 18, numHeads: 3, numKvHeads: 3, headDim: 6, ropePairing: 'adjacent', tieWordEmbeddings: true, intermediateSize: 37, vocabSize: 53 }),
    dtype: 'f16',
  },
  {
    name: 'GQA 4q/1kv, head_dim 8 != hidden/heads, biases, bf16',
    config: tinyConfig({ hiddenSize: 20, numHeads: 4, numKvHeads: 1, headDim: 8, attentionBias: true, numLayers: 3, ropeTheta: 500000 }),
    dtype: 'bf16',
  },
];

/** The default tiny shape with random f32 weights, on the test device. */
async function tinyF32Model(seed: number) {
  const ctx = await testGpu();
  const config = tinyConfig();
  const { gpu } = buildRandomModel(ctx, config, 'f32', seed);
  return { ctx, config, model: await LlamaModel.create(ctx, config, gpu) };
}

describe('Llama forward pass: GPU vs CPU reference', () => {
  for (const { name, config, dtype } of shapes) for (const kvDType of ['f16', 'f32'] as const) {
    it(`${name}, ${kvDType} KV cache`, async () => {
      const ctx = await testGpu();
      const { cpu, gpu } = buildRandomModel(ctx, config, dtype, 7);
      const model = await LlamaModel.create(ctx, config, gpu);
      const cache = model.createKvCache(32, kvDType);
      expect(cache.kvDType).toBe(kvDType);
      expect(cache.byteSize).toBe(KvCache.byteSizeOf(config, 32, kvDType));
      // The reference rounds K and V to f16 as they are cached when the GPU's cache is f16.
      const reference = new CpuLlama(config, cpu, 32, kvDType);
      const rand = mulberry32(3);
      const prompt = Array.from({ length: 11 }, () => Math.floor(rand() * config.vocabSize));

      // Prefill: logits of every prompt token, then of the last one only.
      const gpuAll = await model.forward(prompt, 0, cache, { allLogits: true });
      const cpuAll = reference.forward(prompt, 0);
      const scale = Math.max(...cpuAll.map(Math.abs));
      expect(maxAbsDiff(gpuAll, cpuAll)).toBeLessThan(2e-4 * Math.max(1, scale));

      // Decode steps continue from the cache.
      let token = prompt[prompt.length - 1];
      for (let step = 0; step < 4; step++) {
        const pos = prompt.length + step;
        token = (token * 31 + 7) % config.vocabSize;
        const gpuStep = await model.forward([token], pos, cache);
        const cpuStep = reference.forward([token], pos);
        expect(maxAbsDiff(gpuStep, cpuStep)).toBeLessThan(2e-4 * Math.max(1, scale));
      }
      cache.destroy();
      model.destroy();
    });
  }

  it("a prefill's last-token logits equal the last row of all logits, whatever the kept activations (shorter, equal, grown)", async () => {
    const { ctx, config, model } = await tinyF32Model(12);
    const cache = model.createKvCache(32);
    const rand = mulberry32(5);
    const prompt = (n: number) => Array.from({ length: n }, () => Math.floor(rand() * config.vocabSize));
    // allLogits passes have activations of their own: their last row is the reference.
    const check = async (tokens: number[]) => {
      const all = await model.forward(tokens, 0, cache, { allLogits: true });
      const before = gpuCounters(ctx.device);
      const last = await model.forward(tokens, 0, cache);
      expect(maxAbsDiff(last, all.subarray((tokens.length - 1) * config.vocabSize))).toBeLessThan(1e-5);
      return counterDelta(gpuCounters(ctx.device), before);
    };
    await check(prompt(9)); // kept activations of 16 tokens
    // Shorter and equal: the same buffers (only the read-back's own buffer is made).
    expect((await check(prompt(5))).buffersCreated).toBe(1);
    expect((await check(prompt(16))).buffersCreated).toBe(1);
    await check(prompt(20)); // grown to 32 (the cache's capacity)
    expect((await check(prompt(3))).buffersCreated).toBe(1);
    cache.destroy();
    model.destroy();
  });

  it('prefill activations past the size cap are made per prefill and not kept', async () => {
    const { ctx, model } = await tinyF32Model(13);
    model.maxKeptPrefillBytes = 0;
    const cache = model.createKvCache(16);
    const tokens = [3, 1, 4, 1, 5, 9, 2];
    const runs: Float32Array[] = [];
    for (let i = 0; i < 2; i++) {
      const before = gpuCounters(ctx.device);
      runs.push(await model.forward(tokens, 0, cache));
      // The 13 activation buffers and the read-back's, every time.
      expect(counterDelta(gpuCounters(ctx.device), before).buffersCreated).toBeGreaterThan(10);
    }
    expect(maxAbsDiff(runs[0], runs[1])).toBe(0);
    cache.destroy();
    model.destroy();
  });
});
