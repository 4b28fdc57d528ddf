// Log-probabilities as the API reports them: the log-softmax of the model's RAW logits (before
// logit_bias, penalties and temperature), as llama.cpp and vLLM report them. Computed in float64
// with a stable log-sum-exp, and the top alternatives by partial selection (one pass over the
// vocabulary, no sort), so a 128k vocabulary costs one max pass and one exp pass per token.
import type { GeneratedToken, TokenLogprob } from './types.ts';

/**
 * log Σ exp(logits[i]), in float64: max + log Σ exp(logits[i] - max). NaN entries are skipped
 * (they count as probability 0); all -Infinity (or empty) gives -Infinity.
 */
export function logSumExp(logits: ArrayLike<number>): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  if (max === -Infinity) return -Infinity;
  if (max === Infinity) return Infinity;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) {
    const x = logits[i];
    if (x > -Infinity) sum += Math.exp(x - max);
  }
  return max + Math.log(sum);
}

/** The whole log-softmax (for tests and small vocabularies). */
export function logSoftmax(logits: ArrayLike<number>): Float64Array {
  const lse = logSumExp(logits);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i] - lse;
  return out;
}

/**
 * The `k` largest entries of `values` as ids, largest first, the lower id first on ties; NaN
 * entries are never chosen. One pass with a sorted buffer of k: O(V) for small k (the buffer is
 * only touched by entries that beat its last one).
 */
export function topIds(values: ArrayLike<number>, k: number): number[] {
  const n = Math.min(Math.max(0, Math.floor(k)), values.length);
  const ids: number[] = [];
  if (n === 0) return ids;
  const best: number[] = []; // values of `ids`, in the same order (descending)
  for (let id = 0; id < values.length; id++) {
    const v = values[id];
    if (!(v === v)) continue; // NaN
    if (ids.length === n && !(v > best[n - 1])) continue; // ties keep the earlier (lower) id
    // Insert after every entry >= v: equal values stay in id order.
    let at = ids.length === n ? n - 1 : ids.length;
    while (at > 0 && best[at - 1] < v) at--;
    if (ids.length === n) {
      ids.pop();
      best.pop();
    }
    ids.splice(at, 0, id);
    best.splice(at, 0, v);
  }
  return ids;
}

/**
 * Scores one step from its raw logits: the logprob of `id` and, when `topK` is given, the `topK`
 * most likely tokens (most likely first, lower id first on ties; `topK` 0 gives []).
 */
export function scoreToken(raw: ArrayLike<number>, id: number, topK: number | undefined, lse = logSumExp(raw)): GeneratedToken {
  const token: GeneratedToken = { id, logprob: raw[id] - lse };
  if (topK !== undefined) {
    token.topLogprobs = topIds(raw, topK).map((alt): TokenLogprob => ({ id: alt, logprob: raw[alt] - lse }));
  }
  return token;
}
