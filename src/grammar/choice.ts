// A choice among strings as an EBNF grammar: `root ::= "a" | "b"`, each string a literal that
// XGrammar's EBNF reader (cpp/grammar_parser.cc) reads back exactly: printable ASCII as itself but
// for `"` and `\`, which take a backslash, and every other character (controls, newlines, non-ASCII)
// as \uXXXX or \UXXXXXXXX of its code point.
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
  return `root ::= ${choices.map(ebnfLiteral).join(' | ')}`;
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
