// Regexes as grammars of ours (ecma-regex.ts reads them as ECMA-262 with the u flag, pattern-rule.ts
// writes them): a JSON schema `pattern` as JSON string content, whose `"`, `\` and control
// characters are JSON escapes, and a regex output as text. XGrammar's own regex reader misreads
// valid regexes and takes invalid ones (`*` became a repetition of the string's opening quote);
// here every regex is refused up front or matched exactly, checked by seeded random patterns and
// random walks against ajv (schemas) and JavaScript's RegExp (regex outputs).
import Ajv2020 from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { ecmaSource, REGEX_OUTPUT } from '../../src/grammar/ecma-regex.ts';
import { jsonStringPattern, regexOutputGrammar } from '../../src/grammar/pattern-rule.ts';
import { checkJsonSchema } from '../../src/grammar/schema-check.ts';
import { schemaGrammar, spliceSchema } from '../../src/grammar/schema-splice.ts';
import { compileStructuredOutput, StructuredOutputError, type StructuredOutput } from '../../src/grammar/structured-output.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import { grammarAcceptsAll } from '../helpers/grammar-accepts.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { expectSchemaWalksValid, randomWalks } from '../helpers/random-walk.ts';

const accepts = grammarAcceptsAll;
const compact = { kind: 'compact' } as const;
const schemaOutput = (schema: Record<string, unknown>): StructuredOutput => ({ type: 'json_schema', schema, whitespace: compact });

/** XGrammar's own grammar for a string with `pattern`. */
async function xgrammarPatternGrammar(pattern: string): Promise<string> {
  const xg = await loadXGrammar();
  const { value } = await xg.run((api) => api.Testings._jsonSchemaToEBNF(JSON.stringify({ type: 'string', pattern }), false, -1, undefined, true));
  return value;
}

/** Our grammar for a string with `pattern`. */
async function ourPatternGrammar(pattern: string): Promise<string> {
  const xg = await loadXGrammar();
  const { value } = await xg.run((api) => schemaGrammar(api, spliceSchema({ type: 'string', pattern }), { anyWhitespace: false }));
  return value;
}

/** The refusal's message of checking a schema, or 'accepted'. */
function refusal(schema: unknown): string {
  try {
    checkJsonSchema(schema, compact);
    return 'accepted';
  } catch (error) {
    expect(error).toBeInstanceOf(StructuredOutputError);
    return (error as Error).message;
  }
}

/** Pieces random patterns are made of: valid and invalid syntax, metacharacters, escapes, odd characters. */
const PIECES = [
  'a', 'b', 'é', '"', '\\\\', '\\"', '.', '*', '+', '?', '*?', '|', '(', ')', '(?:', '(?<n>', '(?=', '(?!', '[', ']', '[^', '-', '^', '$',
  '{', '}', '{2}', '{0}', '{1,3}', '{2,}', '{3,1}', '\\d', '\\D', '\\w', '\\W', '\\s', '\\S', '\\b', '\\B', '\\1', '\\-', '\\.', '\\n',
  '\\t', '\\u0041', '\\u{1F600}', '\\x7f', '\\0', '\\cJ', ' ', '😀', '\\p{L}', '\\e', ',', '\\/', '\\#', '[a-c]', '[^"]', '\u0000',
];

function randomPatterns(seed: number, count: number): string[] {
  const random = mulberry32(seed);
  const patterns = new Set<string>();
  while (patterns.size < count) {
    const length = 1 + Math.floor(random() * 7);
    patterns.add(Array.from({ length }, () => PIECES[Math.floor(random() * PIECES.length)]!).join(''));
  }
  return [...patterns];
}

function validEcma(pattern: string): boolean {
  try {
    new RegExp(pattern, 'u');
    return true;
  } catch {
    return false;
  }
}

/** Every string of `alphabet` up to `length` characters. */
function strings(alphabet: readonly string[], length: number): string[] {
  const all = [''];
  for (let n = 1, layer = ['']; n <= length; n++) {
    layer = layer.flatMap((s) => alphabet.map((c) => s + c));
    all.push(...layer);
  }
  return all;
}

/** Random regexes over a, b, c and the JSON-sensitive `"` and `\`: groups, classes, alternations and every quantifier. */
function randomSmallRegexes(seed: number, count: number): string[] {
  const random = mulberry32(seed);
  const atoms = ['a', 'b', 'c', '"', '\\\\', '[ab]', '[a-c]', '.', '[^a]', '(ab|a)', '(a|bb|abc)', '(?:)', '(b|)', '[^"]'];
  const quantifiers = ['', '', '', '*', '+', '?', '{2}', '{0,2}', '{1,}'];
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)]!;
  const regex = (depth: number): string => {
    const parts = Array.from({ length: 1 + Math.floor(random() * 4) }, () => (depth < 2 && random() < 0.25 ? `(${regex(depth + 1)})` : pick(atoms)) + pick(quantifiers));
    return parts.join('') + (random() < 0.4 ? `|${regex(depth + 1)}` : '');
  };
  return Array.from({ length: count }, () => regex(0));
}

describe('jsonStringPattern', () => {
  const jsonAccepts = async (pattern: string, values: string[]) => accepts(jsonStringPattern('root', pattern), values.map((v) => JSON.stringify(v)));

  it('writes quotes, backslashes and control characters as JSON escapes', async () => {
    expect(await jsonAccepts('a"\\\\\\t', ['a"\\\t', 'a"\\t'])).toEqual([true, false]);
    expect(await accepts(jsonStringPattern('root', 'a"'), ['"a\\""', '"a""'])).toEqual([true, false]);
    expect(await accepts(jsonStringPattern('root', '\\n'), ['"\\n"', '"\n"', '"\\u000a"'])).toEqual([true, false, false]);
  });

  it('takes \\s, \\S and `.` as ECMA-262 does, beyond ASCII as XGrammar matches right (or a subset)', async () => {
    // `\s`: the ASCII spaces (control characters as escapes). Its Unicode spaces end in one byte after
    // different prefixes, which XGrammar merges wrongly beside the rest: left out (a subset).
    const ascii = [' ', '\t', '\n', '\u000b', '\f', '\r'];
    expect(await jsonAccepts('^\\s$', [...ascii, '\u00a0', '\u2000', '\u16af', 'x'])).toEqual([...ascii.map(() => true), false, false, false, false]);
    // Such characters alone are each a rule of their own: exact.
    expect(await jsonAccepts('^[\\u1680\\u2000\\u202f]$', ['\u1680', '\u2000', '\u202f', '\u16af', '\u2080', '\u20af'])).toEqual([true, true, true, false, false, false]);
    // `\S`, `[^"]` and `.`: no control characters; `[` (XGrammar's own \S leaves it out); non-ASCII where the set takes all of it.
    expect(await jsonAccepts('^\\S$', ['[', '"', '\\', ' ', '\u0001', 'é'])).toEqual([true, true, true, false, false, false]);
    expect(await jsonAccepts('^[^"]$', ['[', '"', '\\', '\u0001', 'é', '\u4e2d'])).toEqual([true, false, true, false, true, true]);
    expect(await jsonAccepts('^.$', ['x', '"', '\n', 'é'])).toEqual([true, true, false, false]);
    // Non-ASCII listed one by one; a surrogate pair escape is one character; an escaped caret, bracket or dash in a class is that character.
    expect(await jsonAccepts('^[a\\u00e0-\\u00e2\\u4e2d]$', ['a', 'à', 'â', 'ã', '中', '丮'])).toEqual([true, true, true, false, true, false]);
    expect(await jsonAccepts('^\\ud83d\\ude00$', ['😀', '\ud83d'])).toEqual([true, false]);
    expect(await jsonAccepts('^[\\^][\\]][a\\-z]$', ['^]-', '^]a', 'x]-', '^]b'])).toEqual([true, true, false, false]);
  });

  it('refuses what it cannot write exactly, saying what', () => {
    const problem = (pattern: string) => {
      try {
        jsonStringPattern('p', pattern);
        return 'written';
      } catch (error) {
        return `${(error as { kind?: string }).kind}: ${(error as Error).message}`;
      }
    };
    expect(problem('*')).toBe('invalid: Nothing to repeat');
    expect(problem('\\-')).toBe('invalid: Invalid escape'); // ECMA-262's u flag, as ajv compiles it
    expect(problem('a(?=b)')).toMatch(/^unsupported: lookarounds/);
    expect(problem('(?<!a)b')).toMatch(/^unsupported: lookarounds/);
    expect(problem('(a)\\1')).toBe('unsupported: backreferences are not supported');
    expect(problem('\\bword')).toMatch(/^unsupported: word boundaries/);
    expect(problem('\\p{L}+')).toMatch(/^unsupported: Unicode property escapes/);
    expect(problem('a$b')).toBe('unsupported: "$" is supported only where nothing can come after it');
    expect(problem('a^b')).toBe('unsupported: "^" is supported only where nothing can come before it');
    expect(problem('(^a)+')).toBe('unsupported: "^" is supported only where nothing can come before it');
    expect(problem('(^a|b$)')).toBe('written');
    expect(problem('^(?:^a)?b$$')).toBe('written');
    expect(problem('a{10001}')).toBe('unsupported: repetition counts over 10000 are not supported');
    expect(problem('[]')).toBe('unsupported: a character class matches no character that can be written');
    expect(problem('\\ud800')).toMatch(/^unsupported: a lone surrogate/);
    expect(problem('[\\u4e00-\\u9fff]')).toMatch(/^unsupported: the character range "\\u4e00"-"\\u9fff" beyond ASCII is longer than 64 characters/);
  });

  it('is exact on every string up to 4 characters, as JSON string content and as text (seeded random regexes)', async () => {
    const texts = strings(['a', 'b', 'c', '"', '\\'], 4);
    for (const regex of randomSmallRegexes(31, 20)) {
      const whole = new RegExp(`^(?:${regex})$`, 'u');
      const want = texts.map((t) => whole.test(t));
      expect(await accepts(jsonStringPattern('root', regex), texts.map((t) => JSON.stringify(t))), regex).toEqual(want);
      expect(await accepts(regexOutputGrammar(regex), texts), regex).toEqual(want);
    }
  }, 240_000);

  it('XGrammar 0.1.27’s automaton merging takes strings a plain choice of literals does not have; rules of ours do not', async () => {
    expect(await accepts('root ::= "bbaa" | "aab" | "aaa"', ['bbab', 'bbaa'])).toEqual([true, true]);
    expect(await accepts('root ::= "\\u1680" | "\\u2000" | "\\u202f"', ['\u16af'])).toEqual([true]);
    expect(await accepts('root ::= [a-z]* [a-z] "c" "d"', ['cd', 'xcd'])).toEqual([true, true]);
    expect(await accepts(regexOutputGrammar('bbaa|aab|aaa'), ['bbab', 'bbaa'])).toEqual([false, true]);
    expect(await accepts(regexOutputGrammar('[\\u1680\\u2000\\u202f]'), ['\u16af', '\u2000'])).toEqual([false, true]);
    expect(await accepts(regexOutputGrammar('[a-z]*[a-z]cd'), ['cd', 'xcd'])).toEqual([false, true]);
  });
});

describe('what XGrammar’s regex reader gets wrong', () => {
  it('takes "*" as a repetition of the opening quote, leaves "a|b" ungrouped, reads [\\^] as any character, leaves "[" out of \\S; ours refuses or matches exactly', async () => {
    expect(await accepts(await xgrammarPatternGrammar('*'), ['""""', '""'])).toEqual([true, true]);
    expect(await accepts(await xgrammarPatternGrammar('a|b'), ['"a', 'b"', '"a"'])).toEqual([true, true, false]);
    expect(await accepts(await xgrammarPatternGrammar('[\\^]'), ['"x"', '"^"'])).toEqual([true, true]);
    expect(await accepts(await xgrammarPatternGrammar('\\S'), ['"["', '"x"'])).toEqual([false, true]);
    expect(refusal({ type: 'string', pattern: '*' })).toMatch(/^Invalid JSON schema: pattern is not a valid regular expression/);
    expect(await accepts(await ourPatternGrammar('a|b'), ['"a', 'b"', '"a"', '"b"'])).toEqual([false, false, true, true]);
    expect(await accepts(await ourPatternGrammar('[\\^]'), ['"x"', '"^"'])).toEqual([false, true]);
    expect(await accepts(await ourPatternGrammar('\\S'), ['"["', '"x"', '" "'])).toEqual([true, true, false]);
  });
});

describe('patterns in schemas', () => {
  const stories = grammarTokenizer('stories260K');
  const message = (schema: Record<string, unknown>) =>
    compileStructuredOutput(stories.tokenizer, stories.vocabSize, schemaOutput(schema)).then(
      () => 'compiled',
      (error: unknown) => {
        expect(error).toBeInstanceOf(StructuredOutputError);
        return (error as Error).message;
      },
    );

  it('refuses "*", "+" and "?" (no regular expressions) naming the place, as it refuses them in a regex output', async () => {
    for (const pattern of ['*', '+', '?']) {
      expect(await message({ type: 'string', pattern })).toBe('Invalid JSON schema: pattern is not a valid regular expression: Nothing to repeat (at #/pattern)');
      expect(await message({ type: 'object', properties: { a: { type: 'string', pattern } }, required: ['a'] })).toBe(
        'Invalid JSON schema: pattern is not a valid regular expression: Nothing to repeat (at #/properties/a/pattern)',
      );
      const regex = await compileStructuredOutput(stories.tokenizer, stories.vocabSize, { type: 'regex', pattern }).catch((e: unknown) => e);
      expect((regex as Error).message).toBe('Invalid regex: Nothing to repeat');
    }
  });

  it('refuses an invalid regex wherever a schema carries one, before saying the keyword is unsupported', () => {
    expect(refusal({ type: 'object', patternProperties: { '(': { type: 'string' } } })).toBe(
      'Invalid JSON schema: pattern is not a valid regular expression: Unterminated group (at #/patternProperties/()',
    );
    expect(refusal({ type: 'object', propertyNames: { pattern: '[a-' } })).toMatch(/^Invalid JSON schema: pattern is not a valid regular expression: .* \(at #\/propertyNames\/pattern\)$/);
    expect(refusal({ type: 'object', patternProperties: { '^x': { type: 'string' } } })).toMatch(/^Unsupported JSON schema: "patternProperties" is not supported/);
    expect(refusal({ $defs: { s: { type: 'string', pattern: 'a{2,1}' } }, $ref: '#/$defs/s' })).toMatch(/^Invalid JSON schema: pattern .* \(at #\/\$defs\/s\/pattern\)$/);
  });

  it('XGrammar’s grammar writes a raw quote, backslash or newline; ours writes escapes and keeps JavaScript’s `.`', async () => {
    const texts = ['"a"b"', '"a\\b"', '"a\nb"', '"a\\"b"', '"a\\\\b"', '"a\\nb"', '"axb"'];
    expect(await accepts(await xgrammarPatternGrammar('^a.b$'), texts)).toEqual([true, true, true, false, false, false, true]);
    expect(await accepts(await ourPatternGrammar('^a.b$'), texts)).toEqual([false, false, false, true, true, false, true]);
  });

  it('XGrammar’s classes beyond ASCII take the wrong characters; ours take the right ones or are refused', async () => {
    const both = async (pattern: string, texts: string[]) => [await accepts(await xgrammarPatternGrammar(pattern), texts), await accepts(await ourPatternGrammar(pattern), texts)];
    expect(await both('^[à-ä]$', ['"à"', '"ä"', '"x"'])).toEqual([[false, false, false], [true, true, false]]);
    expect(await both('^[^é]$', ['"é"', '"ü"', '"x"'])).toEqual([[true, true, true], [false, false, true]]);
    // A longer range beyond ASCII: XGrammar takes a raw quote for it; ours is refused.
    expect(await accepts(await xgrammarPatternGrammar('^[Ā-ſ]$'), ['"""', '"ā"'])).toEqual([true, false]);
    expect(refusal({ type: 'string', pattern: '^[Ā-ſ]$' })).toMatch(/^Unsupported JSON schema: pattern: the character range "\\u0100"-"\\u017f" beyond ASCII .* \(at #\/pattern\)$/);
  });

  it('random walks give JSON strings that match the pattern', async () => {
    const ajv = new Ajv2020({ strict: false });
    const random = mulberry32(5);
    const patterns = ['^a.b$', '^[^x]{1,6}$', '^\\s?\\S+$', '^"[^"\\\\]*"$', '^\\\\[a-z]+$', '^[ -~]{2,5}$', '^(\\W|\\d)+$', '^é[\\t\\n]?\\.$', '^[^@]{1,4}@[a-z]{1,3}\\.[a-z]{2}$', '^[^é]{1,3}$', '^[à-ä]+$', 'ab|cd', '^(a|)+$', '[\\^x]y?'];
    for (const pattern of patterns) {
      await expectSchemaWalksValid({ type: 'string', pattern }, (s, v) => ajv.validate(s, v), pattern, stories.tokenizer, stories.vocabSize, { walks: 40, maxSteps: 60, random });
    }
  }, 120_000);

  it('seeded random patterns, valid and not: each is refused up front, or every walk through it is a JSON string ajv accepts', async () => {
    const ajv = new Ajv2020({ strict: false });
    const random = mulberry32(17);
    let compiled = 0;
    let walked = 0;
    for (const pattern of randomPatterns(3, 160)) {
      const schema = { type: 'string', pattern };
      const verdict = refusal(schema);
      if (!validEcma(pattern)) expect(verdict, pattern).toMatch(/^Invalid JSON schema: pattern is not a valid regular expression: .* \(at #\/pattern\)$/);
      if (verdict !== 'accepted') {
        expect(verdict, pattern).toMatch(/^(Invalid|Unsupported) JSON schema: pattern/);
        continue;
      }
      compiled++;
      const output = await compileStructuredOutput(stories.tokenizer, stories.vocabSize, schemaOutput(schema));
      const texts = await randomWalks(output, stories.tokenizer, stories.vocabSize, { walks: 12, maxSteps: 30, random });
      walked += texts.length;
      for (const text of texts) {
        let value: unknown;
        expect(() => (value = JSON.parse(text)), `${pattern}: ${text}`).not.toThrow();
        expect(ajv.validate(schema, value), `${pattern}: ${JSON.stringify(text)}`).toBe(true);
      }
    }
    expect(compiled).toBeGreaterThan(25);
    expect(walked).toBeGreaterThan(150);
  }, 240_000);
});

describe('regex outputs', () => {
  const stories = grammarTokenizer('stories260K');
  /** A walk's text from its tokens' bytes (decode would drop a SentencePiece leading space). */
  const bytesText = (ids: readonly number[]) => {
    const parts = ids.map((id) => stories.tokenizer.tokenBytes!(id)!);
    const all = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
    let at = 0;
    for (const part of parts) {
      all.set(part, at);
      at += part.length;
    }
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(all); // a walk may begin with U+FEFF (\\s)
  };

  it('take ECMA-262 syntax and escaped ASCII punctuation (as Python’s re.escape writes it); refuse escapes dialects read differently', async () => {
    expect(await accepts(regexOutputGrammar('\\d{3}\\-\\#\\ x'), ['123-# x', '123-#x'])).toEqual([true, false]);
    expect(await accepts(regexOutputGrammar('a"\\\\'), ['a"\\', 'a"'])).toEqual([true, false]);
    expect(await accepts(regexOutputGrammar('.'), ['x', '\t', '\n', '\r'])).toEqual([true, true, false, false]);
    for (const escape of ['\\e', '\\a', '\\Z', '\\A', '\\z']) expect(() => regexOutputGrammar(escape), escape).toThrow('Invalid escape');
  });

  it('seeded random regexes: each is refused up front, or every walk through it matches the regex whole', async () => {
    const random = mulberry32(23);
    let compiled = 0;
    let walked = 0;
    for (const pattern of randomPatterns(4, 160)) {
      const output = await compileStructuredOutput(stories.tokenizer, stories.vocabSize, { type: 'regex', pattern }).catch((error: unknown) => error);
      if (!validEcma(ecmaSource(pattern, REGEX_OUTPUT))) expect((output as Error).message, pattern).toMatch(/^Invalid regex: /);
      if (output instanceof Error) {
        expect(output, pattern).toBeInstanceOf(StructuredOutputError);
        expect(output.message, pattern).toMatch(/^(Invalid|Unsupported) regex: /);
        continue;
      }
      compiled++;
      const whole = new RegExp(`^(?:${ecmaSource(pattern, REGEX_OUTPUT)})$`, 'u');
      const texts = await randomWalks(output as Awaited<ReturnType<typeof compileStructuredOutput>>, stories.tokenizer, stories.vocabSize, { walks: 12, maxSteps: 30, random, text: bytesText });
      walked += texts.length;
      for (const text of texts) expect(whole.test(text), `${pattern}: ${JSON.stringify(text)}`).toBe(true);
    }
    expect(compiled).toBeGreaterThan(25);
    expect(walked).toBeGreaterThan(150);
  }, 240_000);
});
