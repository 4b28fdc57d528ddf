// Logprobs in the legacy completions shape: {tokens, token_logprobs, top_logprobs, text_offset}.
// Browser code: nothing here may import Node modules.
//
// What the numbers are: the log-softmax of the model's raw logits at each step, before
// logit_bias, penalties and temperature (as llama.cpp and vLLM report them): the model's own
// view, the same whatever the sampling settings. A value that is not finite (a token the model
// gives no probability at all) is reported as -9999, since JSON has no -Infinity.
//
// What the token strings are: the text each token adds to `text`, where it stands, so that
// text.slice(text_offset[i], text_offset[i] + tokens[i].length) === tokens[i] and the tokens
// joined give the text. A character spelled by several byte-fallback tokens (a UTF-8 sequence
// split across tokens) belongs to the token that completes it: the tokens before it add nothing
// yet, so their string is '' and their text_offset is where the character starts. A byte that
// never completes a character shows as U+FFFD, as in `text`. Special tokens add nothing with
// skip_special_tokens (the default), so their string is ''.
//
// top_logprobs: the `logprobs` most likely tokens, most likely first, each keyed by the text it
// would have added at that point (special tokens by their own text, e.g. '</s>'), and the
// sampled token always (so up to logprobs + 1 entries; logprobs: 0 gives the sampled token
// alone). Two tokens with the same text share one key: the sampled token's value wins it,
// otherwise the more likely one's.
import type { TokenLogprob } from '../engine/types.ts';

/**
 * Appends `entries` one at a time: an echoed prompt has one entry a token, and spreading a long
 * prompt's entries as arguments (push(...entries)) overflows the stack.
 */
export function appendEntries(target: LogprobEntry[], entries: readonly LogprobEntry[]): void {
  for (const entry of entries) target.push(entry);
}

/** One token of a choice's logprobs. */
export interface LogprobEntry {
  token: string;
  /** null for the first prompt token (nothing comes before it). */
  logprob: number | null;
  top: Record<string, number> | null;
  /** Offset of the token's text in the choice's `text` (echo included). */
  offset: number;
  /**
   * The `logprobs` most likely tokens, most likely first, each with the text it would have added
   * (chat's top_logprobs list; unlike `top`, two tokens of the same text stay two); absent for
   * prompt tokens.
   */
  alternatives?: { id: number; token: string; logprob: number }[];
  /** The token's id (absent for prompt tokens). */
  id?: number;
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

/** JSON-safe logprob. */
export function finiteLogprob(value: number): number {
  return Number.isFinite(value) ? value : -9999;
}

/**
 * The top_logprobs object of one step: `alternatives` (most likely first, the first `k` kept)
 * keyed by `textOf(id)`, and the sampled token under `sampledText`.
 */
export function topLogprobsObject(
  sampled: TokenLogprob,
  sampledText: string,
  alternatives: readonly TokenLogprob[] | undefined,
  k: number,
  textOf: (id: number) => string,
): Record<string, number> {
  const entries = new Map<string, number>();
  for (const alt of (alternatives ?? []).slice(0, k)) {
    const key = alt.id === sampled.id ? sampledText : textOf(alt.id);
    if (!entries.has(key)) entries.set(key, finiteLogprob(alt.logprob));
  }
  entries.set(sampledText, finiteLogprob(sampled.logprob));
  // fromEntries defines own properties, so even a '__proto__' token is a plain key.
  return Object.fromEntries(entries);
}

/** Entries in the legacy shape. */
export function toLegacyLogprobs(entries: readonly LogprobEntry[]): CompletionLogprobs {
  return {
    tokens: entries.map((e) => e.token),
    token_logprobs: entries.map((e) => e.logprob),
    top_logprobs: entries.map((e) => e.top),
    text_offset: entries.map((e) => e.offset),
  };
}
