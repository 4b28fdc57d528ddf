// A regex as an EBNF expression that XGrammar matches exactly: a JSON schema's `pattern` as the
// content of a JSON string, a regex output as text. The regex is read by ecma-regex.ts (never by
// XGrammar's own regex reader, which misreads valid regexes and takes invalid ones); this writes its
// tree, the whole always one group, so nothing around it can join a branch or a repetition.
//
// As JSON string content each character is written as JSON writes it: `"` as `\"`, `\` as `\\`, a
// control character as its escape (`\n`, `\u0001`); sets made by a negation (`.`, `[^...]`, `\S`)
// give no control characters (a subset: a validator would take them, but no one means them).
//
// XGrammar 0.1.27 matches character classes wrongly beyond ASCII (measured): a range with a
// non-ASCII end matches ASCII characters instead (`[\u4e00-\u9fff]` takes `"` and `x`, not `中`), and
// a negated class takes every non-ASCII character whatever it lists (`[^é]` takes `é`); only a
// single non-ASCII character in a class is right. So a set is written as its ASCII part, and of its
// non-ASCII part: all of it as `[^\u0000-\u007f]`; a few characters one by one (ranges of up to
// MAX_LISTED, MAX_LISTED_TOTAL in all); none where the set is a negation that leaves out some (`.`
// leaves out U+2028 and U+2029, `[^é]` leaves out é: their ASCII part, a subset); otherwise the regex
// is refused.
// Browser code: nothing here may import Node modules.
import { ebnfLiteral } from './choice.ts';
import { ASCII, contains, equal, expand, intersect, size, subtract, SURROGATES, type CodeRanges } from './code-ranges.ts';
import { ECMA_PATTERN, parseRegex, REGEX_OUTPUT, RegexError, type CharSet, type RegexDialect, type RegexTerm } from './ecma-regex.ts';
import { StructuredOutputError } from './types.ts';

/** What the expression matches: the content of a JSON string (between its quotes), or text as it is. */
export type RegexContent = 'json-string' | 'text';

/** The longest non-ASCII range of a set written out character by character. */
export const MAX_LISTED = 64;
/** The most non-ASCII characters of one set written out. */
export const MAX_LISTED_TOTAL = 256;

/** One EBNF element without a repetition: a literal, a class or a rule name. */
const ATOM = /^(?:"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z0-9_]+)$/;
/** Characters JSON never writes as they are inside a string. */
const NEEDS_ESCAPE: CodeRanges = [
  [0x00, 0x1f],
  [0x22, 0x22],
  [0x5c, 0x5c],
];
const CONTROLS: CodeRanges = [[0x00, 0x1f]];
const NON_ASCII: CodeRanges = subtract([[0x80, 0x10ffff]], SURROGATES);
const SHORT_ESCAPES: Readonly<Record<number, string>> = { 0x08: '\\b', 0x09: '\\t', 0x0a: '\\n', 0x0c: '\\f', 0x0d: '\\r', 0x22: '\\"', 0x5c: '\\\\' };

/** A regex's grammar: the expression to use in place of it, and the rules that expression refers to. */
export interface RegexRules {
  expression: string;
  /** `name ::= body` lines, every name starting with the given prefix. */
  rules: string[];
}

/** The grammar of `regex` read in `dialect`, its rules named `${prefix}1`, `${prefix}2`, ...; throws RegexError. */
export function regexRules(regex: string, dialect: RegexDialect, content: RegexContent, prefix: string): RegexRules {
  const writer = new RegexWriter(content, prefix);
  const expression = writer.sequence([{ kind: 'group', body: parseRegex(regex, dialect) }]);
  return { expression, rules: writer.rules };
}

/** The rules for a JSON schema `pattern` (ECMA-262): rule `name` is the JSON string, quotes included; throws RegexError. */
export function jsonStringPattern(name: string, pattern: string): string {
  const { expression, rules } = regexRules(pattern, ECMA_PATTERN, 'json-string', `${name}_`);
  return [`${name} ::= "\\"" ${expression} "\\""`, ...rules].join('\n');
}

/** The grammar of a regex output's text (ECMA-262 and escaped punctuation), from rule `root`; throws RegexError. */
export function regexOutputGrammar(regex: string): string {
  const { expression, rules } = regexRules(regex, REGEX_OUTPUT, 'text', 'r_');
  return [`root ::= ${expression}`, ...rules].join('\n') + '\n';
}

/** A JSON schema pattern's RegexError as the request's error, naming its place; any other error as it is. */
export function schemaPatternError(error: unknown, path: string): unknown {
  if (!(error instanceof RegexError)) return error;
  return error.kind === 'invalid'
    ? new StructuredOutputError(`Invalid JSON schema: pattern is not a valid regular expression: ${error.message} (at ${path})`)
    : new StructuredOutputError(`Unsupported JSON schema: pattern: ${error.message} (at ${path})`);
}

/**
 * Writes the tree as rules XGrammar 0.1.27 matches exactly. Its grammar optimizer turns each rule
 * into a finite automaton and merges states wrongly (fixed upstream after 0.1.27, xgrammar #632
 * and #911; measured here): `"bbaa" | "aab" | "aaa"` takes `bbab`, `"\u1680" | "\u2000" | "\u202f"`
 * takes U+16AF, and `[a-z]* [a-z] "cd"` takes `cd`. Merges mix only byte edges of one rule, so:
 * every choice's branches are rules of their own, each ending in a reference to an empty rule (a
 * rule that refers to another is never inlined); and no rule body starts with a class repeated by
 * `*` (a loop back to the automaton's start).
 */
class RegexWriter {
  readonly rules: string[] = [];
  private readonly names = new Map<string, string>();
  private readonly empty: string;

  constructor(
    private readonly content: RegexContent,
    private readonly prefix: string,
  ) {
    this.empty = this.rule('""');
  }

  /** The terms in order, as a rule body's sequence; runs of single characters as one literal; "" for none. */
  sequence(terms: readonly RegexTerm[]): string {
    const elements: string[] = [];
    let run = '';
    const flush = () => {
      if (run !== '') elements.push(ebnfLiteral(run));
      run = '';
    };
    for (const term of terms) {
      if (term.kind === 'char') run += this.charText(term.point);
      else if (term.kind === 'group' && term.body.length === 1) {
        flush();
        const inner = this.sequence(term.body[0]!);
        if (inner !== '""') elements.push(inner);
      } else if (term.kind !== 'anchor') {
        flush();
        const element = this.element(term);
        if (element !== '""') elements.push(element);
      }
    }
    flush();
    if (elements.length === 0) return '""';
    // A class loop first would loop back to the rule's start: it goes in a rule of its own.
    if (/^\[.*\]\*$/.test(elements[0]!)) elements[0] = this.rule(`${elements[0]} ${this.empty}`);
    return elements.join(' ');
  }

  /** One EBNF element (a literal, a class or a rule reference) for the term. */
  private element(term: RegexTerm): string {
    switch (term.kind) {
      case 'char':
        return ebnfLiteral(this.charText(term.point));
      case 'set':
        return this.choice(this.setAlternatives(term.set));
      case 'group':
        return this.choice(term.body.map((terms) => this.sequence(terms)));
      case 'repeat':
        return this.repeat(term);
      case 'anchor':
        return '""';
    }
  }

  /** A rule of the alternatives (sequences), each a rule of its own; one alternative as it is when it is one unrepeated element. */
  private choice(alternatives: readonly string[]): string {
    if (alternatives.length === 1 && ATOM.test(alternatives[0]!)) return alternatives[0]!;
    const branches = alternatives.map((body) => (body === '""' ? this.empty : this.rule(`${body} ${this.empty}`)));
    return branches.length === 1 ? branches[0]! : this.rule(branches.join(' | '));
  }

  private repeat({ body, min, max }: Extract<RegexTerm, { kind: 'repeat' }>): string {
    if (body.kind === 'anchor' || max === 0) return '""'; // an anchor repeated (`(?:^)?`), or nothing
    const element = body.kind === 'group' && body.body.length === 1 ? this.choice([this.sequence(body.body[0]!)]) : this.element(body);
    if (element === '""') return '""';
    if (min === 1 && max === 1) return element;
    const quantifier =
      max === undefined ? (min === 0 ? '*' : min === 1 ? '+' : `{${min},}`) : min === 0 && max === 1 ? '?' : min === max ? `{${min}}` : `{${min},${max}}`;
    return `${element}${quantifier}`;
  }

  /** The name of a rule with `body` (one per distinct body). */
  private rule(body: string): string {
    let name = this.names.get(body);
    if (name === undefined) {
      name = `${this.prefix}${this.names.size + 1}`;
      this.names.set(body, name);
      this.rules.push(`${name} ::= ${body}`);
    }
    return name;
  }

  /** A character as the content writes it: JSON's escape where JSON needs one. */
  private charText(point: number): string {
    if (contains(SURROGATES, point)) throw new RegexError('unsupported', 'a lone surrogate (\\uD800-\\uDFFF) is no character that can be written');
    if (this.content === 'json-string' && contains(NEEDS_ESCAPE, point)) return jsonEscape(point);
    return String.fromCodePoint(point);
  }

  /** A set's alternatives (each one element): its ASCII part as XGrammar matches it right, its non-ASCII part as the top says. */
  private setAlternatives({ ranges, broad }: CharSet): string[] {
    const json = this.content === 'json-string';
    const alternatives: string[] = [];
    const ascii = intersect(ranges, ASCII);
    const plain = json ? subtract(ascii, NEEDS_ESCAPE) : ascii;
    if (plain.length > 0) alternatives.push(classText(plain));
    if (json) {
      // Control characters where the set names them; the quote and the backslash where it has them.
      for (const point of [...expand(broad ? [] : intersect(ascii, CONTROLS)), 0x22, 0x5c]) {
        if (point >= 0x20 && !contains(ascii, point)) continue;
        alternatives.push(ebnfLiteral(jsonEscape(point)));
      }
    }
    const beyond = intersect(ranges, NON_ASCII);
    if (equal(beyond, NON_ASCII)) alternatives.push('[^\\u0000-\\u007f]');
    else if (beyond.length > 0 && listable(beyond)) {
      for (const point of expand(beyond)) alternatives.push(ebnfLiteral(String.fromCodePoint(point)));
    } else if (beyond.length > 0 && !broad) {
      const [lo, hi] = beyond.find(([a, b]) => b - a >= MAX_LISTED) ?? beyond[0]!;
      throw new RegexError(
        'unsupported',
        `the character range ${ebnfLiteral(String.fromCodePoint(lo))}-${ebnfLiteral(String.fromCodePoint(hi))} beyond ASCII is longer than ${MAX_LISTED} characters ` +
          `or the class lists more than ${MAX_LISTED_TOTAL} (XGrammar matches such ranges wrongly; list the characters, or split the range)`,
      );
    }
    if (alternatives.length === 0) throw new RegexError('unsupported', 'a character class matches no character that can be written');
    return alternatives;
  }
}

/** Whether the non-ASCII ranges are few enough to write one character at a time. */
function listable(ranges: CodeRanges): boolean {
  return size(ranges) <= MAX_LISTED_TOTAL && ranges.every(([lo, hi]) => hi - lo < MAX_LISTED);
}

/** ASCII ranges as an XGrammar class: letters and digits as they are, every other character as \uXXXX. */
function classText(ranges: CodeRanges): string {
  const char = (point: number) => (/[0-9A-Za-z]/.test(String.fromCodePoint(point)) ? String.fromCodePoint(point) : `\\u${point.toString(16).padStart(4, '0')}`);
  return `[${ranges.map(([lo, hi]) => (lo === hi ? char(lo) : `${char(lo)}-${char(hi)}`)).join('')}]`;
}

/** JSON's escape for a character that needs one. */
function jsonEscape(point: number): string {
  return SHORT_ESCAPES[point] ?? `\\u${point.toString(16).padStart(4, '0')}`;
}
