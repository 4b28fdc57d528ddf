// Automatic prefix caching: which tokens' K/V the working KV cache holds, and saved copies of
// earlier requests' K/V within a byte budget, so that a request whose tokens begin with cached
// ones prefills only the rest (a chat turn that resends the conversation, an agent that resends
// its system prompt and tools).
//
// The working cache's full layers are read by position (a sliding-window layer's ring: below). A request
// that extends what the working cache holds (the previous turn's prompt and answer) reuses it in
// place; one that matches a saved prefix better gets it copied back (copyBufferToBuffer, far
// cheaper than its prefill: docs/prefix-cache.md). The working cache's content is saved only when
// a request is about to overwrite a part of it worth keeping. Saved prefixes are evicted least
// recently used first; a save that does not fit is skipped, so no request fails for the cache.
// Only the session holding the GPU (the scheduler) calls into it.
//
// Sliding-window layers keep a ring of R rows (KvCache.rings: position p at row p mod R, so p is
// lost once p + R is written). A sequence that goes on from position n reads, in a layer of window
// W, the keys of n - W + 1 .. n - 1: cached K/V is reused only where every ring still holds them
// (resumable); otherwise the prompt is prefilled from 0 (an earlier point would need older keys
// still). What a ring holds follows from when its positions were written (RingHistory). Saved
// prefixes copy the rings as they are, with their history.
import type { KvCache } from '../model/kv-cache.ts';

/** Fewer tokens than this about to be overwritten are not worth saving. */
export const MIN_SAVED_TOKENS = 16;
/** Prompt tokens a request always prefills, however much of it is cached: its logits need the last one. */
export const MIN_PREFILL_TOKENS = 1;

export interface PrefixCacheOptions {
  /** Whether requests reuse cached K/V at all (false: every request prefills its whole prompt). */
  enabled: boolean;
  /** GPU memory for saved prefixes, beyond the working cache (0: the working cache only). */
  maxBytes: number;
  /** The device's largest buffer: a saved prefix's layers are packed into buffers of at most this size. */
  maxBufferBytes: number;
}

/**
 * When the working cache's positions were written, as far as the rings need it: the sequence it
 * holds wrote positions from `start` on, up to `newer` (KvCache.written, a high-water mark), after
 * every write of the positions before `start`, whose writes (and those of earlier sequences) reach
 * up to `older`. A ring of R rows holds position p if nothing later wrote p + R: for p >= start if
 * p >= newer - R, for p < start if p >= max(older, newer) - R.
 */
export interface RingHistory {
  readonly start: number;
  readonly older: number;
  readonly newer: number;
}

/** Where a saved prefix keeps one layer: in buffers[buffer] at byte offset, `rows` K rows then as many V rows. */
interface SavedLayer {
  readonly buffer: number;
  readonly offset: number;
  readonly rows: number;
}

/** K and V of every layer for the positions 0..tokens.length-1 of a sequence (a ring layer: its ring), saved from the working cache. */
interface SavedPrefix {
  readonly tokens: readonly number[];
  readonly buffers: GPUBuffer[];
  readonly layers: readonly SavedLayer[];
  /** The rings' history when they were saved. */
  readonly history: RingHistory;
  readonly bytes: number;
  lastUse: number;
}

export class PrefixCache {
  /** The tokens whose K/V the working cache holds at positions 0..workingLength-1 (a prefix of workingTokens). */
  private workingTokens: readonly number[] = [];
  private workingLength = 0;
  /** Of those, the first prefilledLength were written by the prefill's kernels (the rest by decode steps). */
  private prefilledLength = 0;
  private readonly saved: SavedPrefix[] = [];
  private savedBytes = 0;
  private maxBytes: number;
  private clock = 0;
  /** Counts clear() calls: a save that awaited across one drops what it made. */
  private generation = 0;
  /** The working cache's RingHistory but `newer` (the cache's written). */
  private ringStart = 0;
  private ringOlder = 0;

  constructor(
    private readonly device: GPUDevice,
    private readonly cache: KvCache,
    private readonly options: PrefixCacheOptions,
  ) {
    this.maxBytes = options.enabled ? Math.max(0, options.maxBytes) : 0;
  }

  get enabled(): boolean {
    return this.options.enabled;
  }

  /** Bytes the saved prefixes take now. */
  get bytes(): number {
    return this.savedBytes;
  }

  /** How many prefixes are saved. */
  get size(): number {
    return this.saved.length;
  }

  /**
   * Readies the working cache for a sequence that begins with `tokens` and returns how many of
   * them it then holds (at most tokens.length - MIN_PREFILL_TOKENS). With `reuse` false it holds
   * none of them. Before anything of the working cache is overwritten, what would be lost is
   * saved when it is worth it. The copies are submitted to the queue ahead of anything the caller
   * submits next.
   */
  async prepare(tokens: readonly number[], reuse: boolean): Promise<number> {
    if (!this.options.enabled) {
      this.rewrites(0); // the rings' history still serves LlamaSession's check between sequences
      return 0;
    }
    const limit = Math.max(0, tokens.length - MIN_PREFILL_TOKENS);
    const matchWorking = commonPrefixLength(this.workingTokens, tokens, this.workingLength);
    const working = this.history;
    // A cached prefix the rings no longer hold the window before is not reused at all.
    const inRings = (n: number, history: RingHistory) => (this.resumable(n, history) ? n : 0);
    const fromWorking = reuse ? inRings(Math.min(matchWorking, limit), working) : 0;
    let source: SavedPrefix | undefined;
    let fromSaved = 0;
    if (reuse) {
      for (const s of this.saved) {
        const n = inRings(Math.min(commonPrefixLength(s.tokens, tokens), limit), s.history);
        if (n > fromSaved) [source, fromSaved] = [s, n];
      }
    }
    if (fromSaved <= fromWorking) source = undefined;
    const reused = source ? fromSaved : fromWorking;
    // What of the working cache this sequence keeps: the rest is overwritten.
    const kept = source ? Math.min(matchWorking, reused) : fromWorking;
    const generation = this.generation;
    if (this.workingLength - kept >= MIN_SAVED_TOKENS) await this.save(this.workingTokens.slice(0, this.workingLength), source);
    if (generation !== this.generation) return 0; // cleared (the model unloaded) meanwhile
    let history = working;
    if (source) {
      source.lastUse = ++this.clock;
      this.copy(source, reused, 'restore');
      history = source.history;
    }
    // The sequence writes from `reused` on, after everything before.
    this.rewrites(reused, history);
    this.holds(tokens, reused);
    return reused;
  }

  /**
   * Records that the working cache is written again from position `from` on, after every write
   * of `history` (the working cache's, or a restored saved prefix's): the rings' new history.
   */
  rewrites(from: number, history: RingHistory = this.history): void {
    this.ringStart = from;
    this.ringOlder = from === 0 ? 0 : Math.max(history.older, history.newer);
    this.cache.resetWritten(from);
  }

  /**
   * Records that the working cache holds K/V for tokens[0..length-1] at positions 0..length-1,
   * the first `prefilled` of them written by the prefill's kernels (after a prefill chunk, or a
   * sequence's tokens).
   */
  holds(tokens: readonly number[], length = tokens.length, prefilled = length): void {
    if (!this.options.enabled) return;
    this.workingTokens = tokens;
    this.workingLength = Math.min(length, tokens.length);
    this.prefilledLength = Math.min(prefilled, this.workingLength);
  }

  /** Whether the working cache holds K/V for tokens[0..n-1] at positions 0..n-1. */
  holdsPrefix(tokens: readonly number[], n = tokens.length): boolean {
    return this.options.enabled && this.workingLength >= n && commonPrefixLength(this.workingTokens, tokens, n) >= n;
  }

  /** The held tokens whose K/V decode steps wrote (positions from..to-1), if any. */
  get decoded(): { tokens: readonly number[]; from: number; to: number } | undefined {
    if (this.prefilledLength >= this.workingLength) return undefined;
    return { tokens: this.workingTokens, from: this.prefilledLength, to: this.workingLength };
  }

  /** The working cache's RingHistory. */
  private get history(): RingHistory {
    return { start: this.ringStart, older: this.ringOlder, newer: this.cache.written };
  }

  /**
   * Whether a sequence can go on from position n over K/V with this history: every ring layer
   * (window W, R rows) still holds positions max(0, n - W + 1) .. n - 1. Always, without rings.
   */
  resumable(n: number, history: RingHistory = this.history): boolean {
    const { rings, windows } = this.cache;
    return rings.every((ring, l) => {
      if (!ring || n === 0) return true;
      const oldest = Math.max(0, n - windows[l]! + 1);
      const high = oldest < history.start ? Math.max(history.older, history.newer) : history.newer;
      return oldest >= high - ring.rows;
    });
  }

  /** Frees every saved prefix and forgets the working cache's content. */
  clear(): void {
    this.generation++;
    for (const s of this.saved) destroyAll(s.buffers);
    this.saved.length = 0;
    this.savedBytes = 0;
    this.ringStart = this.ringOlder = 0;
    this.holds([]);
  }

  /**
   * Saves K/V of positions 0..tokens.length-1 of the working cache, evicting least recently used
   * prefixes (never `pinned`, which the caller is about to restore) until it fits. A prefix another
   * saved one begins with is dropped; one already covered is not saved again. Skipped when it does
   * not fit, or when the GPU cannot allocate it.
   */
  private async save(tokens: readonly number[], pinned: SavedPrefix | undefined): Promise<void> {
    const covering = this.saved.find((s) => s.tokens.length >= tokens.length && commonPrefixLength(s.tokens, tokens) === tokens.length);
    if (covering) {
      covering.lastUse = ++this.clock;
      return;
    }
    const cache = this.cache;
    const history = this.history;
    // A full layer's rows 0..tokens.length-1; a ring's rows as far as written (all, once it wrapped).
    const layerRows = cache.rings.map((ring) => (ring ? Math.min(ring.rows, history.newer) : tokens.length));
    const maxBuffer = this.options.maxBufferBytes;
    const layers: SavedLayer[] = [];
    const bufferBytes: number[] = [];
    for (const rows of layerRows) {
      const layerBytes = 2 * rows * cache.rowBytes;
      if (layerBytes > maxBuffer) return;
      if (bufferBytes.length === 0 || bufferBytes[bufferBytes.length - 1]! + layerBytes > maxBuffer) bufferBytes.push(0);
      layers.push({ buffer: bufferBytes.length - 1, offset: bufferBytes[bufferBytes.length - 1]!, rows });
      bufferBytes[bufferBytes.length - 1]! += layerBytes;
    }
    const bytes = bufferBytes.reduce((a, b) => a + b, 0);
    // Nothing is evicted for a save that cannot fit once all but `pinned` is.
    if (bytes > this.maxBytes - (pinned?.bytes ?? 0)) return;
    for (const s of [...this.saved]) {
      if (s !== pinned && commonPrefixLength(s.tokens, tokens) === s.tokens.length) this.drop(s);
    }
    while (this.savedBytes + bytes > this.maxBytes) {
      const victim = this.leastRecentlyUsed(pinned);
      if (!victim) return;
      this.drop(victim);
    }
    const device = this.device;
    device.pushErrorScope('validation');
    device.pushErrorScope('out-of-memory');
    const buffers = bufferBytes.map((size, i) =>
      device.createBuffer({ label: `saved_prefix.${i}`, size: Math.max(4, size), usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST }),
    );
    const prefix: SavedPrefix = { tokens, buffers, layers, history, bytes, lastUse: ++this.clock };
    this.copy(prefix, tokens.length, 'save');
    const outOfMemory = device.popErrorScope();
    const invalid = device.popErrorScope();
    const generation = this.generation;
    const failed = (await outOfMemory.catch(() => null)) ?? (await invalid.catch(() => null));
    if (failed || generation !== this.generation) {
      destroyAll(buffers);
      // The GPU has less memory than the budget assumed: the budget shrinks by what it could not give.
      if (failed) this.maxBytes = Math.max(this.savedBytes, this.maxBytes - bytes);
      return;
    }
    this.saved.push(prefix);
    this.savedBytes += bytes;
  }

  /**
   * Submits the copies of positions 0..length-1 of every layer's K and V (a ring layer's saved
   * rows, all of them) between the working cache and `prefix`: into it ('save') or out of it ('restore').
   */
  private copy(prefix: SavedPrefix, length: number, direction: 'save' | 'restore'): void {
    const { keys, values, rowBytes, rings } = this.cache;
    const encoder = this.device.createCommandEncoder({ label: `${direction}_prefix` });
    for (let l = 0; l < keys.length; l++) {
      // Layer l's K rows, then its V rows, in the saved prefix's buffers.
      const place = prefix.layers[l]!;
      const buffer = prefix.buffers[place.buffer]!;
      const offset = place.offset;
      const span = place.rows * rowBytes;
      const bytes = (rings[l] ? place.rows : length) * rowBytes;
      if (bytes === 0) continue;
      if (direction === 'save') {
        encoder.copyBufferToBuffer(keys[l]!, 0, buffer, offset, bytes);
        encoder.copyBufferToBuffer(values[l]!, 0, buffer, offset + span, bytes);
      } else {
        encoder.copyBufferToBuffer(buffer, offset, keys[l]!, 0, bytes);
        encoder.copyBufferToBuffer(buffer, offset + span, values[l]!, 0, bytes);
      }
    }
    this.device.queue.submit([encoder.finish()]);
  }

  private leastRecentlyUsed(except: SavedPrefix | undefined): SavedPrefix | undefined {
    let oldest: SavedPrefix | undefined;
    for (const s of this.saved) if (s !== except && (!oldest || s.lastUse < oldest.lastUse)) oldest = s;
    return oldest;
  }

  private drop(s: SavedPrefix): void {
    this.saved.splice(this.saved.indexOf(s), 1);
    this.savedBytes -= s.bytes;
    destroyAll(s.buffers);
  }
}

/** How many leading elements `a` (its first `aLength`) and `b` share. */
export function commonPrefixLength(a: readonly number[], b: readonly number[], aLength = a.length): number {
  const n = Math.min(aLength, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}


function destroyAll(buffers: readonly GPUBuffer[]): void {
  for (const b of buffers) b.destroy();
}
