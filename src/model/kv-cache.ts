// The attention KV cache of one sequence: per layer, K and V rows [position, kv_head, head_dim],
// in f16 (two halves a u32 word, rounded to nearest even by Kernels.writeKv; the default, half
// the memory, as llama.cpp's cache) or f32.
import type { KvDType } from '../gpu/kernels/index.ts';
import type { LlamaConfig } from './config.ts';

export type { KvDType };

export class KvCache {
  readonly keys: GPUBuffer[] = [];
  readonly values: GPUBuffer[] = [];
  /** Bytes of one position's K (or V) row across the KV heads. */
  readonly rowBytes: number;

  constructor(
    device: GPUDevice,
    config: LlamaConfig,
    /** Positions the cache holds: the longest sequence (prompt + completion) it can serve. */
    readonly capacity: number,
    /** Element type of the cached K and V. */
    readonly kvDType: KvDType = 'f16',
  ) {
    this.rowBytes = KvCache.rowBytesOf(config, kvDType);
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    for (let l = 0; l < config.numLayers; l++) {
      this.keys.push(device.createBuffer({ label: `k_cache.${l}`, size: capacity * this.rowBytes, usage }));
      this.values.push(device.createBuffer({ label: `v_cache.${l}`, size: capacity * this.rowBytes, usage }));
    }
  }

  /**
   * Bytes of one position's K (or V) row across the KV heads, for `config`. An f16 row must fill
   * whole u32 words: numKvHeads * headDim must be even (it is for real models: head_dim is even).
   */
  static rowBytesOf(config: LlamaConfig, kvDType: KvDType = 'f16'): number {
    const elems = config.numKvHeads * config.headDim;
    if (kvDType === 'f32') return elems * 4;
    if (elems % 2 !== 0) {
      throw new Error(`an f16 KV cache needs an even K/V row; numKvHeads * headDim = ${elems} (use kvCacheDType 'f32')`);
    }
    return elems * 2;
  }

  /** Bytes a cache of `capacity` positions takes (K and V of every layer), before allocating it. */
  static byteSizeOf(config: LlamaConfig, capacity: number, kvDType: KvDType = 'f16'): number {
    return 2 * config.numLayers * capacity * KvCache.rowBytesOf(config, kvDType);
  }

  get byteSize(): number {
    return 2 * this.keys.length * this.capacity * this.rowBytes;
  }

  destroy(): void {
    for (const b of [...this.keys, ...this.values]) b.destroy();
  }
}
