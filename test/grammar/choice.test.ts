// A choice as an EBNF grammar: every string read back exactly by XGrammar, whatever it holds.
import { describe, expect, it } from 'vitest';
import { choiceGrammar, ebnfLiteral } from '../../src/grammar/choice.ts';
import { MAX_CHOICE_BYTES, MAX_CHOICES } from '../../src/grammar/limits.ts';
import { StructuredOutputError } from '../../src/grammar/types.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import { mulberry32 } from '../helpers/prng.ts';

const TRICKY = ['plain', '', 'say "hi"', 'back\\slash', 'line\nbreak\r\n', 'tab\there', 'nul\u0000byte', 'del\u007f', 'café', '日本語', '👋🏽', '\\"', '#not a comment', 'a | b', '::=', '\u2028'];

describe('choiceGrammar', () => {
  it('escapes quotes, backslashes, controls and non-ASCII', () => {
    expect(ebnfLiteral('say "hi" \\ ok')).toBe('"say \\"hi\\" \\\\ ok"');
    expect(ebnfLiteral('a\nb')).toBe('"a\\u000ab"');
    expect(ebnfLiteral('é😀')).toBe('"\\u00e9\\U0001f600"');
    expect(choiceGrammar(['bbaa', 'aab', 'aaa', 'a', 'a'])).toBe(
      'root ::= "bbaa" choice_end | "a" choice_1\nchoice_1 ::= "" | "a" choice_2\nchoice_2 ::= "b" choice_end | "a" choice_end\nchoice_end ::= ""',
    );
    expect(choiceGrammar(['only'])).toBe('root ::= "only"');
  });

  it('takes no string XGrammar 0.1.27’s automaton merging adds to a plain choice of literals', async () => {
    const xg = await loadXGrammar();
    for (const [choices, wrong] of [[['bbaa', 'aab', 'aaa'], 'bbab'], [['\u1680', '\u2000', '\u202f'], '\u16af']] as const) {
      for (const [text, plain] of [[`root ::= ${choices.map(ebnfLiteral).join(' | ')}`, true], [choiceGrammar(choices), false]] as const) {
        const { value: grammar } = await xg.run((api) => api.Grammar.fromEBNF(text, 'root'));
        const accepted = await xg.api.Testings.isGrammarAcceptString(grammar, wrong);
        grammar.dispose();
        expect(accepted, text).toBe(plain); // the plain choice takes it; ours does not
      }
    }
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

  it('is exact on every string up to 4 characters for seeded random lists that share prefixes and UTF-8 lead bytes', async () => {
    const xg = await loadXGrammar();
    const alphabet = ['a', 'b', 'c', 'é', 'ũ'];
    const all = [''];
    for (let n = 1, layer = ['']; n <= 4; n++) all.push(...(layer = layer.flatMap((t) => alphabet.map((c) => t + c))));
    const random = mulberry32(13);
    let plainWrong = 0;
    // Lists a plain choice takes a wrong string for (found by a seeded search), then random ones.
    const lists = [['bbaa', 'aab', 'aaa'], ['c', 'abba', 'bca', 'bba', 'bbbb', 'b'], ['aa', 'bca', 'ac', 'cca', 'ccb'], ['acc', 'abb', 'bca', 'bb', 'bcb', 'bc']];
    for (let list = 0; list < 30; list++) {
      lists.push(Array.from({ length: 2 + Math.floor(random() * 5) }, () => Array.from({ length: 1 + Math.floor(random() * 4) }, () => alphabet[Math.floor(random() * alphabet.length)]).join('')));
    }
    for (const choices of lists) {
      const { value: ours } = await xg.run((api) => api.Grammar.fromEBNF(choiceGrammar(choices), 'root'));
      const { value: plain } = await xg.run((api) => api.Grammar.fromEBNF(`root ::= ${choices.map(ebnfLiteral).join(' | ')}`, 'root'));
      try {
        for (const text of all) {
          expect(await xg.api.Testings.isGrammarAcceptString(ours, text), `${JSON.stringify(choices)}: ${JSON.stringify(text)}`).toBe(choices.includes(text));
          if ((await xg.api.Testings.isGrammarAcceptString(plain, text)) !== choices.includes(text)) plainWrong++;
        }
      } finally {
        ours.dispose();
        plain.dispose();
      }
    }
    expect(plainWrong).toBeGreaterThan(0); // the lists do meet XGrammar's wrong merges
  }, 60_000);

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
