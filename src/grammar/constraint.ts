// One sequence's TokenConstraint (sampling/types.ts) over an XGrammar GrammarMatcher.
// The stop tokens are handled here, not by XGrammar: its matcher is made to end without one
// (terminateWithoutStopToken), so isTerminated() says whether the structure is complete, and a stop
// token is allowed exactly then. XGrammar's own stop handling drops a stop token that its
// vocabulary counts as special (an empty entry, as every control token here is) from masks that
// allow most tokens (SetTokenBitmask, cpp/grammar_matcher.cc): a structure ending in free text
// (any_text) could never stop.
// The matcher would also print a warning for a token it cannot take (a special one, one out of
// range): those are refused here without asking it.
// Tokens whose bytes would not continue the output as UTF-8 are left out of each mask
// (utf8-tokens.ts): XGrammar counts malformed bytes as characters.
import type { GrammarMatcher } from '@mlc-ai/web-xgrammar';
import type { TokenConstraint } from '../sampling/types.ts';
import type { JumpForwardTokens } from './jump-forward.ts';
import type { XGrammar } from './xgrammar.ts';
import type { Utf8Tokens } from './utf8-tokens.ts';

export class GrammarConstraint implements TokenConstraint {
  readonly maskWords: number;
  private readonly stopIds: ReadonlySet<number>;
  /** A stop token was accepted: nothing may follow. */
  private stopped = false;
  /** The UTF-8 decoder's state after the output so far (0: between characters). */
  private utf8State = 0;
  private disposed = false;

  constructor(
    /** The module the matcher lives in, and the epoch it was made in (xgrammar.ts). */
    private readonly xg: XGrammar,
    private readonly epoch: number,
    private readonly matcher: GrammarMatcher,
    private readonly vocabSize: number,
    /** Per id: 1 when XGrammar's vocabulary entry is empty (it never takes the token as text). */
    private readonly emptyIds: Uint8Array,
    stopIds: readonly number[],
    private readonly jumpForward: JumpForwardTokens,
    private readonly utf8: Utf8Tokens,
  ) {
    this.maskWords = Math.ceil(vocabSize / 32);
    this.stopIds = new Set(stopIds);
  }

  async fillNextMask(mask: Uint32Array): Promise<void> {
    this.check();
    if (mask.length < this.maskWords) throw new RangeError(`a mask of ${mask.length} words where ${this.maskWords} are needed`);
    if (this.stopped) {
      mask.fill(0, 0, this.maskWords);
      return;
    }
    const bits = await this.xg.liveAsync(this.epoch, () => this.matcher.getNextTokenBitmask()); // Int32Array of ceil(vocabSize / 32) words
    mask.set(new Uint32Array(bits.buffer, bits.byteOffset, this.maskWords));
    const tail = this.vocabSize % 32;
    if (tail !== 0) mask[this.maskWords - 1] &= 2 ** tail - 1;
    this.keepUtf8(mask);
    // A stop token ends the output only between characters.
    const complete = this.stopIds.size > 0 && this.utf8State === 0 && this.terminated();
    for (const id of this.stopIds) {
      if (complete) mask[id >>> 5] |= 1 << (id & 31);
      else mask[id >>> 5] &= ~(1 << (id & 31));
    }
  }

  accept(id: number): boolean {
    this.check();
    if (this.stopped || !Number.isInteger(id) || id < 0 || id >= this.vocabSize) return false;
    if (this.stopIds.has(id)) {
      if (!this.isComplete()) return false; // the structure is not complete yet
      this.stopped = true;
      return true;
    }
    if (this.emptyIds[id] === 1) return false;
    if (!this.xg.live(this.epoch, () => this.matcher.acceptToken(id))) return false;
    this.advanceUtf8(id);
    return true;
  }

  /**
   * The jump-forward string's tokens, accepted. Of a string of several tokens the last is left to
   * sampling, where a longer token may join it to what follows (` ` then `"a`, rather than ` "a`); it
   * comes back at the next call as a shorter string, and one token alone is forced.
   */
  forced(): number[] {
    this.check();
    if (this.stopped) return [];
    const text = this.xg.live(this.epoch, () => this.matcher.findJumpForwardString());
    if (text === '') return [];
    const ids = this.jumpForward.tokens(text);
    const take = ids.length > 1 ? ids.length - 1 : ids.length;
    const accepted: number[] = [];
    for (const id of ids.slice(0, take)) {
      if (this.stopIds.has(id) || this.emptyIds[id] === 1 || !this.xg.live(this.epoch, () => this.matcher.acceptToken(id))) break;
      this.advanceUtf8(id);
      accepted.push(id);
    }
    return accepted;
  }

  isComplete(): boolean {
    this.check();
    return this.stopped || (this.utf8State === 0 && this.terminated());
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    // A matcher of an earlier epoch is gone with the memory it lived in: nothing to free.
    if (this.epoch === this.xg.epoch) this.xg.live(this.epoch, () => this.matcher.dispose());
  }

  /**
   * Leaves out of `mask` the tokens that would not continue the output as UTF-8, unless none would
   * be left (a grammar that asks for malformed bytes gets them rather than a dead end).
   */
  private keepUtf8(mask: Uint32Array): void {
    const valid = this.utf8.valid(this.utf8State);
    let any = 0;
    for (let w = 0; w < this.maskWords; w++) any |= mask[w]! & valid[w]!;
    if (any === 0) return;
    for (let w = 0; w < this.maskWords; w++) mask[w]! &= valid[w]!;
  }

  private advanceUtf8(id: number): void {
    const next = this.utf8.after(this.utf8State, id);
    this.utf8State = next < 0 ? 0 : next; // malformed (allowed where nothing else was): start over
  }

  private terminated(): boolean {
    return this.xg.live(this.epoch, () => this.matcher.isTerminated());
  }

  private check(): void {
    if (this.disposed) throw new Error('the token constraint was used after dispose()');
  }
}
