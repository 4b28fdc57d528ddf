// An EBNF grammar's shape before XGrammar sees it (XGrammar's dialect: `name ::= expression`,
// strings, character classes, groups, lookaheads `(= ...)`, `*` `+` `?` `{m,n}`, `#` comments,
// builtin calls such as `TagDispatch(...)`): how deeply its groups nest and what it is estimated to
// cost to compile (char-cost.ts), from rule `root`. A rule reference costs what the rule costs, each
// time it appears (XGrammar inlines small rules; a reference back into a rule being read costs 0). A
// lenient reader: XGrammar reports syntax errors.
import { readCharSet, repeatPositions, setCost, POSITION_COST } from './char-cost.ts';
import type { PatternShape } from './regex-cost.ts';

type Token =
  | { kind: 'string'; length: number }
  | { kind: 'set'; width: number }
  | { kind: 'name'; name: string }
  | { kind: 'repeat'; positions: number }
  | { kind: '::=' | '(' | ')' | '|' | ',' | 'other' };

/** The shape of `grammar`, from its rule `root`. */
export function ebnfShape(grammar: string): PatternShape {
  const tokens = lex(grammar);
  const rules = new Map<string, Token[]>();
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.kind !== 'name' || tokens[i + 1]?.kind !== '::=') continue;
    let end = i + 2;
    while (end < tokens.length && !(tokens[end]!.kind === 'name' && tokens[end + 1]?.kind === '::=')) end++;
    rules.set(t.name, tokens.slice(i + 2, end));
    i = end - 1;
  }
  return { depth: maxDepth(tokens), cost: new RuleCosts(rules).of('root') };
}

/** The deepest nesting of parentheses. */
function maxDepth(tokens: readonly Token[]): number {
  let depth = 0;
  let level = 0;
  for (const t of tokens) {
    if (t.kind === '(') depth = Math.max(depth, ++level);
    else if (t.kind === ')') level = Math.max(0, level - 1);
    else if (t.kind === '::=') level = 0;
  }
  return depth;
}

class RuleCosts {
  private readonly known = new Map<string, number>();
  private readonly reading = new Set<string>();
  constructor(private readonly rules: ReadonlyMap<string, readonly Token[]>) {}

  of(name: string): number {
    const known = this.known.get(name);
    if (known !== undefined) return known;
    const body = this.rules.get(name);
    if (!body || this.reading.has(name)) return 0;
    this.reading.add(name);
    const cost = this.expression(body, { at: 0 });
    this.reading.delete(name);
    this.known.set(name, cost);
    return cost;
  }

  /** Alternatives up to ')' or the end: all are compiled, so their costs add up. */
  private expression(tokens: readonly Token[], cursor: { at: number }): number {
    let cost = 0;
    while (cursor.at < tokens.length && tokens[cursor.at]!.kind !== ')') {
      const element = this.element(tokens, cursor);
      const next = tokens[cursor.at];
      if (next?.kind === 'repeat') {
        cursor.at++;
        cost += element * next.positions;
      } else cost += element;
    }
    return cost;
  }

  private element(tokens: readonly Token[], cursor: { at: number }): number {
    const t = tokens[cursor.at++]!;
    switch (t.kind) {
      case 'string':
        return t.length * POSITION_COST.literal;
      case 'set':
        return setCost(t.width);
      case 'name':
        if (tokens[cursor.at]?.kind === '(') return 0; // a builtin's name: its arguments follow as a group
        return this.of(t.name);
      case '(': {
        const cost = this.expression(tokens, cursor);
        if (tokens[cursor.at]?.kind === ')') cursor.at++;
        return cost;
      }
      default:
        return 0;
    }
  }
}

function lex(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (/\s/.test(c)) i++;
    else if (c === '#') {
      const eol = text.indexOf('\n', i);
      i = eol < 0 ? text.length : eol + 1;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      let length = 0;
      while (j < text.length && text[j] !== c) {
        j += text[j] === '\\' ? 2 : 1;
        length++;
      }
      tokens.push({ kind: 'string', length });
      i = j + 1;
    } else if (c === '[') {
      const set = readCharSet(text, i);
      tokens.push({ kind: 'set', width: set.width });
      i = set.end;
    } else if (text.startsWith('::=', i)) {
      tokens.push({ kind: '::=' });
      i += 3;
    } else if (c === '(' || c === ')' || c === '|' || c === ',') {
      tokens.push({ kind: c });
      i += c === '(' && text[i + 1] === '=' ? 2 : 1;
    } else if (c === '*' || c === '?') {
      tokens.push({ kind: 'repeat', positions: 1 });
      i++;
    } else if (c === '+') {
      tokens.push({ kind: 'repeat', positions: 2 });
      i++;
    } else if (c === '{') {
      const m = /^\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}/.exec(text.slice(i, i + 64));
      if (m) {
        const min = m[1] === '' ? 0 : Number(m[1]);
        const max = m[2] === '' ? min : m[3] === '' ? undefined : Number(m[3]);
        tokens.push({ kind: 'repeat', positions: repeatPositions(min, max) });
        i += m[0].length;
      } else {
        tokens.push({ kind: 'other' });
        i++;
      }
    } else {
      const m = /^[A-Za-z_][A-Za-z0-9_.\-]*/.exec(text.slice(i, i + 256));
      if (m) {
        tokens.push({ kind: 'name', name: m[0] });
        i += m[0].length;
      } else {
        tokens.push({ kind: 'other' });
        i++;
      }
    }
  }
  return tokens;
}
