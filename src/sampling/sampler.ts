// Turning a step's logits into the next token. Order of operations (the API's):
//   temperature -> top_p -> draw      (temperature 0 = greedy argmax)
// logit_bias, penalties, top_k and min_p join this chain in the next issue, in the order
// logit_bias -> penalties -> temperature -> top_k -> top_p -> min_p -> draw.
import type { RandomStream } from './random.ts';

export interface SamplerSettings {
  temperature: number;
  topP: number;
}

/** Index of the largest logit; the lowest index wins a tie, so greedy decoding is deterministic. */
export function argmax(logits: ArrayLike<number>): number {
  let best = 0;
  let bestValue = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i] > bestValue) {
      bestValue = logits[i];
      best = i;
    }
  }
  return best;
}

/** softmax(logits / temperature) as float64 probabilities. */
export function softmaxWithTemperature(logits: ArrayLike<number>, temperature: number): Float64Array {
  const probs = new Float64Array(logits.length);
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) {
    const p = Math.exp((logits[i] - max) / temperature);
    probs[i] = p;
    sum += p;
  }
  for (let i = 0; i < probs.length; i++) probs[i] /= sum;
  return probs;
}

/**
 * Nucleus filter: the smallest set of most-probable tokens whose mass reaches `topP`
 * (the token that crosses the threshold is kept). Returns candidate ids, most probable first.
 */
export function topPCandidates(probs: Float64Array, topP: number): number[] {
  const order = Array.from(probs.keys()).sort((a, b) => probs[b] - probs[a] || a - b);
  if (topP >= 1) return order;
  let mass = 0;
  let keep = 0;
  while (keep < order.length) {
    mass += probs[order[keep]];
    keep++;
    if (mass >= topP) break;
  }
  return order.slice(0, keep);
}

/** Draws from the candidates in proportion to their (renormalized) probabilities. */
export function drawFrom(candidates: readonly number[], probs: Float64Array, random: RandomStream): number {
  let total = 0;
  for (const id of candidates) total += probs[id];
  const u = random.next() * total;
  let acc = 0;
  for (const id of candidates) {
    acc += probs[id];
    if (u < acc) return id;
  }
  return candidates[candidates.length - 1];
}

export function sampleToken(logits: ArrayLike<number>, settings: SamplerSettings, random: RandomStream): number {
  if (settings.temperature === 0) return argmax(logits);
  const probs = softmaxWithTemperature(logits, settings.temperature);
  return drawFrom(topPCandidates(probs, settings.topP), probs, random);
}
