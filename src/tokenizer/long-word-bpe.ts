// BPE merges of long words over integer ids, in place of @huggingface/tokenizers' own merge loop
// for words it does not cache (256 characters and more).
//
// Why: SentencePiece-style tokenizers (Llama 2, TinyLlama, Mistral, stories260K) have no
// pre-tokenizer, so the library hands the whole prompt to its BPE model as one word. Its merge loop
// builds an object per node and a JSON string per candidate pair, superlinear in the word, all of
// it before a prompt reaches the GPU (figures: docs/architecture.md#design-choices). This loop
// applies the same merges in the same order — the pair of lowest rank first, the leftmost of
// equal ranks (the library's tie-break: rank + position / length) — over Int32Arrays and a heap
// of numbers.
//
// Words shorter than the library's cache limit still go through its own bpe() and its cache, and
// models with end-of-word or continuing-subword suffixes are left alone entirely: the patch that
// routes long words here (speedUpLongWords) is in hf-tokenizers-adapter.ts, with the library's
// other internals. This file knows only merges and words.

/**
 * A merge loop over `merges` (pairs of symbol strings, in rank order; a repeated pair takes its
 * last rank, as the library's Map of ranks does). Returns the pieces of `word`, split into code
 * points and merged.
 */
export function longWordBpe(merges: readonly (readonly [string, string])[]): (word: string) => string[] {
  const ids = new Map<string, number>();
  const idOf = (s: string): number => {
    let id = ids.get(s);
    if (id === undefined) {
      id = ids.size;
      ids.set(s, id);
    }
    return id;
  };
  // byLeft[a].get(b): the rank of merge (a, b), small-integer keys throughout; mergedId[rank]: a + b.
  const byLeft: (Map<number, number> | undefined)[] = [];
  const mergedId = new Int32Array(merges.length);
  merges.forEach(([a, b], rank) => {
    const left = idOf(a);
    (byLeft[left] ??= new Map()).set(idOf(b), rank);
    mergedId[rank] = idOf(a + b);
  });

  return (word: string): string[] => {
    const pieces = Array.from(word);
    const n = pieces.length;
    if (n < 2) return pieces;
    // Node i is the piece that starts at code point i; a merge keeps the left node.
    const sym = new Int32Array(n);
    const next = new Int32Array(n);
    const prev = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      sym[i] = ids.get(pieces[i]) ?? -1; // -1: in no merge
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    // Candidates as rank * n + position: the smallest is the lowest rank, then the leftmost. An
    // entry is checked when popped, against the pair now at its position.
    const heap: number[] = [];
    const push = (key: number) => {
      let i = heap.length;
      heap.push(key);
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (heap[parent] <= key) break;
        heap[i] = heap[parent];
        i = parent;
      }
      heap[i] = key;
    };
    const pop = (): number => {
      const top = heap[0];
      const last = heap.pop()!;
      if (heap.length > 0) {
        let i = 0;
        for (;;) {
          const left = 2 * i + 1;
          if (left >= heap.length) break;
          const child = left + 1 < heap.length && heap[left + 1] < heap[left] ? left + 1 : left;
          if (heap[child] >= last) break;
          heap[i] = heap[child];
          i = child;
        }
        heap[i] = last;
      }
      return top;
    };
    const pairRank = (i: number): number | undefined => {
      const j = next[i];
      if (j < 0 || sym[i] < 0 || sym[j] < 0) return undefined;
      return byLeft[sym[i]]?.get(sym[j]);
    };
    const consider = (i: number) => {
      const rank = pairRank(i);
      if (rank !== undefined) push(rank * n + i);
    };
    for (let i = 0; i + 1 < n; i++) consider(i);
    while (heap.length > 0) {
      const key = pop();
      const i = key % n;
      const rank = (key - i) / n;
      // Stale: the pair at i has changed since (merged, or i merged into its left neighbour: its
      // sym is -2, which no merge has).
      if (pairRank(i) !== rank) continue;
      const j = next[i];
      sym[i] = mergedId[rank];
      pieces[i] += pieces[j];
      sym[j] = -2; // gone
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      if (prev[i] >= 0) consider(prev[i]);
      consider(i);
    }
    const out: string[] = [];
    for (let i = 0; i >= 0; i = next[i]) out.push(pieces[i]);
    return out;
  };
}
