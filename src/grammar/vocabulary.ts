// The vocabulary as XGrammar reads it: one string per token id, the token's bytes written with
// GPT-2's byte-to-character table, which XGrammar's 'byte_level' decoder (cpp/tokenizer_info.cc,
// ByteLevelDecoder) maps back byte for byte. Any byte sequence, a partial UTF-8 character
// included, is then a valid JS string, whatever the tokenizer's own format (SentencePiece with
// byte fallback, byte-level BPE, ...): the bytes come from TextTokenizer.tokenBytes.
//
// Special and control tokens, and ids without bytes, are '' : XGrammar counts an empty token as
// special (TokenizerInfo::Impl::IsSpecialToken), leaves it out of every mask and rejects it in
// AcceptToken; a stop token is the exception, allowed where the structure may end.
import type { TextTokenizer } from '../tokenizer/types.ts';

/** GPT-2's bytes_to_unicode: the character that stands for each byte. */
const BYTE_TO_CHAR: readonly string[] = (() => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const chars: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) chars.push(String.fromCodePoint(printable(b) ? b : 256 + shifted++));
  return chars;
})();

/** The byte each character of a byte-level piece stands for (by char code; -1: none). */
const CHAR_TO_BYTE: Int16Array = (() => {
  const table = new Int16Array(512).fill(-1);
  BYTE_TO_CHAR.forEach((char, byte) => (table[char.charCodeAt(0)] = byte));
  return table;
})();

/** The bytes of a byte-level vocabulary piece. */
export function pieceBytes(piece: string): Uint8Array {
  const bytes = new Uint8Array(piece.length);
  for (let i = 0; i < piece.length; i++) bytes[i] = CHAR_TO_BYTE[piece.charCodeAt(i)]!;
  return bytes;
}

/** `bytes` as a byte-level vocabulary piece (one character per byte). */
export function byteLevelPiece(bytes: Uint8Array): string {
  let piece = '';
  for (const b of bytes) piece += BYTE_TO_CHAR[b];
  return piece;
}

/** The tokenizer's bytes reader, or an error that says structured output needs it. */
export function tokenBytesOf(tokenizer: TextTokenizer): (id: number) => Uint8Array | undefined {
  const read = tokenizer.tokenBytes?.bind(tokenizer);
  if (!read) throw new Error("structured output needs the tokenizer's token bytes (TextTokenizer.tokenBytes)");
  return read;
}

/**
 * The first `vocabSize` ids as byte-level pieces for TokenizerInfo 'byte_level': '' for special
 * tokens, ids without bytes and ids past the tokenizer's vocabulary.
 */
export function byteLevelVocabulary(tokenizer: TextTokenizer, vocabSize: number): string[] {
  const bytesOf = tokenBytesOf(tokenizer);
  const pieces = new Array<string>(vocabSize);
  for (let id = 0; id < vocabSize; id++) {
    const bytes = id < tokenizer.vocabSize && !tokenizer.isSpecial(id) ? bytesOf(id) : undefined;
    pieces[id] = bytes ? byteLevelPiece(bytes) : '';
  }
  return pieces;
}
