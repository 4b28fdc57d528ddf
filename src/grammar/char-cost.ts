// What a character position costs to compile, for the cost estimates (regex-cost.ts,
// ebnf-cost.ts, schema-check.ts). XGrammar computes a token mask for every position of a
// repetition, and the work grows with the share of the vocabulary that can continue through it:
// measured per position of `X{0,100}` on Qwen2.5's vocabulary, [0-9], [a-f0-9], \d and \s take
// ~0.3 ms, [a-z] ~5, \w and [A-Za-z0-9] ~10, [A-Za-z0-9._%+-] ~13, [^a-z] ~15, [ -~] ~27, and
// [^"], `.` and \S ~45 (the characters of a JSON string the same).
// A literal character costs next to nothing (a 60 KB choice of 5000 strings compiles in ~80 ms).

/** Estimated milliseconds per position, by what the position accepts. */
export const POSITION_COST = {
  literal: 0.01,
  /** At most 16 characters: digits, whitespace, a short set. */
  narrow: 0.5,
  /** At most 32 characters: one case of letters. */
  letters: 5,
  /** At most 64 characters: letters and digits, \w. */
  words: 10,
  /** At most 128 characters: printable ASCII. */
  ascii: 30,
  /** More, or a negated set, `.`, \S, \W, \D, a Unicode property: nearly every token can go on through it. */
  wide: 50,
} as const;

/** The cost of one position of a character set of `width` characters (Infinity: negated or open). */
export function setCost(width: number): number {
  if (width <= 1) return POSITION_COST.literal;
  if (width <= 16) return POSITION_COST.narrow;
  if (width <= 32) return POSITION_COST.letters;
  if (width <= 64) return POSITION_COST.words;
  if (width <= 128) return POSITION_COST.ascii;
  return POSITION_COST.wide;
}

/**
 * Positions XGrammar builds for a repetition {min,max} (max undefined: unbounded): it unzips up to
 * 128 copies, and beyond that 128 more behind a repeat rule (cpp/grammar_parser.cc,
 * HandleRepetitionRange), so no repetition costs more than ~256 positions.
 */
export function repeatPositions(min: number, max: number | undefined): number {
  const unzipped = max === undefined ? min + 1 : max;
  return Math.min(Math.max(unzipped, 1), 256);
}

/** Widths of the class escapes, as regexes and XGrammar's EBNF write them. */
const ESCAPE_WIDTH: Readonly<Record<string, number>> = { d: 10, s: 6, w: 63, D: Infinity, S: Infinity, W: Infinity, p: Infinity, P: Infinity };

/**
 * Reads the character set that opens at `text[start]` ('['): where it ends (past its ']') and its
 * width (Infinity when negated). Lenient: an unclosed set runs to the end of the text.
 */
export function readCharSet(text: string, start: number): { end: number; width: number } {
  let i = start + 1;
  let negated = false;
  if (text[i] === '^') {
    negated = true;
    i++;
  }
  let width = 0;
  let previous: number | undefined; // the code point a '-' may start a range from
  while (i < text.length && text[i] !== ']') {
    let code: number | undefined;
    if (text[i] === '\\') {
      const escaped = readEscape(text, i);
      i = escaped.end;
      if (escaped.width !== undefined) {
        width += escaped.width;
        previous = undefined;
        continue;
      }
      code = escaped.code;
    } else {
      code = text.codePointAt(i)!;
      i += code > 0xffff ? 2 : 1;
    }
    if (text[i] === '-' && text[i + 1] !== ']' && i + 1 < text.length) {
      previous = code;
      i++;
      let to: number | undefined;
      if (text[i] === '\\') {
        const escaped = readEscape(text, i);
        i = escaped.end;
        to = escaped.code;
      } else {
        to = text.codePointAt(i)!;
        i += to > 0xffff ? 2 : 1;
      }
      width += to !== undefined && previous !== undefined && to >= previous ? to - previous + 1 : 1;
      previous = undefined;
    } else width += 1;
  }
  return { end: Math.min(i + 1, text.length), width: negated ? Infinity : width };
}

/**
 * Reads the escape at `text[start]` ('\'): where it ends, and either the code point it stands for
 * or, for a class escape (\d, \w, \p{...}), its width.
 */
export function readEscape(text: string, start: number): { end: number; code?: number; width?: number } {
  const letter = text[start + 1];
  if (letter === undefined) return { end: start + 1, code: 0x5c };
  if (letter in ESCAPE_WIDTH) {
    let end = start + 2;
    if ((letter === 'p' || letter === 'P') && text[end] === '{') {
      const close = text.indexOf('}', end);
      end = close < 0 ? text.length : close + 1;
    }
    return { end, width: ESCAPE_WIDTH[letter] };
  }
  const hex = (from: number, digits: number | undefined) => {
    let end = from;
    while (end < text.length && (digits === undefined || end - from < digits) && /[0-9a-fA-F]/.test(text[end]!)) end++;
    return { end, code: end > from ? parseInt(text.slice(from, end), 16) : letter.charCodeAt(0) };
  };
  if (letter === 'x') return text[start + 2] === '{' ? braced(text, start + 3) : hex(start + 2, undefined);
  if (letter === 'u') return text[start + 2] === '{' ? braced(text, start + 3) : hex(start + 2, 4);
  if (letter === 'U') return hex(start + 2, 8);
  const code = text.codePointAt(start + 1)!;
  return { end: start + 1 + (code > 0xffff ? 2 : 1), code };
}

/** `\u{...}`: the hex digits up to '}'. */
function braced(text: string, from: number): { end: number; code: number } {
  const close = text.indexOf('}', from);
  const end = close < 0 ? text.length : close + 1;
  const code = parseInt(text.slice(from, close < 0 ? text.length : close), 16);
  return { end, code: Number.isFinite(code) ? code : 0x75 };
}
