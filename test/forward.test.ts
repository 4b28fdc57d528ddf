// The GPU forward pass against the CPU reference on random-weight models of odd shapes.
import { describe, expect, it } from 'vitest';
import type { WeightDType } from '../src/gpu/tensor.ts';
import type { LlamaConfig } from '../src/model/config.ts';
import { KvCache } from '../src/model/kv-cache.ts';
import { LlamaModel } from '../src/model/llama.ts';
import { buildRandomModel, tinyConfig } from './helpers/random-model.ts';
import { mulberry32 } from './helpers/prng.ts';
import { testGpu } from './helpers/gpu.ts';
import { CpuLlama } from './reference/cpu-llama.ts';
import { maxAbsDiff } from './helpers/compare.ts';

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

  it('the last-token logits of a prefill equal the last row of all logits', async () => {
    const ctx = await testGpu();
    const config = tinyConfig();
    const { gpu } = buildRandomModel(ctx, config, 'f32', 11);
    const model = await LlamaModel.create(ctx, config, gpu);
    const cache = model.createKvCache(16);
    const prompt = [3, 1, 4, 1, 5, 9, 2];
    const all = await model.forward(prompt, 0, cache, { allLogits: true });
    const last = await model.forward(prompt, 0, cache);
    expect(maxAbsDiff(last, all.subarray((prompt.length - 1) * config.vocabSize))).toBeLessThan(1e-5);
    cache.destroy();
    model.destroy();
  });
});
