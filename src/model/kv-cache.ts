// The attention KV cache of one sequence: per layer, K and V rows [position, kv_head, head_dim] in f32.
import type { LlamaConfig } from './config.ts';

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
  ) {
    this.rowBytes = KvCache.rowBytesOf(config);
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    for (let l = 0; l < config.numLayers; l++) {
      this.keys.push(device.createBuffer({ label: `k_cache.${l}`, size: capacity * this.rowBytes, usage }));
      this.values.push(device.createBuffer({ label: `v_cache.${l}`, size: capacity * this.rowBytes, usage }));
    }
  }

  /** Bytes of one position's K (or V) row across the KV heads, for `config`. */
  static rowBytesOf(config: LlamaConfig): number {
    return config.numKvHeads * config.headDim * 4;
  }

  /** Bytes a cache of `capacity` positions takes (K and V of every layer), before allocating it. */
  static byteSizeOf(config: LlamaConfig, capacity: number): number {
    return 2 * config.numLayers * capacity * KvCache.rowBytesOf(config);
  }

  get byteSize(): number {
    return 2 * this.keys.length * this.capacity * this.rowBytes;
  }

  destroy(): void {
    for (const b of [...this.keys, ...this.values]) b.destroy();
  }
}
