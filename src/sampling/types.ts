// What a request asks of sampling and what sampling gives back per token: shared by the samplers
// (src/sampling) and the generation loop above them (src/engine/types.ts re-exports them).

export interface SamplingParams {
  /** 0 = greedy (argmax). */
  temperature: number;
  /** Nucleus mass in [0, 1]; 1 disables it, 0 keeps the most likely token alone. */
  topP: number;
  /** Seed of the request's random stream; undefined = a fresh random seed. */
  seed?: number;
  /** Keep the k most likely tokens; 0 or undefined disables it. */
  topK?: number;
  /** Drop tokens whose probability is below minP x the top probability; 0 or undefined disables it. */
  minP?: number;
  /** vLLM/HF repetition penalty over prompt and generated tokens (logit / p if > 0, else logit * p); 1 disables it. */
  repetitionPenalty?: number;
  /** OpenAI: logit[j] -= (count[j] > 0) * presencePenalty, counts over generated tokens. */
  presencePenalty?: number;
  /** OpenAI: logit[j] -= count[j] * frequencyPenalty, counts over generated tokens. */
  frequencyPenalty?: number;
  /** Token id -> bias added to the logit before everything else (-100 bans, +100 forces). */
  logitBias?: ReadonlyMap<number, number>;
}

export interface TokenLogprob {
  id: number;
  /** log-softmax of the model's raw logits (before bias, penalties and temperature). */
  logprob: number;
}

export interface GeneratedToken extends TokenLogprob {
  /**
   * The `logprobs` most likely tokens at this step, most likely first, the lower id first on ties
   * (when the session asked for logprobs; [] for logprobs 0; absent when it did not ask).
   */
  topLogprobs?: TokenLogprob[];
  /** The token was appended without sampling: a grammar allowed no other (jump-forward). */
  forced?: boolean;
}

/**
 * Structured output, as the generation loop sees it: a grammar that says which tokens may come
 * next as a sequence grows (src/grammar builds them). One per sequence, never shared. The loop asks
 * for the mask of allowed tokens before each sampled token, and the sampler draws among those only,
 * before any other parameter applies.
 */
export interface TokenConstraint {
  /** Words of a mask: ceil(vocabSize / 32), vocabSize being the sampler's. */
  readonly maskWords: number;
  /**
   * Writes the tokens allowed next into `mask` (maskWords words; bit `id & 31` of word `id >> 5`,
   * 1 = allowed). All zero: nothing may follow (the structure is complete and no stop token ends it).
   */
  fillNextMask(mask: Uint32Array): Promise<void>;
  /** Advances the grammar by `id`; false (the state unchanged) when the grammar does not allow it. */
  accept(id: number): boolean;
  /**
   * Tokens the grammar allows as the only way on from here (jump-forward), already accepted, in
   * order; [] when there is a choice. The loop appends them without sampling from the mask.
   */
  forced(): number[];
  /**
   * Whether the output so far is a whole structure. When a mask allows nothing but stop ids (or
   * nothing), this tells a finished structure from a dead end (a stop id or a vocabulary that
   * cannot spell what the structure needs next).
   */
  isComplete(): boolean;
  /** Frees what the constraint holds (its matcher); it is not used afterwards. */
  dispose(): void;
}
