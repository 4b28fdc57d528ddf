// A choice as an EBNF grammar: every string read back exactly by XGrammar, whatever it holds.
import { describe, expect, it } from 'vitest';
import { choiceGrammar, ebnfLiteral } from '../../src/grammar/choice.ts';
import { MAX_CHOICE_BYTES, MAX_CHOICES } from '../../src/grammar/limits.ts';
import { StructuredOutputError } from '../../src/grammar/types.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';

const TRICKY = ['plain', '', 'say "hi"', 'back\\slash', 'line\nbreak\r\n', 'tab\there', 'nul\u0000byte', 'del\u007f', 'café', '日本語', '👋🏽', '\\"', '#not a comment', 'a | b', '::=', '\u2028'];

describe('choiceGrammar', () => {
  it('escapes quotes, backslashes, controls and non-ASCII', () => {
    expect(ebnfLiteral('say "hi" \\ ok')).toBe('"say \\"hi\\" \\\\ ok"');
    expect(ebnfLiteral('a\nb')).toBe('"a\\u000ab"');
    expect(ebnfLiteral('é😀')).toBe('"\\u00e9\\U0001f600"');
    expect(choiceGrammar(['a', 'b'])).toBe('root ::= "a" | "b"');
  });

  it('gives XGrammar a grammar of exactly the choices', async () => {
    const xg = await loadXGrammar();
    const { value: grammar } = await xg.run((api) => api.Grammar.fromEBNF(choiceGrammar(TRICKY), 'root'));
    try {
      for (const choice of TRICKY) expect(await xg.api.Testings.isGrammarAcceptString(grammar, choice), JSON.stringify(choice)).toBe(true);
      for (const other of ['plai', 'plainx', 'say "hi', 'café ', '日本', '\\']) {
        expect(await xg.api.Testings.isGrammarAcceptString(grammar, other), JSON.stringify(other)).toBe(false);
      }
    } finally {
      grammar.dispose();
    }
  });

  it('refuses what it cannot take, saying why', () => {
    const refusal = (choices: unknown) => {
      try {
        choiceGrammar(choices as string[]);
      } catch (error) {
        expect(error).toBeInstanceOf(StructuredOutputError);
        return (error as Error).message;
      }
      return 'accepted';
    };
    expect(refusal([])).toBe('Invalid choice: give at least one string');
    expect(refusal(['a', 3])).toBe('Invalid choice: choice 1 is not a string');
    expect(refusal(['\ud800'])).toBe('Invalid choice: choice 0 is not well-formed Unicode (a lone surrogate)');
    expect(refusal(Array.from({ length: MAX_CHOICES + 1 }, (_, i) => `c${i}`))).toBe(`Invalid choice: ${MAX_CHOICES + 1} strings; at most ${MAX_CHOICES} are supported`);
    expect(refusal(['x'.repeat(MAX_CHOICE_BYTES), 'y'])).toMatch(/^Invalid choice: the strings take 65537 bytes; at most 65536/);
  });
});
