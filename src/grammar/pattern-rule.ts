// A string `pattern` as JSON string content. XGrammar turns the regex into EBNF over the characters
// between the quotes as they are, so `.`, a negated class or `\s` writes `"`, `\` or a control
// character raw: the quote ends the string early, the backslash starts an escape, the control
// character is not allowed in JSON (measured on 0.1.27: `^a.b$` takes `"a"b"`). Here XGrammar's
// EBNF for the regex is rewritten so that each character is written as JSON writes it: `"` as
// `\"`, `\` as `\\`, a control character of a literal or of a class that names it as its escape;
// `.` and negated classes leave out control characters (a subset: a validator would read them
// fine, but they are never needed).
//
// XGrammar 0.1.27 also matches character classes wrongly beyond ASCII (measured): a range with a
// non-ASCII end matches ASCII characters instead (`[\u4e00-\u9fff]` takes `"` and `x`, not `中`),
// and a negated class takes every non-ASCII character whatever it lists (`[^é]` takes `é`); only
// a single non-ASCII character in a class is right. So a class is written as its ASCII part, its
// non-ASCII characters one by one (ranges of up to MAX_LISTED; a longer one is refused), and, for
// a negated class that lists only ASCII, `[^\u0000-\u007f]`: every non-ASCII character, which is
// what it means. `.` and other negated classes give no non-ASCII character (JavaScript's `.` does
// not match U+2028 and U+2029, which no class can leave out).
// Browser code: nothing here may import Node modules.
import { ebnfLiteral } from './choice.ts';
import { StructuredOutputError } from './types.ts';

/** Inclusive code point ranges, sorted, not overlapping. */
type Ranges = [number, number][];

const MAX_CODE_POINT = 0x10ffff;
/** Characters JSON never writes as they are inside a string. */
const NEEDS_ESCAPE: Ranges = [
  [0x00, 0x1f],
  [0x22, 0x22],
  [0x5c, 0x5c],
];
/** Surrogate code points: no character of well-formed text. */
const SURROGATES: Ranges = [[0xd800, 0xdfff]];
const ASCII: Ranges = [[0x00, 0x7f]];
/** The longest non-ASCII range of a class written out character by character. */
export const MAX_LISTED = 64;
const SHORT_ESCAPES: Record<number, string> = { 0x08: '\\b', 0x09: '\\t', 0x0a: '\\n', 0x0c: '\\f', 0x0d: '\\r', 0x22: '\\"', 0x5c: '\\\\' };

/**
 * The body of XGrammar's rule for a string with `pattern` (between its `"\""` literals), rewritten
 * to write JSON string content. Throws on text it cannot read (a change in XGrammar's printing).
 */
export function jsonStringPattern(body: string): string {
  let out = '';
  let i = 0;
  while (i < body.length) {
    const c = body[i]!;
    if (c === '"') {
      const end = closing(body, i + 1, '"');
      out += literal(decode(body.slice(i + 1, end)));
      i = end + 1;
    } else if (c === '[') {
      const end = closing(body, i + 1, ']');
      out += characterClass(body.slice(i + 1, end));
      i = end + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** The index of the unescaped `close` at or after `from`. */
function closing(text: string, from: number, close: string): number {
  for (let i = from; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === close) return i;
  }
  throw new Error(`unreadable pattern grammar: no closing ${close} in ${text}`);
}

/** The code points of an EBNF literal's or class's text, escapes read as XGrammar reads them. */
function decode(text: string): number[] {
  const points: number[] = [];
  for (let i = 0; i < text.length; ) {
    const [point, next] = readChar(text, i);
    points.push(point);
    i = next;
  }
  return points;
}

const C_ESCAPES: Record<string, number> = { '0': 0, a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, e: 27 };

/** One character of EBNF text at i: its code point and the index after it. */
function readChar(text: string, i: number): [number, number] {
  if (text[i] !== '\\') {
    const point = text.codePointAt(i)!;
    return [point, i + (point > 0xffff ? 2 : 1)];
  }
  const e = text[i + 1];
  if (e === undefined) throw new Error(`unreadable pattern grammar: a lone backslash in ${text}`);
  const hex = (length: number) => {
    const digits = text.slice(i + 2, i + 2 + length);
    if (!new RegExp(`^[0-9a-fA-F]{${length}}$`).test(digits)) throw new Error(`unreadable pattern grammar: \\${e}${digits} in ${text}`);
    return [parseInt(digits, 16), i + 2 + length] as [number, number];
  };
  if (e === 'x') return hex(2);
  if (e === 'u') return hex(4);
  if (e === 'U') return hex(8);
  if (Object.hasOwn(C_ESCAPES, e)) return [C_ESCAPES[e]!, i + 2];
  return [text.codePointAt(i + 1)!, i + 2 + (text.codePointAt(i + 1)! > 0xffff ? 1 : 0)]; // \" \\ \] \- \? ...: the character itself
}

/** A literal's characters as JSON writes them, in one group when it takes more than one element. */
function literal(points: number[]): string {
  const parts: string[] = [];
  let plain = '';
  for (const point of points) {
    if (inRanges(point, NEEDS_ESCAPE)) {
      if (plain !== '') parts.push(ebnfLiteral(plain));
      plain = '';
      parts.push(ebnfLiteral(jsonEscape(point)));
    } else plain += String.fromCodePoint(point);
  }
  if (plain !== '' || parts.length === 0) parts.push(ebnfLiteral(plain));
  return parts.length === 1 ? parts[0]! : `( ${parts.join(' ')} )`;
}

/**
 * A class as JSON writes its characters, as XGrammar matches them right: the ASCII ones that need
 * no escape as a class, the escapes of the others, the non-ASCII ones (see the top).
 */
function characterClass(text: string): string {
  const negated = text.startsWith('^');
  const members = decodeClass(negated ? text.slice(1) : text);
  const set = negated ? complement(members) : members;
  const any = !negated && set.length === 1 && set[0]![0] === 0 && set[0]![1] === MAX_CODE_POINT;
  const alternatives: string[] = [];
  const plain = subtract(intersect(set, ASCII), NEEDS_ESCAPE);
  if (plain.length > 0) alternatives.push(classText(plain));
  // Control characters where the class names them; none from `.` or a negated class.
  const controls = negated || any ? [] : intersect(set, [[0x00, 0x1f]]);
  for (const point of [...expand(controls), 0x22, 0x5c]) {
    if (point >= 0x20 && !inRanges(point, set)) continue; // the quote and the backslash, where the class has them
    alternatives.push(ebnfLiteral(jsonEscape(point)));
  }
  if (negated && subtract(members, ASCII).length === 0) alternatives.push('[^\\u0000-\\u007f]');
  else if (!negated && !any) {
    for (const [lo, hi] of subtract(subtract(set, ASCII), SURROGATES)) {
      if (hi - lo >= MAX_LISTED) {
        throw new StructuredOutputError(
          `Unsupported JSON schema: a pattern's character range ${ebnfLiteral(String.fromCodePoint(lo))}-${ebnfLiteral(String.fromCodePoint(hi))} beyond ASCII ` +
            `is longer than ${MAX_LISTED} characters (XGrammar matches such ranges wrongly; list the characters, or split the range)`,
        );
      }
      for (let point = lo; point <= hi; point++) alternatives.push(ebnfLiteral(String.fromCodePoint(point)));
    }
  }
  if (alternatives.length === 0) throw new StructuredOutputError(`Unsupported JSON schema: a pattern's class [${text}] has no character that can be written here`);
  return alternatives.length === 1 ? alternatives[0]! : `( ${alternatives.join(' | ')} )`;
}

/** A class's items (characters and ranges) as ranges. */
function decodeClass(text: string): Ranges {
  const ranges: Ranges = [];
  for (let i = 0; i < text.length; ) {
    const [lo, next] = readChar(text, i);
    i = next;
    if (text[i] === '-' && i + 1 < text.length) {
      const [hi, after] = readChar(text, i + 1);
      ranges.push([lo, hi]);
      i = after;
    } else ranges.push([lo, lo]);
  }
  return normalize(ranges);
}

function classText(ranges: Ranges): string {
  const char = (point: number) => (/[0-9A-Za-z]/.test(String.fromCodePoint(point)) ? String.fromCodePoint(point) : point <= 0xffff ? `\\u${point.toString(16).padStart(4, '0')}` : `\\U${point.toString(16).padStart(8, '0')}`);
  return `[${ranges.map(([lo, hi]) => (lo === hi ? char(lo) : `${char(lo)}-${char(hi)}`)).join('')}]`;
}

/** JSON's escape for a character that needs one. */
function jsonEscape(point: number): string {
  return SHORT_ESCAPES[point] ?? `\\u${point.toString(16).padStart(4, '0')}`;
}

function normalize(ranges: Ranges): Ranges {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: Ranges = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

function complement(ranges: Ranges): Ranges {
  const out: Ranges = [];
  let next = 0;
  for (const [lo, hi] of ranges) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

function intersect(a: Ranges, b: Ranges): Ranges {
  return complement(normalize([...complement(a), ...complement(b)]));
}

function subtract(a: Ranges, b: Ranges): Ranges {
  return intersect(a, complement(b));
}

function inRanges(point: number, ranges: Ranges): boolean {
  return ranges.some(([lo, hi]) => point >= lo && point <= hi);
}

function expand(ranges: Ranges): number[] {
  return ranges.flatMap(([lo, hi]) => Array.from({ length: hi - lo + 1 }, (_, k) => lo + k));
}
