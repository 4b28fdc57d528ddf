// Structured output after the thinking: a TokenConstraint that lets a model think freely and hands
// every token after the thinking to the request's own constraint (its grammar), as vLLM applies
// structured output only once the reasoning has ended. The thinking ends where the output's bytes
// first complete the end tag (`</think>`: one token in the vocabularies of the models that think,
// but a model may also spell it in pieces); the grammar starts at the next token. So that the
// grammar always starts at a token boundary, a token that would complete the end tag and go on
// past it is not allowed while thinking (it would put the first bytes of the answer outside the
// grammar). The bytes counted are those the answer's text is made of: special tokens count as none
// when the text skips them, as src/api/reasoning.ts reads that text.
import type { TextTokenizer } from '../tokenizer/types.ts';
import type { TokenConstraint } from '../sampling/types.ts';

/** Where a constrained reply starts (src/api/reasoning.ts ReasoningStart, less 'answer', which needs no gate). */
export interface ReasoningGateOptions {
  /** 'inside': thinking from the first token; 'may-open': thinking only if the first token is the start tag. */
  start: 'inside' | 'may-open';
  startTag: string;
  endTag: string;
  /** Ids tokens are sampled among (the sampler's vocabulary). */
  vocabSize: number;
  /** Whether special tokens are left out of the text (then they count as no bytes). */
  skipSpecialTokens: boolean;
}

/**
 * The end tag's matcher over a vocabulary: Knuth-Morris-Pratt states (the length of the longest
 * end of the output that is a proper prefix of the tag) and, per state, the tokens not allowed
 * (computed on first use: most thinking stays in state 0).
 */
class EndTagTable {
  private readonly tag: Uint8Array;
  private readonly fail: Int32Array;
  private readonly bytes: (Uint8Array | undefined)[] = [];
  private readonly banned = new Map<number, Uint32Array>();
  /** Ids whose bytes are exactly the start tag. */
  readonly startIds: ReadonlySet<number>;

  constructor(
    tokenizer: TextTokenizer,
    private readonly vocabSize: number,
    startTag: string,
    endTag: string,
    skipSpecialTokens: boolean,
  ) {
    const encoder = new TextEncoder();
    this.tag = encoder.encode(endTag);
    const fail = new Int32Array(this.tag.length);
    for (let i = 1, k = 0; i < this.tag.length; i++) {
      while (k > 0 && this.tag[i] !== this.tag[k]) k = fail[k - 1]!;
      if (this.tag[i] === this.tag[k]) k++;
      fail[i] = k;
    }
    this.fail = fail;
    const start = encoder.encode(startTag);
    const startIds = new Set<number>();
    const none = new Uint8Array(0);
    for (let id = 0; id < vocabSize; id++) {
      const b = skipSpecialTokens && tokenizer.isSpecial(id) ? none : (tokenizer.tokenBytes?.(id) ?? encoder.encode(tokenizer.decode([id], { skipSpecialTokens: false })));
      this.bytes.push(b);
      if (b.length === start.length && b.every((x, i) => x === start[i])) startIds.add(id);
    }
    this.startIds = startIds;
  }

  /** From state k through token id: the new state, or 'end' when the tag completes at its last byte, or 'past' when it completes before. */
  step(k: number, id: number): number | 'end' | 'past' {
    const b = this.bytes[id];
    if (!b) return k;
    const { tag, fail } = this;
    for (let i = 0; i < b.length; i++) {
      while (k > 0 && b[i] !== tag[k]) k = fail[k - 1]!;
      if (b[i] === tag[k]) k++;
      if (k === tag.length) return i === b.length - 1 ? 'end' : 'past';
    }
    return k;
  }

  /** The tokens not allowed in state k: those that would complete the tag before their last byte. */
  bannedIn(k: number): Uint32Array {
    let mask = this.banned.get(k);
    if (!mask) {
      mask = new Uint32Array(Math.ceil(this.vocabSize / 32));
      for (let id = 0; id < this.vocabSize; id++) if (this.step(k, id) === 'past') mask[id >>> 5]! |= 1 << (id & 31);
      this.banned.set(k, mask);
    }
    return mask;
  }
}

const tables = new WeakMap<TextTokenizer, Map<string, EndTagTable>>();

function endTagTable(tokenizer: TextTokenizer, options: ReasoningGateOptions): EndTagTable {
  let byKey = tables.get(tokenizer);
  if (!byKey) tables.set(tokenizer, (byKey = new Map()));
  const key = JSON.stringify([options.vocabSize, options.startTag, options.endTag, options.skipSpecialTokens]);
  let table = byKey.get(key);
  if (!table) byKey.set(key, (table = new EndTagTable(tokenizer, options.vocabSize, options.startTag, options.endTag, options.skipSpecialTokens)));
  return table;
}

/**
 * `inner` (the request's constraint) applied from the first token after the thinking. While the
 * reply may still open its thinking (start 'may-open', at its first token), the mask is the
 * grammar's plus the start tag's token; while it thinks, every token but those that would run past
 * the end tag (stop ids too: a reply may end while thinking); afterwards, the grammar's. Nothing is
 * forced before the grammar starts. Disposing of the gate disposes of `inner`.
 */
export class ReasoningGate implements TokenConstraint {
  readonly maskWords: number;
  private readonly table: EndTagTable;
  private state: 'opening' | 'thinking' | 'answer';
  /** The end tag's matcher state while thinking. */
  private k = 0;

  constructor(
    private readonly inner: TokenConstraint,
    tokenizer: TextTokenizer,
    private readonly options: ReasoningGateOptions,
  ) {
    this.maskWords = inner.maskWords;
    if (Math.ceil(options.vocabSize / 32) > this.maskWords) throw new RangeError(`a vocabulary of ${options.vocabSize} ids in masks of ${this.maskWords} words`);
    this.table = endTagTable(tokenizer, options);
    this.state = options.start === 'inside' ? 'thinking' : 'opening';
  }

  /** Whether the thinking is over (or never began): the grammar applies. */
  get answering(): boolean {
    return this.state === 'answer';
  }

  async fillNextMask(mask: Uint32Array): Promise<void> {
    if (this.state === 'answer') return this.inner.fillNextMask(mask);
    if (this.state === 'opening') {
      await this.inner.fillNextMask(mask);
      for (const id of this.table.startIds) mask[id >>> 5]! |= 1 << (id & 31);
      return;
    }
    const banned = this.table.bannedIn(this.k);
    const vocab = this.options.vocabSize;
    const whole = vocab >>> 5;
    for (let w = 0; w < whole; w++) mask[w] = ~banned[w]! >>> 0;
    if (vocab & 31) mask[whole] = ~banned[whole]! & ((1 << (vocab & 31)) - 1) & 0xffffffff;
    mask.fill(0, Math.ceil(vocab / 32), this.maskWords);
  }

  accept(id: number): boolean {
    if (this.state === 'answer') return this.inner.accept(id);
    if (!Number.isInteger(id) || id < 0 || id >= this.options.vocabSize) return false;
    if (this.state === 'opening') {
      if (this.table.startIds.has(id)) {
        this.state = 'thinking';
        return true;
      }
      if (!this.inner.accept(id)) return false;
      this.state = 'answer';
      return true;
    }
    const next = this.table.step(this.k, id);
    if (next === 'past') return false;
    if (next === 'end') this.state = 'answer';
    else this.k = next;
    return true;
  }

  forced(): number[] {
    return this.state === 'answer' ? this.inner.forced() : [];
  }

  isComplete(): boolean {
    return this.state === 'answer' && this.inner.isComplete();
  }

  dispose(): void {
    this.inner.dispose();
  }
}
