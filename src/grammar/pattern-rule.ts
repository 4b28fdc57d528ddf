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
import { ASCII, contains, equal, expand, intersect, size, subtract, SURROGATES, union, type CodeRanges } from './code-ranges.ts';
import { ECMA_PATTERN, parseRegex, REGEX_OUTPUT, RegexError, type CharSet, type RegexAlternation, type RegexDialect, type RegexTerm } from './ecma-regex.ts';
import { StructuredOutputError } from './types.ts';

/** What the expression matches: the content of a JSON string (between its quotes), or text as it is. */
export type RegexContent = 'json-string' | 'text';

/** The longest non-ASCII range of a set written out character by character. */
export const MAX_LISTED = 64;
/** The most non-ASCII characters of one set written out. */
export const MAX_LISTED_TOTAL = 256;

const ENCODER = new TextEncoder();
/** A class repeated by `*` at the start of a sequence. */
const CLASS_LOOP_FIRST = /^\[(?:[^\]\\]|\\.)*\]\*/;
/** ECMA-262's white space beyond ASCII (in `\s`). */
const SPACE_BEYOND_ASCII: CodeRanges = [[0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a], [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000], [0xfeff, 0xfeff]];
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
 * Writes the tree as rules XGrammar 0.1.27 matches exactly and fast. Its grammar optimizer turns
 * each rule into a finite automaton and merges states wrongly when two merge rules meet in one
 * round (fixed upstream after 0.1.27, xgrammar #632 and #911; measured here): `"bbaa" | "aab" |
 * "aaa"` takes `bbab`, `"\u1680" | "\u2000" | "\u202f"` takes U+16AF, `[a-z]* [a-z] "cd"` takes
 * `cd`. A wrong merge needs branches that share first bytes, byte strings of one set that end in the
 * same byte after different prefixes, or a class loop at a rule's start followed by the same class.
 * So: a set's multi-byte characters end in distinct bytes (else `\s` gives its ASCII spaces only, and
 * other sets their multi-byte characters each as a rule of its own); a choice whose branches share
 * first bytes, or begin with a class loop, has each branch as a rule of its own, ending in a
 * reference to an empty rule (a rule that refers to another is never inlined into its caller); and
 * runs of one class with a repetition are one repetition (`[a-z]*[a-z]` is `[a-z]+`). Rules of their
 * own cost little to compile but make masks slow where they repeat (~100 ms on a 152k vocabulary),
 * so wide sets stay inline.
 */
class RegexWriter {
  readonly rules: string[] = [];
  private readonly names = new Map<string, string>();
  private emptyRule?: string;

  constructor(
    private readonly content: RegexContent,
    private readonly prefix: string,
  ) {}

  /** The terms in order, as a sequence; runs of single characters as one literal; "" for none. */
  sequence(terms: readonly RegexTerm[]): string {
    const elements: string[] = [];
    let run = '';
    const flush = () => {
      if (run !== '') elements.push(ebnfLiteral(run));
      run = '';
    };
    for (const term of mergeRuns(terms)) {
      if (term.kind === 'char') run += this.charText(term.point);
      else if (term.kind === 'anchor') continue;
      else {
        flush();
        const element = term.kind === 'group' && term.body.length === 1 ? this.sequence(term.body[0]!) : this.element(term);
        if (element !== '""') elements.push(element);
      }
    }
    flush();
    return elements.length === 0 ? '""' : elements.join(' ');
  }

  /** One EBNF element (a literal, a class, a group or a rule reference) for the term. */
  private element(term: RegexTerm): string {
    switch (term.kind) {
      case 'char':
        return ebnfLiteral(this.charText(term.point));
      case 'set':
        return this.set(term.set);
      case 'group':
        return this.alternation(term.body);
      case 'repeat':
        return this.repeat(term);
      case 'anchor':
        return '""';
    }
  }

  /** Branches: one set when each is one character; a group when their first bytes differ; else rules of their own. */
  private alternation(branches: RegexAlternation): string {
    const single = branches.map((terms) => singleCharacter(terms));
    if (single.every((set) => set !== undefined)) {
      return this.set({ ranges: union(...single.map((set) => set!.ranges)), broad: single.some((set) => set!.broad) });
    }
    const sequences = branches.map((terms) => this.sequence(terms));
    const firsts = branches.map((terms) => this.firstBytes(terms));
    const seen = new Set<number>();
    const overlap = firsts.some((bytes) => {
      for (const byte of bytes) if (seen.has(byte)) return true;
      for (const byte of bytes) seen.add(byte);
      return false;
    });
    if (!overlap && !sequences.some((text) => CLASS_LOOP_FIRST.test(text))) return `( ${sequences.join(' | ')} )`;
    return this.rule(sequences.map((body) => this.ownRule(body)).join(' | '));
  }

  private repeat({ body, min, max }: Extract<RegexTerm, { kind: 'repeat' }>): string {
    if (body.kind === 'anchor' || max === 0) return '""'; // an anchor repeated (`(?:^)?`), or nothing
    let element = body.kind === 'group' && body.body.length === 1 ? this.sequence(body.body[0]!) : this.element(body);
    if (element === '""') return '""';
    if (!ATOM.test(element)) element = `( ${element} )`;
    if (min === 1 && max === 1) return element;
    const quantifier =
      max === undefined ? (min === 0 ? '*' : min === 1 ? '+' : `{${min},}`) : min === 0 && max === 1 ? '?' : min === max ? `{${min}}` : `{${min},${max}}`;
    return `${element}${quantifier}`;
  }

  /** A set as one element: its ASCII part as a class, JSON's escapes, its non-ASCII part as the top says. */
  private set(set: CharSet): string {
    const json = this.content === 'json-string';
    const ascii = intersect(set.ranges, ASCII);
    const plain = json ? subtract(ascii, NEEDS_ESCAPE) : ascii;
    // Control characters where the set names them; the quote and the backslash where it has them.
    const escapes = json ? [...expand(set.broad ? [] : intersect(ascii, CONTROLS)), 0x22, 0x5c].filter((p) => (p < 0x20 ? true : contains(ascii, p))) : [];
    const beyond = intersect(set.ranges, NON_ASCII);
    let listed: number[] = [];
    let all = false;
    if (equal(beyond, NON_ASCII)) all = true;
    else if (beyond.length > 0 && listable(beyond)) listed = expand(beyond);
    else if (beyond.length > 0 && !set.broad) {
      const [lo, hi] = beyond.find(([a, b]) => b - a >= MAX_LISTED) ?? beyond[0]!;
      throw new RegexError(
        'unsupported',
        `the character range ${ebnfLiteral(String.fromCodePoint(lo))}-${ebnfLiteral(String.fromCodePoint(hi))} beyond ASCII is longer than ${MAX_LISTED} characters ` +
          `or the class lists more than ${MAX_LISTED_TOTAL} (XGrammar matches such ranges wrongly; list the characters, or split the range)`,
      );
    }
    const strings = () => [...escapes, ...listed].map((point) => this.charText(point));
    // Multi-byte characters that end in one byte after different prefixes: see the class comment.
    if (!distinctLastBytes(strings()) && (plain.length > 0 || escapes.length > 0)) listed = listed.filter((point) => !contains(SPACE_BEYOND_ASCII, point));
    const own = !distinctLastBytes(strings());
    const alternatives: string[] = [];
    if (plain.length > 0) alternatives.push(classText(plain));
    for (const text of strings()) alternatives.push(own && utf8(text).length > 1 ? this.ownRule(ebnfLiteral(text)) : ebnfLiteral(text));
    if (all) alternatives.push('[^\\u0000-\\u007f]');
    if (alternatives.length === 0) throw new RegexError('unsupported', 'a character class matches no character that can be written');
    return alternatives.length === 1 ? alternatives[0]! : `( ${alternatives.join(' | ')} )`;
  }

  /** The bytes a match of the terms can begin with (of a set: every member's). */
  private firstBytes(terms: readonly RegexTerm[]): Set<number> {
    const bytes = new Set<number>();
    for (const term of terms) {
      this.addFirstBytes(term, bytes);
      if (!nullable(term)) break;
    }
    return bytes;
  }

  private addFirstBytes(term: RegexTerm, bytes: Set<number>): void {
    if (term.kind === 'char') bytes.add(utf8(this.charText(term.point))[0]!);
    else if (term.kind === 'set') {
      const json = this.content === 'json-string';
      for (const [lo, hi] of intersect(term.set.ranges, json ? subtract(ASCII, NEEDS_ESCAPE) : ASCII)) for (let b = lo; b <= hi; b++) bytes.add(b);
      if (json && intersect(term.set.ranges, NEEDS_ESCAPE).length > 0) bytes.add(0x5c); // an escape
      for (const [lo, hi] of subtract(intersect(term.set.ranges, NON_ASCII), SURROGATES)) {
        for (let b = utf8(String.fromCodePoint(lo))[0]!; b <= utf8(String.fromCodePoint(hi))[0]!; b++) bytes.add(b);
      }
    } else if (term.kind === 'group') {
      for (const terms of term.body) for (const byte of this.firstBytes(terms)) bytes.add(byte);
    } else if (term.kind === 'repeat') this.addFirstBytes(term.body, bytes);
  }

  /** A rule of its own for `body` (a sequence, or "" for none), ending in a reference to the empty rule, so it is never inlined. */
  private ownRule(body: string): string {
    this.emptyRule ??= this.rule('""');
    return body === '""' ? this.emptyRule : this.rule(`${body} ${this.emptyRule}`);
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
}

/** Whether the term can match the empty string. */
function nullable(term: RegexTerm): boolean {
  switch (term.kind) {
    case 'anchor':
      return true;
    case 'char':
    case 'set':
      return false;
    case 'group':
      return term.body.some((terms) => terms.every(nullable));
    case 'repeat':
      return term.min === 0 || nullable(term.body);
  }
}

/** The one character (as a set) a branch matches, when it is one character and anchors. */
function singleCharacter(terms: readonly RegexTerm[]): CharSet | undefined {
  const matching = terms.filter((t) => t.kind !== 'anchor');
  if (matching.length !== 1) return undefined;
  const term = matching[0]!;
  if (term.kind === 'char') return { ranges: [[term.point, term.point]], broad: false };
  return term.kind === 'set' ? term.set : undefined;
}

/** The character set and counts of a term that is one character repeated (a character, a set, or a repetition of one). */
function run(term: RegexTerm): { set: CharSet; min: number; max: number | undefined } | undefined {
  if (term.kind === 'char') return { set: { ranges: [[term.point, term.point]], broad: false }, min: 1, max: 1 };
  if (term.kind === 'set') return { set: term.set, min: 1, max: 1 };
  if (term.kind === 'repeat' && (term.body.kind === 'char' || term.body.kind === 'set')) {
    const inner = run(term.body)!;
    return { set: inner.set, min: term.min, max: term.max };
  }
  return undefined;
}

/**
 * Adjacent terms that repeat one set, one of them a repetition, as one repetition: `[a-z]*[a-z]`
 * as `[a-z]+`, so no class loop is followed by the same class (see RegexWriter).
 */
function mergeRuns(terms: readonly RegexTerm[]): RegexTerm[] {
  const out: RegexTerm[] = [];
  for (const term of terms) {
    const previous = out[out.length - 1];
    const a = previous && run(previous);
    const b = run(term);
    if (a && b && (previous!.kind === 'repeat' || term.kind === 'repeat') && equal(a.set.ranges, b.set.ranges) && a.set.broad === b.set.broad) {
      const max = a.max === undefined || b.max === undefined ? undefined : a.max + b.max;
      const body: RegexTerm = a.set.ranges.length === 1 && a.set.ranges[0]![0] === a.set.ranges[0]![1] && !a.set.broad ? { kind: 'char', point: a.set.ranges[0]![0] } : { kind: 'set', set: a.set };
      out[out.length - 1] = { kind: 'repeat', body, min: a.min + b.min, max };
    } else out.push(term);
  }
  return out;
}

/** Whether the strings' UTF-8 forms of two or more bytes end in distinct bytes. */
function distinctLastBytes(texts: readonly string[]): boolean {
  const last = new Set<number>();
  for (const text of texts) {
    const bytes = utf8(text);
    if (bytes.length < 2) continue;
    const byte = bytes[bytes.length - 1]!;
    if (last.has(byte)) return false;
    last.add(byte);
  }
  return true;
}

function utf8(text: string): Uint8Array {
  return ENCODER.encode(text);
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
