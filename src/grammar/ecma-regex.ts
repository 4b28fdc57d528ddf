// Regular expressions read as ECMA-262 reads them with the u flag (the flag ajv compiles a JSON
// schema's `pattern` with), into a tree that pattern-rule.ts writes as EBNF. XGrammar's own regex
// reader (cpp/regex_converter.cc, 0.1.27) reads many valid regexes differently and takes invalid
// ones (measured): `*`, `+`, `?` with nothing before repeat whatever precedes them in the grammar
// (for a string, its opening quote); a top-level `a|b` is not grouped; `[\^]` is written `[^]`
// (any character); `\S` leaves out `[`; `.` takes line breaks; `^` and `$` in the middle are
// dropped; a NUL character ends the pattern; `\e`, `\a` are ESC and BEL. So no regex reaches it:
//
// - The syntax is checked by the JavaScript engine's own RegExp (u flag), whose message a refusal
//   carries; regex outputs may also escape any ASCII character that is no letter or digit (`\-`,
//   `\#`, `\ `, as Python's re.escape writes them), each standing for itself.
// - What has no exact grammar is refused: lookarounds, backreferences, `\b` and `\B`, Unicode
//   property escapes, group modifiers, repetition counts over MAX_REPEAT, and `^` or `$` where
//   text could come before or after them (the grammar matches the whole string, where `^` and `$`
//   hold only at its ends).
// Browser code: nothing here may import Node modules.
import { complement, normalize, union, type CodeRanges } from './code-ranges.ts';
import { MAX_REPEAT } from './limits.ts';

/** One character of a set: its code points, and whether it came from a negation (`.`, `[^...]`, `\S`). */
export interface CharSet {
  ranges: CodeRanges;
  /** Made by a negation: its writer may leave out what no one would mean by it (control characters in JSON). */
  broad: boolean;
}

export type RegexTerm =
  | { kind: 'char'; point: number }
  | { kind: 'set'; set: CharSet }
  | { kind: 'group'; body: RegexAlternation }
  | { kind: 'repeat'; body: RegexTerm; min: number; max: number | undefined }
  | { kind: 'anchor'; at: 'start' | 'end' };

/** Branches, each a sequence of terms. */
export type RegexAlternation = RegexTerm[][];

/** Why a regex is refused: not valid ECMA-262 syntax, or valid but with no exact grammar. */
export class RegexError extends Error {
  override name = 'RegexError';
  constructor(
    readonly kind: 'invalid' | 'unsupported',
    message: string,
  ) {
    super(message);
  }
}

export interface RegexDialect {
  /** `\` before an ASCII character that is no letter or digit stands for it (beyond ECMA's syntax characters). */
  punctuationEscapes: boolean;
}

/** JSON schema patterns: ECMA-262 with the u flag, as ajv compiles them. */
export const ECMA_PATTERN: RegexDialect = { punctuationEscapes: false };
/** Regex outputs (vLLM's guided_regex): ECMA-262 with the u flag, and escapes of any ASCII punctuation. */
export const REGEX_OUTPUT: RegexDialect = { punctuationEscapes: true };


const SYNTAX_CHARACTERS = '^$\\.*+?()[]{}|/';
const CONTROL_ESCAPES: Readonly<Record<string, number>> = { f: 0x0c, n: 0x0a, r: 0x0d, t: 0x09, v: 0x0b };
const DIGITS: CodeRanges = [[0x30, 0x39]];
const WORD: CodeRanges = normalize([[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]]);
/** ECMA-262's WhiteSpace and LineTerminator. */
const SPACE: CodeRanges = normalize([
  [0x09, 0x0d], [0x20, 0x20], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a], [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000], [0xfeff, 0xfeff],
]);
const LINE_TERMINATORS: CodeRanges = [[0x0a, 0x0a], [0x0d, 0x0d], [0x2028, 0x2029]];
const CLASS_ESCAPES: Readonly<Record<string, CharSet>> = {
  d: { ranges: DIGITS, broad: false },
  D: { ranges: complement(DIGITS), broad: true },
  w: { ranges: WORD, broad: false },
  W: { ranges: complement(WORD), broad: true },
  s: { ranges: SPACE, broad: false },
  S: { ranges: complement(SPACE), broad: true },
};

/** Reads `source` in `dialect`; throws RegexError. */
export function parseRegex(source: string, dialect: RegexDialect): RegexAlternation {
  checkRegexSyntax(source, dialect);
  const reader = new RegexReader(source, dialect);
  const tree = reader.disjunction();
  if (reader.at < source.length) throw new Error(`regex reader stopped at ${reader.at} of ${JSON.stringify(source)}`);
  checkAnchors(tree, true, true);
  return tree;
}

/** Throws RegexError('invalid') with the engine's message when RegExp refuses `source` (u flag). */
export function checkRegexSyntax(source: string, dialect: RegexDialect = ECMA_PATTERN): void {
  try {
    new RegExp(ecmaSource(source, dialect), 'u');
  } catch (error) {
    throw new RegexError('invalid', (error as Error).message.replace(/^Invalid regular expression: \/.*\/u?: /s, ''));
  }
}

/** `source` as ECMA-262 (u flag) writes it: each `\` + ASCII punctuation the dialect takes and ECMA does not as `\xHH`. */
export function ecmaSource(source: string, dialect: RegexDialect): string {
  if (!dialect.punctuationEscapes) return source;
  let out = '';
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c !== '\\' || i + 1 >= source.length) {
      out += c;
      continue;
    }
    const next = source[i + 1]!;
    out += punctuation(next) && !SYNTAX_CHARACTERS.includes(next) ? `\\x${next.charCodeAt(0).toString(16).padStart(2, '0')}` : `\\${next}`;
    i++;
  }
  return out;
}

/** An ASCII character that is no letter or digit. */
function punctuation(c: string): boolean {
  return c.charCodeAt(0) < 0x80 && !/[A-Za-z0-9]/.test(c);
}

/** Reads syntax RegExp has accepted; anything it does not expect is a bug, thrown as Error. */
class RegexReader {
  at = 0;
  constructor(
    private readonly source: string,
    private readonly dialect: RegexDialect,
  ) {}

  disjunction(): RegexAlternation {
    const branches = [this.alternative()];
    while (this.source[this.at] === '|') {
      this.at++;
      branches.push(this.alternative());
    }
    return branches;
  }

  private alternative(): RegexTerm[] {
    const terms: RegexTerm[] = [];
    while (this.at < this.source.length && this.source[this.at] !== '|' && this.source[this.at] !== ')') terms.push(this.term());
    return terms;
  }

  private term(): RegexTerm {
    const { source } = this;
    const c = source[this.at];
    if (c === '^' || c === '$') {
      this.at++;
      return { kind: 'anchor', at: c === '^' ? 'start' : 'end' };
    }
    if (c === '\\' && (source[this.at + 1] === 'b' || source[this.at + 1] === 'B')) throw unsupported('word boundaries (\\b, \\B) are not supported');
    if (/^\(\?<?[=!]/.test(source.slice(this.at, this.at + 4))) throw unsupported('lookarounds ((?=, (?!, (?<=, (?<!) are not supported');
    return this.quantified(this.atom());
  }

  private quantified(body: RegexTerm): RegexTerm {
    const { source } = this;
    let min: number;
    let max: number | undefined;
    const c = source[this.at];
    if (c === '*' || c === '+' || c === '?') {
      this.at++;
      [min, max] = c === '*' ? [0, undefined] : c === '+' ? [1, undefined] : [0, 1];
    } else if (c === '{') {
      const count = /\{(\d+)(?:(,)(\d*))?\}/y;
      count.lastIndex = this.at;
      const m = count.exec(source);
      if (!m) throw new Error(`a brace that is no quantifier at ${this.at} of ${JSON.stringify(source)}`);
      this.at += m[0].length;
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? undefined : Number(m[3]);
    } else return body;
    if (source[this.at] === '?') this.at++; // lazy: the same strings
    if (min > MAX_REPEAT || (max !== undefined && max > MAX_REPEAT)) throw unsupported(`repetition counts over ${MAX_REPEAT} are not supported`);
    return { kind: 'repeat', body, min, max };
  }

  private atom(): RegexTerm {
    const { source } = this;
    const c = source[this.at]!;
    if (c === '(') return this.group();
    if (c === '.') {
      this.at++;
      return { kind: 'set', set: { ranges: complement(LINE_TERMINATORS), broad: true } };
    }
    if (c === '[') return { kind: 'set', set: this.characterClass() };
    if (c === '\\') return this.atomEscape();
    if ('*+?{}]'.includes(c)) throw new Error(`unexpected ${c} at ${this.at} of ${JSON.stringify(source)}`);
    return { kind: 'char', point: this.codePoint() };
  }

  private group(): RegexTerm {
    const { source } = this;
    this.at++;
    if (source[this.at] === '?') {
      if (source[this.at + 1] === ':') this.at += 2;
      else if (source[this.at + 1] === '<') this.at = source.indexOf('>', this.at) + 1; // a name: no matter
      else throw unsupported('group modifiers ((?i:...) and the like) are not supported');
    }
    const body = this.disjunction();
    if (source[this.at] !== ')') throw new Error(`unclosed group at ${this.at} of ${JSON.stringify(source)}`);
    this.at++;
    return { kind: 'group', body };
  }

  private atomEscape(): RegexTerm {
    const e = this.source[this.at + 1]!;
    if (/[1-9]/.test(e) || e === 'k') throw unsupported('backreferences are not supported');
    if (e === 'p' || e === 'P') throw unsupported('Unicode property escapes (\\p{...}, \\P{...}) are not supported');
    if (Object.hasOwn(CLASS_ESCAPES, e)) {
      this.at += 2;
      return { kind: 'set', set: CLASS_ESCAPES[e]! };
    }
    this.at++;
    return { kind: 'char', point: this.characterEscape() };
  }

  /** The escape after a backslash (this.at is past it): its code point. */
  private characterEscape(): number {
    const { source } = this;
    const e = source[this.at]!;
    if (Object.hasOwn(CONTROL_ESCAPES, e)) {
      this.at++;
      return CONTROL_ESCAPES[e]!;
    }
    if (e === 'c') {
      this.at += 2;
      return source.charCodeAt(this.at - 1) % 32;
    }
    if (e === '0') {
      this.at++;
      return 0;
    }
    if (e === 'x') {
      this.at += 3;
      return parseInt(source.slice(this.at - 2, this.at), 16);
    }
    if (e === 'u') return this.unicodeEscape();
    if (SYNTAX_CHARACTERS.includes(e) || e === '-' || (this.dialect.punctuationEscapes && punctuation(e))) {
      this.at++;
      return e.charCodeAt(0);
    }
    throw new Error(`unexpected escape \\${e} in ${JSON.stringify(source)}`);
  }

  /** `\uHHHH` (a surrogate pair of two such joined, as the u flag reads them) or `\u{H...}`. */
  private unicodeEscape(): number {
    const { source } = this;
    if (source[this.at + 1] === '{') {
      const close = source.indexOf('}', this.at);
      const point = parseInt(source.slice(this.at + 2, close), 16);
      this.at = close + 1;
      return point;
    }
    const point = parseInt(source.slice(this.at + 1, this.at + 5), 16);
    this.at += 5;
    if (point >= 0xd800 && point <= 0xdbff && /^\\u[dD][c-fC-F][0-9a-fA-F]{2}/.test(source.slice(this.at, this.at + 6))) {
      const low = parseInt(source.slice(this.at + 2, this.at + 6), 16);
      this.at += 6;
      return 0x10000 + ((point - 0xd800) << 10) + (low - 0xdc00);
    }
    return point;
  }

  private characterClass(): CharSet {
    const { source } = this;
    this.at++;
    const negated = source[this.at] === '^';
    if (negated) this.at++;
    const members: CodeRanges[] = [];
    let broad = negated;
    while (source[this.at] !== ']') {
      if (this.at >= source.length) throw new Error(`unclosed class in ${JSON.stringify(source)}`);
      const first = this.classAtom();
      if (typeof first === 'number' && source[this.at] === '-' && source[this.at + 1] !== ']') {
        this.at++;
        const last = this.classAtom();
        if (typeof last !== 'number') throw new Error(`a range to a class escape in ${JSON.stringify(source)}`);
        members.push([[first, last]]);
      } else if (typeof first === 'number') members.push([[first, first]]);
      else {
        members.push(first.ranges);
        broad ||= first.broad;
      }
    }
    this.at++;
    const ranges = union(...members);
    return { ranges: negated ? complement(ranges) : ranges, broad };
  }

  /** One character of a class, or the set of a class escape. */
  private classAtom(): number | CharSet {
    const { source } = this;
    if (source[this.at] !== '\\') return this.codePoint();
    const e = source[this.at + 1]!;
    if (e === 'p' || e === 'P') throw unsupported('Unicode property escapes (\\p{...}, \\P{...}) are not supported');
    if (Object.hasOwn(CLASS_ESCAPES, e)) {
      this.at += 2;
      return CLASS_ESCAPES[e]!;
    }
    if (e === 'b') {
      this.at += 2;
      return 0x08;
    }
    this.at++;
    return this.characterEscape();
  }

  private codePoint(): number {
    const point = this.source.codePointAt(this.at)!;
    this.at += point > 0xffff ? 2 : 1;
    return point;
  }
}

/**
 * Refuses `^` where text could come before it and `$` where text could come after it: the grammar
 * matches the whole string, so there they would not hold. `start` / `end`: whether the terms
 * checked begin / end the match.
 */
function checkAnchors(alternation: RegexAlternation, start: boolean, end: boolean): void {
  for (const terms of alternation) {
    // Whether only `^`s come before term i, and only `$`s after it: a pass each way (linear).
    const onlyStartsBefore: boolean[] = [];
    for (let i = 0, only = true; i < terms.length; i++) {
      onlyStartsBefore.push(only);
      const term = terms[i]!;
      only &&= term.kind === 'anchor' && term.at === 'start';
    }
    const onlyEndsAfter: boolean[] = new Array<boolean>(terms.length);
    for (let i = terms.length - 1, only = true; i >= 0; i--) {
      onlyEndsAfter[i] = only;
      const term = terms[i]!;
      only &&= term.kind === 'anchor' && term.at === 'end';
    }
    terms.forEach((term, i) => checkTerm(term, start && onlyStartsBefore[i]!, end && onlyEndsAfter[i]!));
  }
}

function checkTerm(term: RegexTerm, start: boolean, end: boolean): void {
  if (term.kind === 'anchor') {
    if (term.at === 'start' && !start) throw unsupported('"^" is supported only where nothing can come before it');
    if (term.at === 'end' && !end) throw unsupported('"$" is supported only where nothing can come after it');
  } else if (term.kind === 'group') checkAnchors(term.body, start, end);
  else if (term.kind === 'repeat') {
    const once = term.max !== undefined && term.max <= 1;
    checkTerm(term.body, start && once, end && once);
  }
}

function unsupported(message: string): RegexError {
  return new RegexError('unsupported', message);
}
