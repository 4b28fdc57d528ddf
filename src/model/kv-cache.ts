// The attention KV cache of one sequence: per layer, K and V rows [row, kv_head, head_dim], in f16
// (two halves a u32 word, rounded to nearest even by Kernels.writeKv; the default, half the
// memory, as llama.cpp's cache) or f32.
//
// A layer without a window keeps a row for every position (row p: position p). A sliding-window
// layer (window W: a query sees the W latest keys, itself included) keeps a ring of
// R = W + passTokens - 1 rows, position p at row p mod R, when that is less than the capacity (as
// llama.cpp's SWA cache keeps only the window): a pass of up to passTokens tokens writes its rows
// before its queries read, and the oldest key its first query reads (W - 1 before it) is then
// still there. Prefill passes longer than passTokens are split (LlamaModel.forward), which gives
// the same K/V and logits.
import type { KvDType, KvRing } from '../gpu/kernels/index.ts';
import { modelLayers, type LlamaConfig } from './config.ts';

export type { KvDType };

/** The longest prefill pass a ring cache takes by default (the generator's prefill chunk). */
export const DEFAULT_RING_PASS_TOKENS = 512;

export class KvCache {
  /** Per layer: every slot's K rows, slot s of layer l from byte slotOffset(l, s). */
  readonly keys: GPUBuffer[] = [];
  readonly values: GPUBuffer[] = [];
  /** Bytes of one position's K (or V) row across the KV heads. */
  readonly rowBytes: number;
  /** Each layer's rows: the capacity, or a sliding-window layer's ring (see rings). */
  readonly rows: readonly number[];
  /** Each layer's ring, or undefined where the layer keeps every position. */
  readonly rings: readonly (KvRing | undefined)[];
  /** Each layer's window (undefined: none). */
  readonly windows: readonly (number | undefined)[];
  /** The most tokens one pass may write (Infinity without rings). */
  readonly maxPassTokens: number;

  constructor(
    device: GPUDevice,
    config: LlamaConfig,
    /** Positions the cache holds: the longest sequence (prompt + completion) it can serve. */
    readonly capacity: number,
    /** Element type of the cached K and V. */
    readonly kvDType: KvDType = 'f16',
    /** The longest prefill pass its ring layers take (their rows: window + passTokens - 1); Infinity: no rings. */
    passTokens: number = DEFAULT_RING_PASS_TOKENS,
    /**
     * Sequences it holds, each in a region of its own (a slot): slot s of layer l is rows[l] rows
     * from byte slotOffset(l, s) of keys[l] and values[l]. One slot: the buffers are that slot.
     */
    readonly slots = 1,
  ) {
    if (!(Number.isInteger(slots) && slots >= 1)) throw new Error(`slots must be an integer >= 1, got ${slots}`);
    this.rowBytes = KvCache.rowBytesOf(config, kvDType);
    this.windows = modelLayers(config).map((layer) => layer.slidingWindow);
    this.rows = KvCache.layerRowsOf(config, capacity, passTokens);
    this.rings = this.rows.map((rows) => (rows < capacity ? { rows, positions: capacity } : undefined));
    this.maxPassTokens = this.rings.some((r) => r) ? passTokens : Infinity;
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    for (let l = 0; l < config.numLayers; l++) {
      const size = slots * this.slotBytes(l);
      this.keys.push(device.createBuffer({ label: `k_cache.${l}`, size, usage }));
      this.values.push(device.createBuffer({ label: `v_cache.${l}`, size, usage }));
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

  /** Each layer's rows in a cache of `capacity` positions: a window layer's ring where it is shorter. */
  static layerRowsOf(config: LlamaConfig, capacity: number, passTokens: number = DEFAULT_RING_PASS_TOKENS): number[] {
    if (!(passTokens >= 1)) throw new Error(`passTokens must be at least 1, got ${passTokens}`);
    return modelLayers(config).map((layer) =>
      layer.slidingWindow === undefined ? capacity : Math.min(capacity, layer.slidingWindow + passTokens - 1),
    );
  }

  /** Bytes a cache of `capacity` positions takes (K and V of every layer, per slot), before allocating it. */
  static byteSizeOf(config: LlamaConfig, capacity: number, kvDType: KvDType = 'f16', passTokens: number = DEFAULT_RING_PASS_TOKENS): number {
    const rows = KvCache.layerRowsOf(config, capacity, passTokens).reduce((a, b) => a + b, 0);
    return 2 * rows * KvCache.rowBytesOf(config, kvDType);
  }

  /** Bytes of every slot (K and V of every layer). */
  get byteSize(): number {
    return this.slots * 2 * this.rows.reduce((a, b) => a + b, 0) * this.rowBytes;
  }

  /** Bytes of one slot's rows of layer l (K, or V). */
  slotBytes(l: number): number {
    return this.rows[l]! * this.rowBytes;
  }

  /** Byte offset of slot s's rows in keys[l] and values[l]. */
  slotOffset(l: number, s: number): number {
    if (!(Number.isInteger(s) && s >= 0 && s < this.slots)) throw new RangeError(`slot ${s} is outside 0..${this.slots - 1}`);
    return s * this.slotBytes(l);
  }

  /** Whether some layer keeps a ring rather than every position. */
  get ringed(): boolean {
    return this.maxPassTokens !== Infinity;
  }

  /**
   * The end of the positions written since resetWritten (a high-water mark: forward() and the
   * decode steps raise it as they record their writes). A ring row of position p is overwritten
   * by position p + rows: what the rings still hold follows from it (engine/prefix-cache.ts).
   */
  get written(): number {
    return this.writtenEnd;
  }
  private writtenEnd = 0;

  /** Records that positions up to `end` (exclusive) are, or are about to be, written. */
  noteWritten(end: number): void {
    if (end > this.writtenEnd) this.writtenEnd = end;
  }

  /** Starts the high-water mark again at `end` (a sequence that writes from there on). */
  resetWritten(end: number): void {
    this.writtenEnd = end;
  }

  destroy(): void {
    for (const b of [...this.keys, ...this.values]) b.destroy();
  }
}
