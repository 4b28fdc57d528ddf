// A choice among strings as an EBNF grammar, each string a literal that XGrammar's EBNF reader
// (cpp/grammar_parser.cc) reads back exactly: printable ASCII as itself but for `"` and `\`, which
// take a backslash, and every other character (controls, newlines, non-ASCII) as \uXXXX or
// \UXXXXXXXX of its code point. The strings are a trie of rules (trieRule): XGrammar 0.1.27 merges
// the automaton of a plain `"bbaa" | "aab" | "aaa"` wrongly and takes `bbab` (pattern-rule.ts).
import { hasLoneSurrogate, MAX_CHOICE_BYTES, MAX_CHOICES, utf8Length } from './limits.ts';
import { StructuredOutputError } from './types.ts';

/** The grammar of exactly one of `choices`; throws StructuredOutputError for a list it cannot take. */
export function choiceGrammar(choices: readonly string[]): string {
  if (!Array.isArray(choices) || choices.length === 0) throw new StructuredOutputError('Invalid choice: give at least one string');
  if (choices.length > MAX_CHOICES) throw new StructuredOutputError(`Invalid choice: ${choices.length} strings; at most ${MAX_CHOICES} are supported`);
  let bytes = 0;
  for (const [i, choice] of choices.entries()) {
    if (typeof choice !== 'string') throw new StructuredOutputError(`Invalid choice: choice ${i} is not a string`);
    if (hasLoneSurrogate(choice)) throw new StructuredOutputError(`Invalid choice: choice ${i} is not well-formed Unicode (a lone surrogate)`);
    bytes += utf8Length(choice);
  }
  if (bytes > MAX_CHOICE_BYTES) throw new StructuredOutputError(`Invalid choice: the strings take ${bytes} bytes; at most ${MAX_CHOICE_BYTES} are supported`);
  return trieRules('root', 'choice_', choices);
}

/**
 * Rules for exactly one of `strings`: rule `name`, its helpers named `${prefix}1`, ... and
 * `${prefix}end`. One string is a literal; more, a trie (trieRule).
 */
export function trieRules(name: string, prefix: string, strings: readonly string[]): string {
  const distinct = [...new Set(strings)];
  if (distinct.length === 1) return `${name} ::= ${ebnfLiteral(distinct[0]!)}`;
  const rules: string[] = [];
  trieRule(distinct, { name, prefix, rules });
  return [...rules, `${prefix}end ::= ""`].join('\n');
}

interface Trie {
  /** The first rule's name. */
  name: string;
  /** The helpers' names: `${prefix}1`, ...; `${prefix}end` the empty rule. */
  prefix: string;
  rules: string[];
}

/**
 * A rule for `strings` (distinct) as a trie: one branch per first character, its literal the
 * longest prefix the branch's strings share, then the rule of their rests (the empty rule where
 * only the empty string is left); the empty string as `""`. Branches begin with distinct
 * characters and end in a rule reference, never in a byte, so XGrammar cannot merge one branch's
 * last state with another's sibling (pattern-rule.ts). Adds the rules; returns the name.
 */
function trieRule(strings: readonly string[], trie: Trie): string {
  const { rules } = trie;
  const name = rules.length === 0 ? trie.name : `${trie.prefix}${rules.length}`;
  rules.push(''); // its place, filled below
  const index = rules.length - 1;
  const branches = new Map<string, string[]>();
  let empty = false;
  for (const text of strings) {
    if (text === '') {
      empty = true;
      continue;
    }
    const first = String.fromCodePoint(text.codePointAt(0)!);
    const rests = branches.get(first) ?? [];
    rests.push(text.slice(first.length));
    branches.set(first, rests);
  }
  const alternatives = empty ? ['""'] : [];
  for (const [first, rests] of branches) {
    let prefix = first;
    let tails = rests;
    for (;;) {
      const next = tails[0] === '' || tails[0] === undefined ? undefined : String.fromCodePoint(tails[0].codePointAt(0)!);
      if (next === undefined || !tails.every((tail) => tail.startsWith(next))) break;
      prefix += next;
      tails = tails.map((tail) => tail.slice(next.length));
    }
    alternatives.push(`${ebnfLiteral(prefix)} ${tails.length === 1 && tails[0] === '' ? `${trie.prefix}end` : trieRule(tails, trie)}`);
  }
  rules[index] = `${name} ::= ${alternatives.join(' | ')}`;
  return name;
}

/** `text` as an EBNF string literal. */
export function ebnfLiteral(text: string): string {
  let literal = '"';
  for (const char of text) {
    const code = char.codePointAt(0)!;
    if (char === '"' || char === '\\') literal += `\\${char}`;
    else if (code >= 0x20 && code < 0x7f) literal += char;
    else if (code <= 0xffff) literal += `\\u${code.toString(16).padStart(4, '0')}`;
    else literal += `\\U${code.toString(16).padStart(8, '0')}`;
  }
  return `${literal}"`;
}
