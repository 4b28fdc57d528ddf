// GPU memory planned without loading (src/engine/memory.ts, on the weight plan of
// src/model/weights.ts): the weights, KV cache and activations of a real-shape model, and what is
// refused against the device's buffer limits and the memory budget, naming what would fit.
import { describe, expect, it } from 'vitest';
import { planWeightStorage, requiredTensors, type ModelTensor } from '../../src/model/weights.ts';
import { checkMemory, estimateMemory } from '../../src/engine/memory.ts';
import { KvCache } from '../../src/model/kv-cache.ts';
import { tinyConfig } from '../helpers/random-model.ts';

describe('GPU memory of a real-shape model, planned without loading (Llama-3.2-1B, bf16 on disk)', () => {
  const config = tinyConfig({
    vocabSize: 128256, hiddenSize: 2048, intermediateSize: 8192, numLayers: 16, numHeads: 32, numKvHeads: 8, headDim: 64,
    contextLength: 131072, tieWordEmbeddings: true,
  });
  const tensors = new Map<string, ModelTensor>(requiredTensors(config).map(({ name, shape }) => [
    name, { name, sourceName: name, shape, dtype: 'bf16', file: 'model.safetensors', offset: 0, byteLength: 2 * shape.reduce((a, b) => a * b, 1) },
  ]));
  const limits256 = { maxStorageBufferBindingSize: 256 * 2 ** 20, maxBufferSize: 2 ** 31 };
  const GiB = 2 ** 30;

  it('q4_0 puts the weights well under 1 GB, f16 at about 2.3 GiB', () => {
    const q4 = planWeightStorage(config, tensors, 'q4_0');
    const f16 = planWeightStorage(config, tensors, 'f16');
    expect(q4.totalBytes).toBeLessThan(0.7 * GiB);
    expect(f16.totalBytes / GiB).toBeCloseTo(2.3, 1);
    expect(q4.tensors.get('model.embed_tokens.weight')).toEqual({ dtype: 'q4_0', bytes: (128256 * 2048 / 32) * 18 });
    const estimate = estimateMemory(config, q4, 4096);
    // The f16 KV cache (the default) takes half the f32 one.
    expect(estimate.kvCacheBytes).toBe(2 * 16 * 4096 * 8 * 64 * 2);
    expect(estimateMemory(config, q4, 4096, 'f32').kvCacheBytes).toBe(2 * estimate.kvCacheBytes);
    // A sliding window (here 256 on every layer, Mistral-style) keeps a ring of 256 + 511 rows a layer: counted so.
    const windowed = estimateMemory({ ...config, slidingWindow: 256 }, q4, 4096);
    expect(windowed.kvCacheBytes).toBe(2 * 16 * (256 + 511) * 8 * 64 * 2);
    expect(windowed.kvLayerBytes).toBe((256 + 511) * 8 * 64 * 2);
    // f16 rows fill whole u32 words: an odd K/V row is refused (f32 takes it).
    expect(() => KvCache.rowBytesOf({ ...config, numKvHeads: 1, headDim: 3 })).toThrow(/even K\/V row/);
    expect(KvCache.rowBytesOf({ ...config, numKvHeads: 1, headDim: 3 }, 'f32')).toBe(12);
    // Weights ~663 MiB, KV cache 128 MiB, activations of a 512-token prefill pass: fits in 1.5 GiB.
    expect(estimate.totalBytes).toBeLessThan(1.5 * GiB);
    expect(() => checkMemory(estimate, q4, limits256, 1.5 * GiB, { modelId: 'llama-3.2-1b', storage: 'q4_0', contextLength: 4096 })).not.toThrow();
  });

  it("a layer's K or V cache buffer over the device's binding limit is refused, naming the contextLength that fits", () => {
    // 1024-byte f16 rows: 131072 positions make 128 MiB a layer, twice what 64 MiB allows.
    const small = { maxStorageBufferBindingSize: 64 * 2 ** 20, maxBufferSize: 2 ** 31 };
    const q4 = planWeightStorage(config, tensors, 'q4_0', small);
    const estimate = estimateMemory(config, q4, 131072);
    expect(estimate.kvLayerBytes).toBe(131072 * 8 * 64 * 2);
    expect(() => checkMemory(estimate, q4, small, undefined, { modelId: 'm', storage: 'q4_0', contextLength: 131072 })).toThrow(
      /KV cache of 131072 positions needs 134217728 bytes \(128\.0 MiB\) per layer.*at most 67108864 bytes.*contextLength of at most 65536/,
    );
    expect(() => checkMemory(estimateMemory(config, q4, 65536), q4, small, undefined, { modelId: 'm', storage: 'q4_0', contextLength: 65536 })).not.toThrow();
  });

  it("f16's 128k-token embedding is over a 256 MiB binding limit: planned as two buffers of whole rows", () => {
    const f16 = planWeightStorage(config, tensors, 'f16', limits256);
    // 4096-byte rows: 65536 of them fill 256 MiB exactly, the other 62720 go to a second buffer.
    expect(f16.tensors.get('model.embed_tokens.weight')).toEqual({
      dtype: 'f16',
      bytes: 525336576,
      parts: [{ rows: 65536, bytes: 268435456 }, { rows: 62720, bytes: 62720 * 4096 }],
    });
    expect(f16.totalBytes).toBe(planWeightStorage(config, tensors, 'f16').totalBytes); // whole rows: no padding
    const estimate = estimateMemory(config, f16, 4096);
    expect(() => checkMemory(estimate, f16, limits256, undefined, { modelId: 'm', storage: 'f16', contextLength: 4096 })).not.toThrow();
    // A plan made without the limits is one buffer, which the check refuses naming tensor, size and limit.
    const whole = planWeightStorage(config, tensors, 'f16');
    expect(() => checkMemory(estimate, whole, limits256, undefined, { modelId: 'm', storage: 'f16', contextLength: 4096 })).toThrow(
      /Tensor model\.embed_tokens\.weight needs a 525336576-byte GPU buffer \(f16\); this device allows at most 268435456 bytes per storage buffer \(maxStorageBufferBindingSize\)/,
    );
    const roomy = { maxStorageBufferBindingSize: 2 ** 31, maxBufferSize: 2 ** 31 };
    expect(() => checkMemory(estimate, f16, roomy, 2 * GiB, { modelId: 'llama-3.2-1b', storage: 'f16', contextLength: 4096 })).toThrow(
      /Model llama-3\.2-1b needs \d+ bytes \([\d.]+ MiB\) of GPU memory but the budget allows 2147483648 bytes \(2048\.0 MiB\): weights [\d.]+ MiB \(f16\), KV cache 128\.0 MiB for 4096 positions, activations ~[\d.]+ MiB\. Try weightStorage 'q8_0' or 'q4_0', or a smaller contextLength/,
    );
  });
});
