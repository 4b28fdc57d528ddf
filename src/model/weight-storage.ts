// Where each tensor of a model lives on the GPU, planned before anything is allocated: its storage
// type under the `storage` option (WeightStorage), its buffer size, and for a matrix over the
// device's buffer limits the row parts it is split into.
import { maxBufferBytes, type BufferLimits } from '../gpu/device.ts';
import type { WeightDType } from '../gpu/tensor.ts';
import { isQuantized, splitMatrixRows, weightByteSize } from '../gpu/weight-layout.ts';
import type { LlamaConfig } from './config.ts';
import { requiredTensors, type ModelTensor } from './tensors.ts';

/**
 * How f32 / f16 / bf16 matrices (Hugging Face weights) are kept on the GPU:
 * - 'f16': packed f16 (f32 and bf16 converted while streaming; values beyond ±65504 are clamped
 *   to it, with one warning giving their count);
 * - 'f32': f32 (twice the memory of f16; exact for f32 and bf16 files);
 * - 'source': the file's own type, bytes as they are;
 * - 'q8_0' / 'q4_0': quantized at load to ggml's Q8_0 (8.5 bits a weight) or Q4_0 (4.5 bits)
 *   blocks of 32 weights of a row. A matrix whose rows are not a multiple of 32 falls back to f16.
 * Block-quantized GGUF tensors always keep their file type; vectors are always f32.
 */
export type WeightStorage = 'f16' | 'f32' | 'source' | 'q8_0' | 'q4_0';

export const WEIGHT_STORAGES: readonly WeightStorage[] = ['f16', 'f32', 'source', 'q8_0', 'q4_0'];

/** Where one tensor lives on the GPU. */
export interface TensorStorage {
  dtype: WeightDType;
  /** Size of its GPU buffer (of all its buffers, for a split matrix). */
  bytes: number;
  /**
   * A matrix larger than the device's per-buffer / per-binding limit is split into buffers of whole
   * rows (GpuMatrix.parts): the rows and buffer size of each, in order. Absent: one buffer.
   */
  parts?: { rows: number; bytes: number }[];
}

/** The storage of every tensor a model uploads, by canonical name, and the total bytes. */
export interface WeightStoragePlan {
  tensors: Map<string, TensorStorage>;
  totalBytes: number;
}

/** The GPU storage type of tensor `t` under `storage` (see WeightStorage). */
export function storageDType(t: ModelTensor, storage: WeightStorage): WeightDType {
  if (t.shape.length === 1) return 'f32';
  if (isQuantized(t.dtype) || storage === 'source') return t.dtype;
  if (storage === 'q8_0' || storage === 'q4_0') return t.shape[1] % 32 === 0 ? storage : 'f16';
  return storage;
}

/**
 * Storage type and buffer size of each tensor a Llama model uploads (throws on an unknown `storage`).
 * With the device's `limits`, matrices over them are planned as split into parts of whole rows
 * (TensorStorage.parts), as uploadLlamaWeights stores them.
 */
export function planWeightStorage(
  config: LlamaConfig,
  tensors: ReadonlyMap<string, ModelTensor>,
  storage: WeightStorage = 'source',
  limits?: BufferLimits,
): WeightStoragePlan {
  if (!WEIGHT_STORAGES.includes(storage)) {
    throw new Error(`Unknown weight storage ${JSON.stringify(storage)}; expected one of ${WEIGHT_STORAGES.join(', ')}`);
  }
  const out = new Map<string, TensorStorage>();
  let totalBytes = 0;
  for (const { name } of requiredTensors(config)) {
    const t = tensors.get(name);
    if (!t) continue;
    const dtype = storageDType(t, storage);
    const elements = t.shape.reduce((a, b) => a * b, 1);
    let bytes = Math.max(4, t.shape.length === 1 ? elements * 4 : dtype === t.dtype ? align4(t.byteLength) : weightByteSize(dtype, elements));
    const parts = limits && t.shape.length === 2 && bytes > maxBufferBytes(limits)
      ? splitMatrixRows(dtype, t.shape[0], t.shape[1], maxBufferBytes(limits))
      : undefined;
    if (parts) {
      bytes = parts.reduce((sum, p) => sum + p.bytes, 0);
      out.set(name, { dtype, bytes, parts });
    } else {
      out.set(name, { dtype, bytes });
    }
    totalBytes += bytes;
  }
  return { tensors: out, totalBytes };
}

/**
 * Throws unless a tensor's buffers fit the device's per-buffer and per-binding limits. A matrix
 * planned with the limits is split into parts of whole rows (TensorStorage.parts), so only one
 * whose single row is over the limit (or a plan made without the limits) is refused.
 */
export function checkTensorFits(name: string, storage: TensorStorage, limits: BufferLimits): void {
  const maxBuffer = maxBufferBytes(limits);
  const largest = storage.parts ? Math.max(...storage.parts.map((p) => p.bytes)) : storage.bytes;
  if (largest > maxBuffer) {
    const which = limits.maxStorageBufferBindingSize <= limits.maxBufferSize ? 'maxStorageBufferBindingSize' : 'maxBufferSize';
    throw new Error(
      `Tensor ${name} needs a ${storage.bytes}-byte GPU buffer (${storage.dtype}); this device allows at most ${maxBuffer} bytes per storage buffer (${which})`,
    );
  }
}

/** `n` bytes rounded up to whole 4-byte words (GPU buffer sizes). */
export const align4 = (n: number) => Math.ceil(n / 4) * 4;
