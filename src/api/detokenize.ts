// Incremental detokenization: token ids in, new text out, exactly as decoding the whole sequence
// at once would give it.
// Browser code: nothing here may import Node modules.
import type { TextTokenizer } from '../tokenizer/types.ts';

/** How many prompt tokens precede the generated ones when decoding (see IncrementalDetokenizer). */
export const PROMPT_CONTEXT_TOKENS = 6;

const REPLACEMENT = '\uFFFD';

export interface DetokenizerOptions {
  /** Leave special tokens (BOS, EOS, ...) out of the text; default true. */
  skipSpecialTokens?: boolean;
}

/**
 * Turns generated token ids into text deltas.
 *
 * Each step decodes a short window of ids twice — up to the last emitted token, and up to the
 * newest — and emits the difference (the text-generation-inference scheme). The window starts
 * with the last few prompt tokens, so a decoder that strips the leading space of the first
 * token (SentencePiece `▁`) strips it from the prompt, not from the completion: " there" after
 * "Once upon a time" comes out with its space. Text ending in U+FFFD (a UTF-8 sequence split
 * across byte tokens) is held back until the sequence completes; `flush()` gives what is left.
 * Special tokens are skipped unless `skipSpecialTokens: false`.
 */
export class IncrementalDetokenizer {
  private ids: number[];
  /** Start of the decode window. */
  private prefixOffset = 0;
  /** End of the text already emitted (an index into `ids`). */
  private readOffset: number;
  private readonly skipSpecialTokens: boolean;

  constructor(
    private readonly tokenizer: TextTokenizer,
    promptTokens: readonly number[],
    contextTokens = PROMPT_CONTEXT_TOKENS,
    options: DetokenizerOptions = {},
  ) {
    this.ids = contextTokens > 0 ? promptTokens.slice(-contextTokens) : [];
    this.readOffset = this.ids.length;
    this.skipSpecialTokens = options.skipSpecialTokens ?? true;
  }

  /** Adds one generated id; returns the text it completes ('' while held back). */
  push(id: number): string {
    this.ids.push(id);
    return this.advance(false);
  }

  /**
   * The text `push(id)` would return now, without adding it: what a candidate token would add to
   * the text here ('' for a byte of a character still incomplete). `skipSpecialTokens` overrides
   * the detokenizer's setting for this look (alternatives in logprobs show special tokens).
   */
  peek(id: number, options: DetokenizerOptions = {}): string {
    const skip = options.skipSpecialTokens ?? this.skipSpecialTokens;
    const ids = [...this.ids, id];
    const before = this.decode(ids.slice(this.prefixOffset, this.readOffset), skip);
    const after = this.decode(ids.slice(this.prefixOffset), skip);
    if (after.length <= before.length || after.endsWith(REPLACEMENT)) return '';
    return after.slice(before.length);
  }

  /** The text still held back (possibly ending in U+FFFD); call once at the end. */
  flush(): string {
    return this.advance(true);
  }

  private decode(ids: readonly number[], skipSpecialTokens = this.skipSpecialTokens): string {
    return ids.length === 0 ? '' : this.tokenizer.decode(ids, { skipSpecialTokens });
  }

  private advance(final: boolean): string {
    if (this.readOffset === this.ids.length) return '';
    const before = this.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const after = this.decode(this.ids.slice(this.prefixOffset));
    if (after.length <= before.length) {
      if (final) this.readOffset = this.ids.length;
      return '';
    }
    if (!final && after.endsWith(REPLACEMENT)) return '';
    // `after` extends `before` for every sane decoder; if not, trust the length like TGI does.
    const delta = after.slice(before.length);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    // Forget ids before the window.
    this.ids = this.ids.slice(this.prefixOffset);
    this.readOffset -= this.prefixOffset;
    this.prefixOffset = 0;
    return delta;
  }
}
