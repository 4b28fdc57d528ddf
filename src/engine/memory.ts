// What a model needs on the GPU, computed before anything is allocated: its weights in their GPU
// storage, the KV cache for the context, and an estimate of the activation buffers. WebGPU has no
// portable "available memory" query, so the total is compared with a budget the caller gives
// (LoadOptions.memoryBudgetBytes); per-buffer limits come from the device.
import type { LlamaConfig } from '../model/config.ts';
import { KvCache, type KvDType } from '../model/kv-cache.ts';
import { activationFloatsPerToken } from '../model/llama.ts';
import { maxBufferBytes } from '../gpu/device.ts';
import { checkTensorFits, type WeightStoragePlan } from '../model/weights.ts';
import { DEFAULT_PREFILL_CHUNK_TOKENS } from './generator.ts';

export interface MemoryEstimate {
  /** Weight buffers, in their GPU storage. */
  weightBytes: number;
  /** K and V of every layer for `contextLength` positions (a sliding-window layer's: its ring, KvCache). */
  kvCacheBytes: number;
  /** One layer's K (or V) buffer: a buffer, and a binding, of its own. */
  kvLayerBytes: number;
  /**
   * Activation buffers of a prefill pass of up to DEFAULT_PREFILL_CHUNK_TOKENS tokens (residual
   * stream, projections, FFN, last-position logits and their readback). An estimate: prompts
   * scored with every position's logits (echo + logprobs) need T x vocab x 4 bytes more.
   */
  activationBytes: number;
  totalBytes: number;
}


/** Bytes of the activation buffers of one forward pass over `tokens` tokens (last-position logits). */
export function activationBytes(config: LlamaConfig, tokens: number): number {
  const c = config;
  // Decode activations (one token) are kept as well as the prefill's.
  return 4 * ((tokens + 1) * activationFloatsPerToken(c) + 2 * c.hiddenSize + 4 * c.vocabSize);
}

export function estimateMemory(config: LlamaConfig, plan: WeightStoragePlan, contextLength: number, kvDType: KvDType = 'f16'): MemoryEstimate {
  const weightBytes = plan.totalBytes;
  const kv = KvCache.byteSizeOf(config, contextLength, kvDType);
  // Longer prompts are prefilled in passes of at most this many tokens (LlamaGenerator).
  const act = activationBytes(config, Math.min(contextLength, DEFAULT_PREFILL_CHUNK_TOKENS));
  return {
    weightBytes,
    kvCacheBytes: kv,
    kvLayerBytes: Math.max(...KvCache.layerRowsOf(config, contextLength)) * KvCache.rowBytesOf(config, kvDType),
    activationBytes: act,
    totalBytes: weightBytes + kv + act,
  };
}

export const MiB = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

/**
 * Throws before allocation when a tensor or a layer's K/V cache buffer exceeds the device's buffer
 * limits (naming what, its size and the limit), or when the total exceeds `memoryBudgetBytes`
 * (naming needed vs available). A plan made with the device's limits (planWeightStorage) splits
 * large matrices into parts of whole rows, counted in its totalBytes; only a matrix whose single
 * row is over the limit is refused.
 */
export function checkMemory(
  estimate: MemoryEstimate,
  plan: WeightStoragePlan,
  limits: { maxStorageBufferBindingSize: number; maxBufferSize: number },
  memoryBudgetBytes: number | undefined,
  what: { modelId: string; storage: string; contextLength: number },
): void {
  for (const [name, storage] of plan.tensors) checkTensorFits(name, storage, limits);
  const maxBuffer = maxBufferBytes(limits);
  if (estimate.kvLayerBytes > maxBuffer) {
    const positions = Math.floor((maxBuffer / estimate.kvLayerBytes) * what.contextLength);
    throw new Error(
      `Model ${what.modelId}: a KV cache of ${what.contextLength} positions needs ${estimate.kvLayerBytes} bytes (${MiB(estimate.kvLayerBytes)}) ` +
        `per layer for K and for V; this device allows at most ${maxBuffer} bytes (${MiB(maxBuffer)}) per storage buffer. ` +
        `Use a contextLength of at most ${positions}.`,
    );
  }
  if (memoryBudgetBytes === undefined) return;
  if (!(memoryBudgetBytes >= 0)) throw new Error(`memoryBudgetBytes must be a non-negative number, got ${memoryBudgetBytes}`);
  if (estimate.totalBytes > memoryBudgetBytes) {
    throw new Error(
      `Model ${what.modelId} needs ${estimate.totalBytes} bytes (${MiB(estimate.totalBytes)}) of GPU memory but the budget allows ` +
        `${memoryBudgetBytes} bytes (${MiB(memoryBudgetBytes)}): weights ${MiB(estimate.weightBytes)} (${what.storage}), ` +
        `KV cache ${MiB(estimate.kvCacheBytes)} for ${what.contextLength} positions, activations ~${MiB(estimate.activationBytes)}. ` +
        (what.storage === 'f16' || what.storage === 'f32' ? `Try weightStorage 'q8_0' or 'q4_0', or a smaller contextLength.` : 'Try a smaller contextLength.'),
    );
  }
}
