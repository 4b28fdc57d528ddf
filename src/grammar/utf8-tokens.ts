// Which tokens keep the output well-formed UTF-8. XGrammar matches a character class beyond ASCII
// loosely (measured on 0.1.27): a negated class such as a JSON string's `[^"\\]` takes bytes that
// are no UTF-8 character (a lead byte followed by another lead byte, ...), each counted as one
// character, so a model that picks byte tokens at random (byte fallback) writes text whose
// decoded characters (U+FFFD for each bad sequence) break `maxLength` or a pattern. The
// constraint (constraint.ts) allows only tokens whose bytes continue the output as UTF-8; with
// well-formed bytes XGrammar counts characters right.
//
// The decoder's states: 0 between characters; 1-3 continuation bytes still to come; 4-7 the
// first of them restricted (after E0, ED, F0, F4: no overlong forms, no surrogates, nothing past
// U+10FFFF), as RFC 3629 has it.
// Browser code: nothing here may import Node modules.
import { pieceBytes } from './vocabulary.ts';

const STATES = 8;
const INVALID = -1;

/** The state after `byte` from `state`, or INVALID. */
export function utf8Step(state: number, byte: number): number {
  const continuation = (lo: number, hi: number, next: number) => (byte >= lo && byte <= hi ? next : INVALID);
  switch (state) {
    case 0:
      if (byte <= 0x7f) return 0;
      if (byte >= 0xc2 && byte <= 0xdf) return 1;
      if (byte === 0xe0) return 4;
      if (byte === 0xed) return 5;
      if (byte >= 0xe1 && byte <= 0xef) return 2;
      if (byte === 0xf0) return 6;
      if (byte === 0xf4) return 7;
      if (byte >= 0xf1 && byte <= 0xf3) return 3;
      return INVALID;
    case 1:
      return continuation(0x80, 0xbf, 0);
    case 2:
      return continuation(0x80, 0xbf, 1);
    case 3:
      return continuation(0x80, 0xbf, 2);
    case 4:
      return continuation(0xa0, 0xbf, 1);
    case 5:
      return continuation(0x80, 0x9f, 1);
    case 6:
      return continuation(0x90, 0xbf, 2);
    case 7:
      return continuation(0x80, 0x8f, 2);
    default:
      return INVALID;
  }
}

/** utf8Step as a table: STEPS[state * 256 + byte]. */
const STEPS: Int8Array = (() => {
  const table = new Int8Array(STATES * 256);
  for (let state = 0; state < STATES; state++) for (let byte = 0; byte < 256; byte++) table[state * 256 + byte] = utf8Step(state, byte);
  return table;
})();

/** Per decoder state, the tokens that continue the output as UTF-8, and the state each leaves. */
export class Utf8Tokens {
  readonly vocabSize: number;
  private readonly ends: (Int8Array | undefined)[] = new Array<Int8Array | undefined>(STATES);
  private readonly masks: (Uint32Array | undefined)[] = new Array<Uint32Array | undefined>(STATES);
  /** Every token's bytes, one after another; token id's are bytes[offsets[id]] to bytes[offsets[id + 1]]. */
  private readonly bytes: Uint8Array;
  private readonly offsets: Uint32Array;

  /** From the vocabulary as XGrammar has it (vocabulary.ts: byte-level pieces, '' for tokens without bytes). */
  constructor(pieces: readonly string[]) {
    this.vocabSize = pieces.length;
    this.offsets = new Uint32Array(pieces.length + 1);
    for (let id = 0; id < pieces.length; id++) this.offsets[id + 1] = this.offsets[id]! + pieces[id]!.length;
    this.bytes = new Uint8Array(this.offsets[pieces.length]!);
    for (let id = 0; id < pieces.length; id++) this.bytes.set(pieceBytes(pieces[id]!), this.offsets[id]);
  }

  /** The mask (bit id & 31 of word id >> 5) of tokens valid from `state`; tokens without bytes are. */
  valid(state: number): Uint32Array {
    let mask = this.masks[state];
    if (!mask) {
      const ends = this.endsFrom(state);
      mask = new Uint32Array(Math.ceil(this.vocabSize / 32));
      for (let id = 0; id < this.vocabSize; id++) if (ends[id] !== INVALID) mask[id >>> 5]! |= 1 << (id & 31);
      this.masks[state] = mask;
    }
    return mask;
  }

  /** The state after token `id` from `state`; INVALID (-1) when its bytes are no UTF-8 continuation. */
  after(state: number, id: number): number {
    return this.endsFrom(state)[id]!;
  }

  private endsFrom(start: number): Int8Array {
    let ends = this.ends[start];
    if (!ends) {
      ends = new Int8Array(this.vocabSize);
      for (let id = 0; id < this.vocabSize; id++) {
        let state = start;
        for (let i = this.offsets[id]!; i < this.offsets[id + 1]! && state !== INVALID; i++) state = STEPS[state * 256 + this.bytes[i]!]!;
        ends[id] = state;
      }
      this.ends[start] = ends;
    }
    return ends;
  }
}
