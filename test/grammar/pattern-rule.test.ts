// String patterns as JSON string content (pattern-rule.ts): XGrammar's own grammar for a pattern
// writes `"`, `\` and control characters raw (invalid JSON); ours writes them as JSON escapes, and
// random walks through schemas with patterns of every kind give only strings that parse as JSON
// and match the pattern as ajv checks it (JavaScript's RegExp with the u flag).
import Ajv2020 from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { jsonStringPattern } from '../../src/grammar/pattern-rule.ts';
import { schemaGrammar, spliceSchema } from '../../src/grammar/schema-splice.ts';
import { StructuredOutputError } from '../../src/grammar/structured-output.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import { grammarAcceptsAll } from '../helpers/grammar-accepts.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { expectSchemaWalksValid } from '../helpers/random-walk.ts';

const accepts = grammarAcceptsAll;

describe('jsonStringPattern', () => {
  it('writes literal quotes, backslashes and control characters as JSON escapes, grouped where a quantifier may follow', () => {
    expect(jsonStringPattern('"a" "\\"" "\\\\" "\\t"')).toBe('"a" "\\\\\\"" "\\\\\\\\" "\\\\t"');
    expect(jsonStringPattern('"a\\"b"+')).toBe('( "a" "\\\\\\"" "b" )+');
    expect(jsonStringPattern('[0-9]{3} ( "x" | [a-c] )*')).toBe('[0-9]{3} ( "x" | [a-c] )*');
  });

  it('splits a class into the ASCII that needs no escape, the escapes of the rest, and the non-ASCII XGrammar matches right', () => {
    // `\s`: space as it is, the control characters as escapes, no-break space on its own.
    expect(jsonStringPattern(String.raw`[\f\n\r\t\v\u0020\u00a0]`)).toBe(String.raw`( [\u0020] | "\\t" | "\\n" | "\\u000b" | "\\f" | "\\r" | "\u00a0" )`);
    // A negated class of ASCII: no control characters; the backslash (it takes it); every non-ASCII character.
    expect(jsonStringPattern('[^"]')).toBe(String.raw`( [\u0020-\u0021\u0023-\u005b\u005d-\u007f] | "\\\\" | [^\u0000-\u007f] )`);
    // A negated class listing non-ASCII, and `.`: their ASCII part only.
    expect(jsonStringPattern(String.raw`[^\u00e9a-z]`)).toBe(String.raw`( [\u0020-\u0021\u0023-\u005b\u005d-\u0060\u007b-\u007f] | "\\\"" | "\\\\" )`);
    expect(jsonStringPattern(String.raw`[\u0000-\U0010FFFF]`)).toBe(String.raw`( [\u0020-\u0021\u0023-\u005b\u005d-\u007f] | "\\\"" | "\\\\" )`);
    // Non-ASCII ranges written out, up to MAX_LISTED characters.
    expect(jsonStringPattern(String.raw`[a\u00e0-\u00e2]`)).toBe(String.raw`( [a] | "\u00e0" | "\u00e1" | "\u00e2" )`);
    expect(() => jsonStringPattern(String.raw`[\u4e00-\u9fff]`)).toThrow(new StructuredOutputError(
      String.raw`Unsupported JSON schema: a pattern's character range "\u4e00"-"\u9fff" beyond ASCII is longer than 64 characters (XGrammar matches such ranges wrongly; list the characters, or split the range)`,
    ));
  });

  it('fails loudly on text it cannot read', () => {
    expect(() => jsonStringPattern('"abc')).toThrow(/no closing "/);
    expect(() => jsonStringPattern('[\\u12]')).toThrow(/unreadable/);
  });
});

describe('patterns in schemas', () => {
  it('XGrammar’s grammar writes a raw quote, backslash or newline; ours writes escapes and keeps JavaScript’s `.`', async () => {
    const xg = await loadXGrammar();
    const schema = { type: 'string', pattern: '^a.b$' };
    const { value: theirs } = await xg.run((api) => api.Testings._jsonSchemaToEBNF(JSON.stringify(schema), false, -1, undefined, true));
    const { value: ours } = await xg.run((api) => schemaGrammar(api, spliceSchema(schema), { anyWhitespace: false }));
    const texts = ['"a"b"', '"a\\b"', '"a\nb"', '"a\\"b"', '"a\\\\b"', '"a\\nb"', '"axb"'];
    expect(await accepts(theirs, texts)).toEqual([true, true, true, false, false, false, true]);
    expect(await accepts(ours, texts)).toEqual([false, false, false, true, true, false, true]);
  });

  it('XGrammar’s classes beyond ASCII take the wrong characters; ours take the right ones or are refused', async () => {
    const xg = await loadXGrammar();
    const both = async (pattern: string, texts: string[]) => {
      const schema = { type: 'string', pattern };
      const { value: theirs } = await xg.run((api) => api.Testings._jsonSchemaToEBNF(JSON.stringify(schema), false, -1, undefined, true));
      const { value: ours } = await xg.run((api) => schemaGrammar(api, spliceSchema(schema), { anyWhitespace: false }));
      return [await accepts(theirs, texts), await accepts(ours, texts)];
    };
    expect(await both('^[à-ä]$', ['"à"', '"ä"', '"x"'])).toEqual([[false, false, false], [true, true, false]]);
    expect(await both('^[^é]$', ['"é"', '"ü"', '"x"'])).toEqual([[true, true, true], [false, false, true]]);
    // A longer range beyond ASCII: XGrammar takes a raw quote for it; ours is refused.
    const wide = '^[Ā-ſ]$';
    const { value: theirs } = await xg.run((api) => api.Testings._jsonSchemaToEBNF(JSON.stringify({ type: 'string', pattern: wide }), false, -1, undefined, true));
    expect(await accepts(theirs, ['"""', '"ā"'])).toEqual([true, false]);
    const refused = await xg.run((api) => schemaGrammar(api, spliceSchema({ type: 'string', pattern: wide }), { anyWhitespace: false })).catch((e: unknown) => e);
    expect((refused as { cause?: unknown }).cause).toBeInstanceOf(StructuredOutputError);
  });

  it('random walks give JSON strings that match the pattern', async () => {
    const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
    const ajv = new Ajv2020({ strict: false });
    const random = mulberry32(5);
    const patterns = ['^a.b$', '^[^x]{1,6}$', '^\\s?\\S+$', '^"[^"\\\\]*"$', '^\\\\[a-z]+$', '^[ -~]{2,5}$', '^(\\W|\\d)+$', '^é[\\t\\n]?\\.$', '^[^@]{1,4}@[a-z]{1,3}\\.[a-z]{2}$', '^[^é]{1,3}$', '^[à-ä]+$'];
    for (const pattern of patterns) {
      await expectSchemaWalksValid({ type: 'string', pattern }, (s, v) => ajv.validate(s, v), pattern, tokenizer, vocabSize, { walks: 40, maxSteps: 60, random });
    }
  }, 120_000);
});
