// The bytes one token stands for, as its tokenizer's decoder reads its vocabulary piece: a byte-level
// BPE piece (GPT-2's byte-to-character table: Llama 3, Qwen2) maps back character by character; a
// SentencePiece piece is its text with `▁` as a space, and a byte-fallback piece `<0xNN>` is that
// one byte; an added token (special or not) is its text. Chat logprobs report these `bytes`, so a
// character spelled by several tokens can be rebuilt from them.

type Json = Record<string, unknown>;

/** GPT-2's table, read backwards: the character a byte-level vocabulary writes for each byte → the byte. */
function byteLevelDecoder(): Map<string, number> {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const decoder = new Map<string, number>();
  let shifted = 0;
  for (let b = 0; b < 256; b++) decoder.set(String.fromCodePoint(printable(b) ? b : 256 + shifted++), b);
  return decoder;
}

/** Whether a tokenizer.json decoder (or one of a Sequence) has the given type. */
function hasDecoder(decoder: unknown, type: string): boolean {
  if (!decoder || typeof decoder !== 'object') return false;
  const d = decoder as Json;
  return d.type === type || (Array.isArray(d.decoders) && d.decoders.some((inner) => hasDecoder(inner, type)));
}

const encoder = new TextEncoder();

/**
 * A function from a vocabulary piece to its bytes, for the tokenizer.json `json`; `added` tells
 * the pieces of added tokens (their text is literal in every vocabulary).
 */
export function pieceBytesReader(json: Json, added: ReadonlySet<string>): (piece: string) => Uint8Array {
  if (hasDecoder(json.decoder, 'ByteLevel')) {
    const table = byteLevelDecoder();
    return (piece) => {
      if (added.has(piece)) return encoder.encode(piece);
      const chars = [...piece];
      if (!chars.every((c) => table.has(c))) return encoder.encode(piece);
      return Uint8Array.from(chars, (c) => table.get(c)!);
    };
  }
  const byteFallback = (json.model as Json | undefined)?.byte_fallback === true || hasDecoder(json.decoder, 'ByteFallback');
  return (piece) => {
    if (added.has(piece)) return encoder.encode(piece);
    const byte = byteFallback ? /^<0x([0-9A-Fa-f]{2})>$/.exec(piece) : null;
    if (byte) return Uint8Array.of(parseInt(byte[1]!, 16));
    return encoder.encode(piece.replaceAll('\u2581', ' '));
  };
}
