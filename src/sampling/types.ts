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
}
