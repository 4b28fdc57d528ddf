// Turning a step's logits into the next token, on the CPU. The chain, in this exact order (the
// API's, documented in docs/api.md, "Sampling order"):
//
//   0. mask                structured output: ids the mask disallows get -Infinity (mask.ts)
//   1. logit_bias          logit[id] += bias[id]
//   2. repetition penalty  each distinct token of prompt + generated: logit > 0 ? logit / p : logit * p
//   3. presence/frequency  logit[j] -= c[j] * frequency + (c[j] > 0) * presence  (c: generated counts)
//   (min_tokens)           stop ids get -Infinity until min_tokens tokens were generated
//   4. temperature         0: greedy, argmax of the logits above (lowest id on ties), skip the rest
//   5. top_k               keep the k most likely
//   6. top_p               keep the shortest most-likely prefix whose mass reaches top_p
//   7. min_p               keep p >= min_p * p_max (p after 5-6, renormalized)
//   8. draw                one number u from the sequence's random stream (Philox: the number of
//                          (seed, stream, step), src/sampling/random.ts); inverse CDF over the
//                          survivors in ascending id order
//
// "Most likely" is one order throughout: processed logit descending, the lower id first on ties.
// Every filter keeps a prefix of that order, which is what lets the GPU sampler
// (src/sampling/gpu-sampler.ts, shaders/sample.wgsl) find the cut without sorting. This CPU chain
// is the GPU sampler's reference: the same definition, the same random numbers, float32
// penalties; the probabilities here are float64, so the two can differ only where a decision sits
// within rounding of its boundary.
//
// When no id keeps a finite logit, greedy and the draw pick id 0, or with a mask the lowest id it
// allows (so a constrained step always picks an allowed id when there is one).
//
// Step 0 lives in mask.ts, 1-3 in penalties.ts, 5-8 in truncation.ts (beside this file, in
// test/reference/).
// Logprobs (src/sampling/logprobs.ts) are computed from the raw logits, before any of this.
import type { SamplingParams } from '../../src/sampling/types.ts';
import { applyLogitBias, applyPresenceFrequency, applyRepetitionPenalty, TokenHistory } from './penalties.ts';
import type { RandomStream } from '../../src/sampling/random.ts';
import { argmax, drawToken, DrawScratch } from './truncation.ts';
import { applyMask, lowestAllowed, type TokenMask } from './mask.ts';

export { argmax } from './truncation.ts';

/**
 * Steps 0-3 and the min_tokens ban: the logits the draw sees, written to `out` (float32 values,
 * as the GPU sampler computes them). `raw` is left untouched.
 */
export function processLogits(
  raw: ArrayLike<number>,
  params: SamplingParams,
  history: TokenHistory | null,
  banned: Iterable<number> | null = null,
  out: Float64Array = new Float64Array(raw.length),
  mask: TokenMask | null = null,
): Float64Array {
  for (let i = 0; i < raw.length; i++) out[i] = Math.fround(raw[i]);
  if (mask) applyMask(out, mask);
  applyLogitBias(out, params.logitBias);
  if (history) {
    applyRepetitionPenalty(out, history.seen, params.repetitionPenalty ?? 1);
    applyPresenceFrequency(out, history.counts, params.presencePenalty ?? 0, params.frequencyPenalty ?? 0);
  }
  if (banned) for (const id of banned) if (id >= 0 && id < out.length) out[id] = -Infinity;
  return out;
}

/** Steps 4-8 on processed logits; `mask`: the one step 0 applied (it picks when nothing is finite). */
export function pickToken(logits: Float64Array, params: SamplingParams, random: RandomStream, scratch?: DrawScratch, mask: TokenMask | null = null): number {
  const id = params.temperature === 0 ? argmax(logits) : drawToken(logits, params, random, scratch);
  // Both fall back to argmax, id 0, when no logit is finite (+Infinity is, for this).
  if (mask && !(logits[id] > -Infinity)) return lowestAllowed(mask, logits.length);
  return id;
}

/** The whole chain for one step without history (no repetition/presence/frequency state). */
export function sampleToken(raw: ArrayLike<number>, params: SamplingParams, random: RandomStream): number {
  return pickToken(processLogits(raw, params, null), params, random);
}

/**
 * The sampler of one sequence: its parameters, its random stream, its token history (prompt +
 * generated) and its buffers. Nothing in it is shared with another sequence.
 */
export class SequenceSampler {
  readonly history: TokenHistory;
  private readonly work: Float64Array;
  private readonly scratch: DrawScratch | undefined;

  constructor(
    readonly vocabSize: number,
    readonly params: SamplingParams,
    promptTokens: readonly number[],
    private readonly random: RandomStream,
  ) {
    this.history = new TokenHistory(vocabSize, promptTokens);
    this.work = new Float64Array(vocabSize);
    this.scratch = params.temperature === 0 ? undefined : new DrawScratch(vocabSize);
  }

  /**
   * The next token from this step's raw logits; `banned` ids (stop ids before min_tokens) cannot
   * be picked, nor ids `mask` disallows (structured output).
   */
  sample(raw: ArrayLike<number>, banned: Iterable<number> | null = null, mask: TokenMask | null = null): number {
    const x = processLogits(raw, this.params, this.history, banned, this.work, mask);
    return pickToken(x, this.params, this.random, this.scratch, mask);
  }

  /** Records the token the sequence went on with (it counts for the penalties from now on). */
  accept(id: number): void {
    this.history.accept(id);
  }
}
