// A regex's shape before it is read (ecma-regex.ts, which reports syntax errors): how deeply its
// groups nest, so the reader's recursion stays within the limit, and what its grammar is estimated
// to cost to compile (char-cost.ts). Lenient: whatever it does not know counts as a literal.
import { readCharSet, readEscape, repeatPositions, setCost, POSITION_COST } from './char-cost.ts';

export interface PatternShape {
  /** The deepest nesting of groups. */
  depth: number;
  /** Estimated compile milliseconds (on a vocabulary of up to COST_VOCAB tokens). */
  cost: number;
}

/** The shape of `pattern` (JavaScript / Python regex syntax, as XGrammar's regex converter reads it). */
export function regexShape(pattern: string): PatternShape {
  const reader = new RegexReader(pattern);
  let cost = reader.alternation(0);
  while (reader.at < pattern.length) {
    reader.at++; // past a ')' that closes nothing
    cost += reader.alternation(0);
  }
  return { depth: reader.depth, cost };
}

class RegexReader {
  at = 0;
  depth = 0;
  constructor(private readonly text: string) {}

  /** Branches up to ')' or the end: each is compiled, so their costs add up. */
  alternation(level: number): number {
    this.depth = Math.max(this.depth, level);
    let cost = this.sequence(level);
    while (this.text[this.at] === '|') {
      this.at++;
      cost += this.sequence(level);
    }
    return cost;
  }

  private sequence(level: number): number {
    let cost = 0;
    while (this.at < this.text.length && this.text[this.at] !== '|' && this.text[this.at] !== ')') {
      const atom = this.atom(level);
      cost += atom * this.quantifier();
    }
    return cost;
  }

  /** One atom's cost per position. */
  private atom(level: number): number {
    const { text } = this;
    const c = text[this.at]!;
    if (c === '(') {
      this.at++;
      if (text[this.at] === '?') this.skipGroupPrefix();
      const cost = this.alternation(level + 1);
      if (text[this.at] === ')') this.at++;
      return cost;
    }
    if (c === '[') {
      const set = readCharSet(text, this.at);
      this.at = set.end;
      return setCost(set.width);
    }
    if (c === '\\') {
      const escape = readEscape(text, this.at);
      this.at = escape.end;
      return escape.width !== undefined ? setCost(escape.width) : POSITION_COST.literal;
    }
    this.at += (text.codePointAt(this.at) ?? 0) > 0xffff ? 2 : 1;
    if (c === '.') return POSITION_COST.wide;
    if (c === '^' || c === '$') return 0;
    return POSITION_COST.literal;
  }

  /** `?:`, `?=`, `?!`, `?<=`, `?<!`, `?<name>`, `?P<name>` after '('. */
  private skipGroupPrefix(): void {
    const rest = this.text.slice(this.at, this.at + 3);
    if (/^\?(:|=|!)/.test(rest)) this.at += 2;
    else if (/^\?<[=!]/.test(rest)) this.at += 3;
    else if (/^\?P?</.test(rest)) {
      const close = this.text.indexOf('>', this.at);
      this.at = close < 0 ? this.text.length : close + 1;
    }
  }

  /** The positions a quantifier after an atom makes (1 without one), then past a lazy or possessive mark. */
  private quantifier(): number {
    const { text } = this;
    let positions = 1;
    const c = text[this.at];
    if (c === '*' || c === '?') this.at++;
    else if (c === '+') {
      this.at++;
      positions = 2;
    } else if (c === '{') {
      const m = /^\{(\d*)(,?)(\d*)\}/.exec(text.slice(this.at, this.at + 48));
      if (!m || (m[1] === '' && m[3] === '')) return 1; // a literal '{'
      this.at += m[0].length;
      const min = m[1] === '' ? 0 : Number(m[1]);
      const max = m[2] === '' ? min : m[3] === '' ? undefined : Number(m[3]);
      positions = repeatPositions(min, max);
    } else return 1;
    if (text[this.at] === '?' || text[this.at] === '+') this.at++;
    return positions;
  }
}
