// The draw from processed logits, after temperature: top_k -> top_p -> min_p -> draw.
//
// "Most likely" orders tokens by probability, highest first, the lower id first on ties: top_k
// keeps the k first, top_p the shortest prefix whose mass reaches top_p (the crossing token
// included). Both are selections (quickselect), never a sort by probability, so a step costs O(V)
// even for a flat distribution over 128k tokens. The draw walks the survivors in ascending id
// order (inverse CDF): u = random.next() * their mass, the first whose cumulative mass exceeds u.
import type { RandomStream } from '../../src/sampling/random.ts';

export interface DrawSettings {
  /** > 0 (0 is greedy and never gets here). */
  temperature: number;
  /** Keep the k most likely tokens; 0 or undefined: all. */
  topK?: number;
  /** Nucleus mass in [0, 1]; 1 or undefined: all; 0: the most likely token alone. */
  topP?: number;
  /** Keep tokens with p >= minP * p_max; 0 or undefined: all. */
  minP?: number;
}

/** Index of the largest value; the lowest index wins a tie (greedy is deterministic). NaN never wins; all -Infinity gives 0. */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  let bestValue = -Infinity;
  for (let i = 0; i < values.length; i++) {
    if (values[i] > bestValue) {
      bestValue = values[i];
      best = i;
    }
  }
  return best;
}

/** Whether `a` comes before `b`: higher value, or equal value and lower id. A strict total order. */
function before(values: ArrayLike<number>, a: number, b: number): boolean {
  return values[a] > values[b] || (values[a] === values[b] && a < b);
}

/**
 * Moves the `k` first ids (in the order above) of ids[0..n) to ids[0..k), in no particular
 * order. Quickselect (Hoare partition, median of three): O(n) expected, no sort.
 */
export function selectTop(ids: Uint32Array, n: number, values: ArrayLike<number>, k: number): void {
  if (k <= 0) return;
  if (k < n) {
    let lo = 0;
    let hi = n - 1;
    const target = k - 1;
    while (hi > lo) {
      const mid = (lo + hi) >>> 1;
      let a = ids[lo];
      let b = ids[mid];
      let c = ids[hi];
      if (before(values, b, a)) [a, b] = [b, a];
      if (before(values, c, b)) {
        [b, c] = [c, b];
        if (before(values, b, a)) [a, b] = [b, a];
      }
      const pivot = b;
      let i = lo;
      let j = hi;
      while (i <= j) {
        while (before(values, ids[i], pivot)) i++;
        while (before(values, pivot, ids[j])) j--;
        if (i <= j) {
          const t = ids[i];
          ids[i] = ids[j];
          ids[j] = t;
          i++;
          j--;
        }
      }
      // ids[lo..j] come before or are the pivot, ids[i..hi] after or are the pivot, j < i.
      if (target <= j) hi = j;
      else if (target >= i) lo = i;
      else break;
    }
  }
}

/**
 * top_p's nucleus: the shortest prefix of ids[0..n) in the order above on `order` (the logits:
 * higher first, lower id on ties) whose mass of `p` reaches `mass`, the crossing token included;
 * it is moved to ids[0..m) (in no particular order) and m returned (n if the mass is never
 * reached, by rounding). A quickselect on mass: O(n) expected, no sort. Ordering by the logits
 * rather than by `p` keeps the one order of top_k (and of the GPU sampler) where distinct logits
 * round to the same probability.
 */
export function selectNucleus(ids: Uint32Array, n: number, order: ArrayLike<number>, p: Float64Array, mass: number): number {
  let lo = 0;
  let hi = n - 1;
  let need = mass; // mass still to find in ids[lo..hi], after everything before lo
  while (lo < hi) {
    // Median of three as the pivot, moved to hi; Lomuto partition of ids[lo..hi).
    const mid = (lo + hi) >>> 1;
    if (before(order, ids[mid], ids[lo])) swap(ids, mid, lo);
    if (before(order, ids[hi], ids[lo])) swap(ids, hi, lo);
    if (before(order, ids[mid], ids[hi])) swap(ids, mid, hi);
    const pivot = ids[hi];
    let i = lo;
    let ahead = 0;
    for (let j = lo; j < hi; j++) {
      if (before(order, ids[j], pivot)) {
        ahead += p[ids[j]];
        swap(ids, i, j);
        i++;
      }
    }
    swap(ids, i, hi);
    // ids[lo..i) come before the pivot (now at i), ids(i..hi] after it.
    if (i > lo && ahead >= need) hi = i - 1;
    else if (ahead + p[pivot] >= need) return i + 1;
    else {
      need -= ahead + p[pivot];
      lo = i + 1;
    }
  }
  return lo > hi ? lo : lo + 1;
}

function swap(ids: Uint32Array, a: number, b: number): void {
  const t = ids[a];
  ids[a] = ids[b];
  ids[b] = t;
}

/** Reusable buffers of one sequence's draws (vocabulary-sized, allocated once). */
export class DrawScratch {
  readonly a: Uint32Array;
  readonly p: Float64Array;
  constructor(readonly vocabSize: number) {
    this.a = new Uint32Array(vocabSize);
    this.p = new Float64Array(vocabSize);
  }
}

/** The candidates left after the filters, for tests: ids in draw order (ascending) and their probabilities. */
export interface Candidates {
  ids: number[];
  probs: number[];
}

/**
 * temperature -> top_k -> top_p -> min_p on processed logits `x`; returns the survivors in draw
 * order with their renormalized probabilities (what `drawToken` draws from). For tests and tools.
 */
export function candidates(x: Float64Array, settings: DrawSettings): Candidates {
  const scratch = new DrawScratch(x.length);
  const { ids, n } = filter(x, settings, scratch);
  let total = 0;
  for (let i = 0; i < n; i++) total += scratch.p[ids[i]];
  const out = Array.from(ids.subarray(0, n));
  return { ids: out, probs: out.map((id) => scratch.p[id] / total) };
}

/**
 * Draws a token from processed logits `x` (after bias and penalties; -Infinity = banned):
 * softmax(x / temperature) over the tokens with finite logits -> top_k -> top_p -> min_p (top_k
 * and top_p renormalize), then u = random.next() * the survivors' mass, and the first survivor in
 * ascending id order whose cumulative mass exceeds u. Exactly one random number per draw. If no
 * token has a finite logit, returns argmax(x) (the number is still taken).
 */
export function drawToken(x: Float64Array, settings: DrawSettings, random: RandomStream, scratch = new DrawScratch(x.length)): number {
  // The number is taken even when nothing can be drawn, so that step s always uses number s.
  const u01 = random.next();
  const { ids, n } = filter(x, settings, scratch);
  if (n === 0) return argmax(x);
  const p = scratch.p;
  let total = 0;
  for (let i = 0; i < n; i++) total += p[ids[i]];
  const u = u01 * total;
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc += p[ids[i]];
    if (u < acc) return ids[i];
  }
  return ids[n - 1];
}

/**
 * The filters: survivors in ids[0..n) in ascending id order (scratch.a), their probabilities in
 * scratch.p (by id; renormalized after top_k and top_p; min_p leaves them: the draw divides by
 * the mass).
 */
function filter(x: Float64Array, settings: DrawSettings, scratch: DrawScratch): { ids: Uint32Array; n: number } {
  const { temperature } = settings;
  const topK = settings.topK ?? 0;
  const topP = settings.topP ?? 1;
  const minP = settings.minP ?? 0;
  const p = scratch.p;
  const ids = scratch.a;
  let n = 0;
  for (let id = 0; id < x.length; id++) if (x[id] > -Infinity) ids[n++] = id;
  if (n === 0) return { ids, n };

  // top_k (on logits: the same order as on probabilities).
  if (topK > 0 && topK < n) {
    selectTop(ids, n, x, topK);
    n = topK;
    ids.subarray(0, n).sort(); // back to id order (numeric sort of a typed array)
  }

  // temperature: p = softmax(x / T) over the candidates. Tokens whose p underflows to 0 leave.
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (x[ids[i]] > max) max = x[ids[i]];
  let kept = 0;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const id = ids[i];
    const e = Math.exp((x[id] - max) / temperature);
    if (!(e > 0)) continue;
    p[id] = e;
    sum += e;
    ids[kept++] = id;
  }
  n = kept;
  for (let i = 0; i < n; i++) p[ids[i]] /= sum;

  // top_p: the shortest most-likely prefix whose mass reaches top_p (the crossing token is kept).
  if (topP < 1 && n > 1) {
    n = selectNucleus(ids, n, x, p, topP);
    ids.subarray(0, n).sort();
    let mass = 0;
    for (let i = 0; i < n; i++) mass += p[ids[i]];
    for (let i = 0; i < n; i++) p[ids[i]] /= mass;
  }

  // min_p: keep p >= min_p * p_max (p after the filters above, renormalized).
  if (minP > 0) {
    let pmax = 0;
    for (let i = 0; i < n; i++) if (p[ids[i]] > pmax) pmax = p[ids[i]];
    const threshold = minP * pmax;
    let k = 0;
    for (let i = 0; i < n; i++) if (p[ids[i]] >= threshold) ids[k++] = ids[i];
    n = k;
  }
  return { ids, n };
}
