// A prompt prefilled in two passes, split anywhere (as after a cached prefix, or in chunks), gives
// bitwise the K/V and last-token logits of one pass: a prefill pass runs the same kernels for any
// number of tokens (KernelRecorder's prefill mode). Under the CPU tuning and under the GPU tuning
// (forced here), whose short passes would otherwise take other kernels: the matrix-vector kernel
// for one token, matmul.wgsl rather than matmul_tiled.wgsl under 32 tokens, attention's
// per_workgroup entry for few queries over 1024 keys or more.
import { afterAll, describe, expect, it } from 'vitest';
import { readBufferU32 } from '../../src/gpu/buffers.ts';
import { kernelTuning } from '../../src/gpu/kernels/tuning.ts';
import type { KvCache, KvDType } from '../../src/model/kv-cache.ts';
import { LlamaModel } from '../../src/model/llama.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildRandomModel, tinyConfig } from '../helpers/random-model.ts';

const config = tinyConfig({ vocabSize: 97, contextLength: 1100, hiddenSize: 128, numHeads: 2, numKvHeads: 1, headDim: 64, intermediateSize: 96 });

/** Every layer's K and V rows 0..P-1, as bits. */
async function cacheBits(device: GPUDevice, cache: KvCache, P: number): Promise<Uint32Array[]> {
  return Promise.all([...cache.keys, ...cache.values].map((b) => readBufferU32(device, b, (P * cache.rowBytes) / 4)));
}

const models: LlamaModel[] = [];
afterAll(() => models.forEach((m) => m.destroy()));

// The long prompt crosses attention's 1024 keys, where the GPU tuning's short passes would take per_workgroup.
describe.each([
  { tuning: 'CPU', kvDType: 'f32' as KvDType, P: 200, splits: [1, 100, 170, 199] },
  { tuning: 'GPU', kvDType: 'f32' as KvDType, P: 200, splits: [1, 100, 170, 199] },
  { tuning: 'GPU', kvDType: 'f16' as KvDType, P: 1060, splits: [1055] },
])('$tuning tuning, $kvDType KV cache, $P tokens', ({ tuning, kvDType, P, splits }) => {
  it(`two passes split at ${splits.join(', ')} give the one pass's K/V and logits, bit for bit`, async () => {
    const ctx = await testGpu();
    const built = buildRandomModel(ctx, config, 'f32', 3);
    const model = await LlamaModel.create(ctx, config, built.gpu, { tuning: kernelTuning({ isCpu: tuning === 'CPU', subgroupMinSize: 0 }) });
    models.push(model);
    const prompt = Array.from({ length: P }, (_, i) => (i * 37 + 5) % config.vocabSize);
    const whole = model.createKvCache(config.contextLength, kvDType);
    const logits = await model.forward(prompt, 0, whole);
    const bits = await cacheBits(ctx.device, whole, P);
    whole.destroy();
    for (const split of splits) {
      const cache = model.createKvCache(config.contextLength, kvDType);
      await model.forward(prompt.slice(0, split), 0, cache, { readBack: false });
      const got = await model.forward(prompt.slice(split), split, cache);
      expect(new Uint32Array(got!.buffer), `logits after a split at ${split}`).toEqual(new Uint32Array(logits!.buffer));
      const gotBits = await cacheBits(ctx.device, cache, P);
      gotBits.forEach((b, i) => expect(b, `K/V buffer ${i} after a split at ${split}`).toEqual(bits[i]));
      cache.destroy();
    }
  }, 300_000);
});
