// The compile-cost estimates of regexes and grammars (char-cost.ts, regex-cost.ts, ebnf-cost.ts):
// the calibration points measured on Qwen2.5's vocabulary, nesting, and the readers' leniency.
import { describe, expect, it } from 'vitest';
import { readCharSet, repeatPositions, setCost, POSITION_COST } from '../../src/grammar/char-cost.ts';
import { ebnfShape } from '../../src/grammar/ebnf-cost.ts';
import { regexShape } from '../../src/grammar/regex-cost.ts';

describe('character sets', () => {
  it('measure their width, negated ones as open', () => {
    expect(readCharSet('[a-z]', 0)).toEqual({ end: 5, width: 26 });
    expect(readCharSet('[A-Za-z0-9_]x', 0)).toEqual({ end: 12, width: 63 });
    expect(readCharSet('[\\d\\s]', 0).width).toBe(16);
    expect(readCharSet('[^"]', 0).width).toBe(Infinity);
    expect(readCharSet('[\\w-]', 0).width).toBe(64);
    expect(readCharSet('[\\u0041-\\u005A]', 0).width).toBe(26);
    expect(readCharSet('[\\p{L}]', 0).width).toBe(Infinity);
    expect(readCharSet('[abc', 0)).toEqual({ end: 4, width: 3 });
  });

  it('cost by width, from a literal to an open set', () => {
    expect([1, 10, 26, 63, 95, Infinity].map(setCost)).toEqual([
      POSITION_COST.literal,
      POSITION_COST.narrow,
      POSITION_COST.letters,
      POSITION_COST.words,
      POSITION_COST.ascii,
      POSITION_COST.wide,
    ]);
  });

  it('repeat to at most 256 positions, as XGrammar unzips them', () => {
    expect(repeatPositions(3, 3)).toBe(3);
    expect(repeatPositions(0, 100)).toBe(100);
    expect(repeatPositions(5, undefined)).toBe(6);
    expect(repeatPositions(0, 1_000_000)).toBe(256);
  });
});

describe('regexShape', () => {
  it('estimates what was measured: wide sets cost, literals and digits do not', () => {
    expect(regexShape('[^"]{0,100}').cost).toBe(5000); // 4.1-4.7 s measured
    expect(regexShape('.{0,100}').cost).toBe(5000);
    expect(regexShape('\\w{0,100}').cost).toBe(1000); // ~1 s
    expect(regexShape('[a-z]{0,100}').cost).toBe(500); // ~0.5 s
    expect(regexShape('\\d{4}-\\d{2}-\\d{2}').cost).toBeLessThan(5); // ~20 ms
    expect(regexShape('(ab|cd){0,1000}').cost).toBeLessThan(50); // ~20 ms
    expect(regexShape('a{0,10000}').cost).toBeLessThan(5);
  });

  it('multiplies nested repetitions and adds up alternatives', () => {
    expect(regexShape('([a-z]{2}){3}').cost).toBe(6 * POSITION_COST.letters);
    expect(regexShape('[^a]{2}|[^b]{3}').cost).toBe(5 * POSITION_COST.wide);
    expect(regexShape('x+').cost).toBe(2 * POSITION_COST.literal);
  });

  it('measures group nesting, whatever the group prefix', () => {
    expect(regexShape('((?:(?<n>a)))').depth).toBe(3);
    expect(regexShape('('.repeat(40) + 'a' + ')'.repeat(40)).depth).toBe(40);
    expect(regexShape('a)b(c').depth).toBe(1);
  });

  it('reads a brace that is no quantifier as a literal', () => {
    expect(regexShape('a{b}').cost).toBe(4 * POSITION_COST.literal);
    expect(regexShape('x{,}').cost).toBe(4 * POSITION_COST.literal);
  });
});

describe('ebnfShape', () => {
  it('costs a rule reference as the rule, and a reference back into a rule as nothing', () => {
    expect(ebnfShape('root ::= r{0,100}\nr ::= [^"]').cost).toBe(5000); // 4.4 s measured
    expect(ebnfShape('root ::= "a"{0,10000}').cost).toBeLessThan(5);
    const json = 'root ::= value\nvalue ::= object | "1"\nobject ::= "{" (value ("," value)*)? "}"';
    expect(ebnfShape(json).cost).toBeLessThan(1);
  });

  it('skips comments and strings, and measures group nesting', () => {
    expect(ebnfShape('root ::= "((((" # ((((\n  ("a" ("b"))').depth).toBe(2);
    expect(ebnfShape('root ::= "[^x]{0,100}"').cost).toBeLessThan(1);
  });

  it('estimates nothing for a grammar without root', () => {
    expect(ebnfShape('other ::= [^"]{0,100}').cost).toBe(0);
  });
});
