// The tokens for a jump-forward string (the text the grammar allows as the only way on): the
// tokenizer's own encoding of it, so the model sees the tokens it was trained on, cut where a token
// stops matching the string's bytes, at a special token, or at an id past the vocabulary.
// A SentencePiece tokenizer writes a dummy space before the text it encodes (`▁{` for `{`): when
// the tokens spell one space more than the string, that space comes off the first token, whose
// other bytes are then spelled by the longest vocabulary pieces (byte-fallback tokens spell any).
import type { TextTokenizer } from '../tokenizer/types.ts';
import { byteLevelPiece, tokenBytesOf } from './vocabulary.ts';

/** The longest piece looked for when spelling bytes (longer vocabulary pieces are not used there). */
const MAX_PIECE_BYTES = 32;

export class JumpForwardTokens {
  private readonly bytesOf: (id: number) => Uint8Array | undefined;
  /** Byte-level piece → id; built from the tokenizer the first time a dummy space needs it, unless given. */
  private byPiece: Map<string, number> | undefined;

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly vocabSize: number,
    /** The vocabulary as byte-level pieces (vocabulary.ts), when the tokenizer writes a dummy space. */
    pieces?: readonly string[],
  ) {
    this.bytesOf = tokenBytesOf(tokenizer);
    if (pieces) this.byPiece = pieceIds(pieces);
  }

  /** Whether the tokenizer writes a dummy space before the text it encodes (SentencePiece). */
  static writesDummySpace(tokenizer: TextTokenizer): boolean {
    const bytesOf = tokenBytesOf(tokenizer);
    const spelled = tokenizer.encode('a', { addBos: false }).flatMap((id) => [...(bytesOf(id) ?? [])]);
    return spelled.length === 2 && spelled[0] === 0x20 && spelled[1] === 0x61;
  }

  /** Ids whose bytes spell a prefix of `text`, as the tokenizer splits it. */
  tokens(text: string): number[] {
    const expected = new TextEncoder().encode(text);
    const encoded: { id: number; bytes: Uint8Array }[] = [];
    for (const id of this.tokenizer.encode(text, { addBos: false })) {
      const bytes = this.usable(id);
      if (!bytes) break;
      encoded.push({ id, bytes });
    }
    if (encoded.length > 0 && this.spellsDummySpace(encoded, expected)) {
      const [first] = encoded.splice(0, 1);
      encoded.unshift(...this.spell(first!.bytes.subarray(1)));
    }
    const ids: number[] = [];
    let at = 0;
    for (const { id, bytes } of encoded) {
      if (!startsWith(expected, bytes, at)) break;
      ids.push(id);
      at += bytes.length;
    }
    return ids;
  }

  /** Whether the tokens begin with a space the text lacks at that place (one more leading space). */
  private spellsDummySpace(encoded: readonly { bytes: Uint8Array }[], expected: Uint8Array): boolean {
    const first = encoded[0]!.bytes;
    if (first[0] !== 0x20) return false;
    let leading = 0;
    while (leading < expected.length && expected[leading] === 0x20) leading++;
    let spelled = 0;
    outer: for (const { bytes } of encoded) {
      for (const b of bytes) {
        if (b !== 0x20) break outer;
        spelled++;
      }
    }
    return spelled === leading + 1;
  }

  /** Tokens spelling `bytes`, longest vocabulary piece first; fewer when some byte has no token. */
  private spell(bytes: Uint8Array): { id: number; bytes: Uint8Array }[] {
    this.byPiece ??= pieceIds(this.pieces());
    const spelled: { id: number; bytes: Uint8Array }[] = [];
    let at = 0;
    while (at < bytes.length) {
      let length = Math.min(bytes.length - at, MAX_PIECE_BYTES);
      let id: number | undefined;
      for (; length > 0; length--) {
        id = this.byPiece.get(byteLevelPiece(bytes.subarray(at, at + length)));
        if (id !== undefined) break;
      }
      if (id === undefined) break;
      spelled.push({ id, bytes: bytes.subarray(at, at + length) });
      at += length;
    }
    return spelled;
  }

  /** The byte-level piece of every id ('' for one that may not be forced). */
  private pieces(): string[] {
    return Array.from({ length: this.vocabSize }, (_, id) => {
      const bytes = this.usable(id);
      return bytes ? byteLevelPiece(bytes) : '';
    });
  }

  /** The bytes of a token that may be forced, or undefined for one that may not. */
  private usable(id: number): Uint8Array | undefined {
    if (id < 0 || id >= this.vocabSize || id >= this.tokenizer.vocabSize || this.tokenizer.isSpecial(id)) return undefined;
    const bytes = this.bytesOf(id);
    return bytes && bytes.length > 0 ? bytes : undefined;
  }
}

/** Every token by its piece (of two with the same bytes, the higher id: byte-fallback tokens come first). */
function pieceIds(pieces: readonly string[]): Map<string, number> {
  const byPiece = new Map<string, number>();
  pieces.forEach((piece, id) => {
    if (piece !== '') byPiece.set(piece, id);
  });
  return byPiece;
}

function startsWith(text: Uint8Array, part: Uint8Array, at: number): boolean {
  if (at + part.length > text.length) return false;
  for (let i = 0; i < part.length; i++) if (text[at + i] !== part[i]) return false;
  return true;
}
