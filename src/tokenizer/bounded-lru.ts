// A least-recently-used map bounded by its number of entries and by the sum of a weight given with
// each entry (characters, for the caches here): the caches of parsed chat templates and of BPE
// words, whose keys come from requests, hold at most what their bounds say however large the
// requests' templates and words are.

export class BoundedLru<K, V> {
  private readonly entries = new Map<K, { value: V; weight: number }>();
  private total = 0;

  constructor(
    readonly maxEntries: number,
    readonly maxWeight: number,
  ) {}

  /** Entries held. */
  get size(): number {
    return this.entries.size;
  }

  /** The sum of the held entries' weights. */
  get weight(): number {
    return this.total;
  }

  /** The value of `key`, now the most recently used; undefined when not held. */
  get(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.value;
  }

  /** Holds `value` under `key` as the most recently used, dropping the least recently used beyond the bounds (the newest stays, whatever its weight). */
  set(key: K, value: V, weight: number): void {
    this.delete(key);
    this.entries.set(key, { value, weight });
    this.total += weight;
    while (this.entries.size > 1 && (this.entries.size > this.maxEntries || this.total > this.maxWeight)) {
      this.delete(this.entries.keys().next().value as K);
    }
  }

  clear(): void {
    this.entries.clear();
    this.total = 0;
  }

  private delete(key: K): void {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.entries.delete(key);
    this.total -= entry.weight;
  }
}
