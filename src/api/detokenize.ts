// Incremental detokenization: token ids in, new text out, exactly as decoding the whole sequence
// at once would give it.
// Browser code: nothing here may import Node modules.
import type { TextTokenizer } from '../tokenizer/types.ts';

/** How many prompt tokens precede the generated ones when decoding (see IncrementalDetokenizer). */
export const PROMPT_CONTEXT_TOKENS = 6;

const REPLACEMENT = '\uFFFD';

/**
 * Turns generated token ids into text deltas.
 *
 * Each step decodes a short window of ids twice — up to the last emitted token, and up to the
 * newest — and emits the difference (the text-generation-inference scheme). The window starts
 * with the last few prompt tokens, so a decoder that strips the leading space of the first
 * token (SentencePiece `▁`) strips it from the prompt, not from the completion: " there" after
 * "Once upon a time" comes out with its space. Text ending in U+FFFD (a UTF-8 sequence split
 * across byte tokens) is held back until the sequence completes; `flush()` gives what is left.
 * Special tokens are skipped.
 */
export class IncrementalDetokenizer {
  private ids: number[];
  /** Start of the decode window. */
  private prefixOffset = 0;
  /** End of the text already emitted (an index into `ids`). */
  private readOffset: number;

  constructor(
    private readonly tokenizer: TextTokenizer,
    promptTokens: readonly number[],
    contextTokens = PROMPT_CONTEXT_TOKENS,
  ) {
    this.ids = contextTokens > 0 ? promptTokens.slice(-contextTokens) : [];
    this.readOffset = this.ids.length;
  }

  /** Adds one generated id; returns the text it completes ('' while held back). */
  push(id: number): string {
    this.ids.push(id);
    return this.advance(false);
  }

  /** The text still held back (possibly ending in U+FFFD); call once at the end. */
  flush(): string {
    return this.advance(true);
  }

  private decode(ids: readonly number[]): string {
    return ids.length === 0 ? '' : this.tokenizer.decode(ids, { skipSpecialTokens: true });
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
