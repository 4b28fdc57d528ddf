// The logit adjustments that come before temperature, in the API's order:
//   1. logit_bias:            logit[id] += bias[id]
//   2. repetition penalty:    for every distinct token of prompt + generated (vLLM / HF):
//                             logit = logit > 0 ? logit / p : logit * p
//   3. presence / frequency:  OpenAI, counts c[j] over the GENERATED tokens of this sequence:
//                             logit[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty
// A `TokenHistory` holds what 2 and 3 need for one sequence; it is never shared.
//
// The arithmetic is float32 (every result rounded with Math.fround), as the GPU sampler does it
// (shaders/sample.wgsl), so both see the same processed logits up to the GPU's own rounding.

const f32 = Math.fround;

/** Adds `bias` (token id -> bias) to the logits in place (float32). Ids outside the logits are ignored. */
export function applyLogitBias(logits: Float64Array, bias: ReadonlyMap<number, number> | undefined): void {
  if (!bias) return;
  for (const [id, b] of bias) if (id >= 0 && id < logits.length) logits[id] = f32(logits[id] + f32(b));
}

/** vLLM/HF repetition penalty on each of `ids` (distinct) in place; `penalty` 1 changes nothing. */
export function applyRepetitionPenalty(logits: Float64Array, ids: Iterable<number>, penalty: number): void {
  if (penalty === 1) return;
  const p = f32(penalty);
  for (const id of ids) {
    const x = logits[id];
    logits[id] = f32(x > 0 ? x / p : x * p);
  }
}

/** OpenAI presence/frequency penalties in place, from the counts of the generated tokens. */
export function applyPresenceFrequency(
  logits: Float64Array,
  counts: ReadonlyMap<number, number>,
  presence: number,
  frequency: number,
): void {
  if (presence === 0 && frequency === 0) return;
  const fp = f32(frequency);
  const pp = f32(presence);
  for (const [id, c] of counts) if (c > 0) logits[id] = f32(logits[id] - f32(f32(c * fp) + pp));
}

/** The tokens one sequence has seen: the prompt's distinct ids and the counts of its generated ones. */
export class TokenHistory {
  /** Distinct ids of prompt + generated, in first-seen order (repetition penalty). */
  readonly seen: number[] = [];
  /** How often each id was generated (presence / frequency penalties). */
  readonly counts = new Map<number, number>();
  private readonly seenMask: Uint8Array;

  constructor(vocabSize: number, promptTokens: readonly number[]) {
    this.seenMask = new Uint8Array(vocabSize);
    for (const id of promptTokens) this.see(id);
  }

  /** Records a generated token. */
  accept(id: number): void {
    this.see(id);
    this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
  }

  private see(id: number): void {
    if (this.seenMask[id]) return;
    this.seenMask[id] = 1;
    this.seen.push(id);
  }
}
