// compileStructuredOutput and its constraints on the four tokenizers: each kind compiles, its
// matcher allows every token of a valid output in turn (tokenized as the model would write it) and
// refuses invalid ones; stop ids end a complete structure; jump-forward; errors; the cache.
import { describe, expect, it } from 'vitest';
import { JumpForwardTokens } from '../../src/grammar/jump-forward.ts';
import { MAX_CACHED_GRAMMARS, modelGrammars } from '../../src/grammar/model-grammars.ts';
import { compileStructuredOutput, StructuredOutputError, type StructuredOutput } from '../../src/grammar/structured-output.ts';
import type { TextTokenizer } from '../../src/tokenizer/types.ts';
import { grammarTokenizer, type GrammarTokenizerName } from '../helpers/grammar-tokenizers.ts';
import { allowedIds, isAllowed, walk } from '../helpers/grammar-walk.ts';

/** The tokens a model writes for `text` (no BOS, no SentencePiece dummy space), checked to spell it exactly. */
function tokensOf(tokenizer: TextTokenizer, vocabSize: number, text: string): number[] {
  const ids = new JumpForwardTokens(tokenizer, vocabSize).tokens(text);
  const spelled = ids.reduce((n, id) => n + tokenizer.tokenBytes!(id)!.length, 0);
  expect(spelled, `tokens spell ${JSON.stringify(text)}`).toBe(new TextEncoder().encode(text).length);
  return ids;
}

const compact = { kind: 'compact' } as const;
const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    age: { type: 'integer', minimum: 0 },
    tags: { type: 'array', items: { type: 'string' }, maxItems: 4 },
    pet: { anyOf: [{ type: 'null' }, { type: 'object', properties: { kind: { enum: ['cat', 'dog'] } }, required: ['kind'] }] },
  },
  required: ['name', 'age'],
};

const CASES: { name: string; output: StructuredOutput; valid: string[]; invalid: [prefix: string, next: string][] }[] = [
  {
    name: 'json_schema, compact',
    output: { type: 'json_schema', schema: PERSON, whitespace: compact },
    valid: ['{"name": "Zoë 日本 👋🏽", "age": 31, "tags": ["a", "b\\"c"], "pet": {"kind": "cat"}}', '{"name": "", "age": 0}'],
    invalid: [['{"name": "x", ', '}'], ['{', ' '], ['{"name": "x", "age": ', '-']],
  },
  {
    name: 'json_schema, any whitespace',
    output: { type: 'json_schema', schema: PERSON, whitespace: { kind: 'any', maxRun: 8 } },
    valid: ['{\n  "name": "a",\n  "age": 2\n}', '{"name":"a","age":2}'],
    invalid: [['{"name": "x"\t\t\t\t\t\t\t\t', '\t'], ['{"name": "x",', '}']],
  },
  {
    name: 'json_object',
    output: { type: 'json_object', whitespace: compact },
    valid: ['{"a": [1, 2.5e3, {"b": null}], "c": "\\u00e9"}', '{}'],
    invalid: [['', '['], ['{"a": 1', ']']],
  },
  {
    name: 'regex',
    output: { type: 'regex', pattern: '\\d{3}-[a-z]+(\\.[a-z]{2})?' },
    valid: ['123-abc', '007-x.io'],
    invalid: [['12', 'a'], ['123-', '4']],
  },
  {
    name: 'choice',
    output: { type: 'choice', choices: ['yes', 'no', 'say "maybe"\nlater', 'café ☕'] },
    valid: ['yes', 'no', 'say "maybe"\nlater', 'café ☕'],
    invalid: [['', 'maybe'], ['ye', 'p']],
  },
  {
    name: 'grammar',
    output: { type: 'grammar', grammar: 'root ::= count " " fruit\ncount ::= [1-9] [0-9]*\nfruit ::= "apples" | "pears"' },
    valid: ['42 apples', '7 pears'],
    invalid: [['', '0'], ['42 ', 'grapes']],
  },
  {
    name: 'structural_tag',
    output: {
      type: 'structural_tag',
      tag: {
        type: 'structural_tag',
        format: {
          type: 'triggered_tags',
          triggers: ['<call>'],
          tags: [{ type: 'tag', begin: '<call>', content: { type: 'json_schema', json_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }, end: '</call>' }],
        },
      },
    },
    valid: ['Let me look. <call>{"city": "Paris"}</call> Done.'],
    invalid: [['<call>', 'Paris']],
  },
];

const NAMES: GrammarTokenizerName[] = ['stories260K', 'llama-2-tiny-random', 'Llama 3.2', 'Qwen2.5'];

for (const name of NAMES) {
  describe(`structured output on ${name}`, () => {
    const { tokenizer, vocabSize } = grammarTokenizer(name);
    const stops = tokenizer.eosIds;

    for (const c of CASES) {
      it(`${c.name}: allows every token of valid outputs, then only the stop tokens`, async () => {
        const compiled = await compileStructuredOutput(tokenizer, vocabSize, c.output);
        for (const text of c.valid) {
          const constraint = await compiled.createConstraint(stops);
          const mask = await walk(constraint, tokensOf(tokenizer, vocabSize, text));
          for (const stop of stops) expect(isAllowed(mask, stop), `stop ${stop} after ${JSON.stringify(text)}`).toBe(true);
          if (c.name !== 'structural_tag' && c.name !== 'regex' && c.name !== 'grammar') expect(allowedIds(mask, vocabSize)).toEqual([...stops].sort((a, b) => a - b));
          expect(constraint.accept(stops[0]!)).toBe(true);
          constraint.dispose();
        }
      });

      it(`${c.name}: refuses tokens that leave the structure, and stays where it was`, async () => {
        const compiled = await compileStructuredOutput(tokenizer, vocabSize, c.output);
        for (const [prefix, next] of c.invalid) {
          const constraint = await compiled.createConstraint(stops);
          await walk(constraint, prefix === '' ? [] : tokensOf(tokenizer, vocabSize, prefix));
          const [first] = tokensOf(tokenizer, vocabSize, next);
          const mask = new Uint32Array(constraint.maskWords);
          await constraint.fillNextMask(mask);
          expect(isAllowed(mask, first!), `${JSON.stringify(next)} after ${JSON.stringify(prefix)}`).toBe(false);
          expect(constraint.accept(first!)).toBe(false);
          const after = new Uint32Array(constraint.maskWords);
          await constraint.fillNextMask(after);
          expect(after).toEqual(mask);
          constraint.dispose();
        }
      });
    }

    it('never allows special tokens but the stop ids, nor ids past the tokenizer', async () => {
      const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_object', whitespace: compact });
      const constraint = await compiled.createConstraint(stops);
      const mask = await walk(constraint, tokensOf(tokenizer, vocabSize, '{"a": "'));
      const allowed = allowedIds(mask, vocabSize);
      expect(allowed.length).toBeGreaterThan(vocabSize / 4); // inside a string nearly anything goes
      expect(allowed.filter((id) => id >= tokenizer.vocabSize || tokenizer.isSpecial(id))).toEqual([]);
      constraint.dispose();
    });

    it('forces the jump-forward string but its last token, without a dummy space, and then that token', async () => {
      const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema: { type: 'object', properties: { key: { type: 'string' } }, required: ['key'] }, whitespace: compact });
      const constraint = await compiled.createConstraint(stops);
      const first = constraint.forced();
      const second = constraint.forced();
      const text = (ids: number[]) => new TextDecoder().decode(Uint8Array.from(ids.flatMap((id) => [...tokenizer.tokenBytes!(id)!])));
      expect(text([...first, ...second])).toBe('{"key": "');
      expect(first.length).toBeGreaterThan(0);
      expect(second.length).toBe(1);
      expect(constraint.forced()).toEqual([]); // inside the string: a choice
      constraint.dispose();
    });
  });
}

describe('structured output, one tokenizer', () => {
  const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
  const regex = (i: number): StructuredOutput => ({ type: 'regex', pattern: `a{${i}}` });

  it('forces no special token, even where the grammar spells one', async () => {
    const qwen = grammarTokenizer('Qwen2.5');
    const compiled = await compileStructuredOutput(qwen.tokenizer, qwen.vocabSize, { type: 'grammar', grammar: 'root ::= "<|im_end|>" [a-z]' });
    const constraint = await compiled.createConstraint(qwen.tokenizer.eosIds);
    const forced = constraint.forced();
    expect(forced.filter((id) => qwen.tokenizer.isSpecial(id))).toEqual([]);
    const text = new TextDecoder().decode(Uint8Array.from(forced.flatMap((id) => [...qwen.tokenizer.tokenBytes!(id)!])));
    expect('<|im_end|>'.startsWith(text)).toBe(true);
    constraint.dispose();
  });

  it('ends a complete structure with the stop ids: then nothing follows', async () => {
    const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'choice', choices: ['Once'] });
    const constraint = await compiled.createConstraint([2]);
    const mask = await walk(constraint, tokensOf(tokenizer, vocabSize, 'Once'));
    expect(allowedIds(mask, vocabSize)).toEqual([2]);
    expect(constraint.accept(2)).toBe(true);
    await constraint.fillNextMask(mask);
    expect(allowedIds(mask, vocabSize)).toEqual([]);
    expect(constraint.accept(2)).toBe(false);
    expect(constraint.accept(tokensOf(tokenizer, vocabSize, 'a')[0]!)).toBe(false);
    expect(constraint.forced()).toEqual([]);
    constraint.dispose();
  });

  it('without stop ids, gives an all-zero mask once the structure is complete', async () => {
    const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'choice', choices: ['Once'] });
    const constraint = await compiled.createConstraint([]);
    const mask = await walk(constraint, tokensOf(tokenizer, vocabSize, 'Once'));
    expect(allowedIds(mask, vocabSize)).toEqual([]);
    expect(constraint.accept(2)).toBe(false);
    constraint.dispose();
  });

  it('masks only the sampler vocabulary when it is smaller than the tokenizer', async () => {
    const compiled = await compileStructuredOutput(tokenizer, 500, { type: 'json_object', whitespace: compact });
    const constraint = await compiled.createConstraint([2]);
    expect(constraint.maskWords).toBe(16);
    const mask = await walk(constraint, tokensOf(tokenizer, 500, '{"a": "'));
    expect(mask[15]! >>> 20).toBe(0); // ids 500..511
    expect(constraint.accept(505)).toBe(false);
    constraint.dispose();
  });

  it('refuses a constraint used after dispose, and stop ids outside the vocabulary', async () => {
    const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'choice', choices: ['Once'] });
    const constraint = await compiled.createConstraint([2]);
    constraint.dispose();
    expect(() => constraint.forced()).toThrow(/after dispose/);
    await expect(compiled.createConstraint([512])).rejects.toThrow(/outside the vocabulary/);
  });

  it('keeps a compiled grammar per key, evicts the least recently used, and compiles an evicted one again', async () => {
    const model = await modelGrammars(tokenizer, vocabSize);
    const first = await compileStructuredOutput(tokenizer, vocabSize, regex(1));
    const early = await first.createConstraint([2]);
    const before = model.compileCount;
    await compileStructuredOutput(tokenizer, vocabSize, regex(1));
    expect(model.compileCount).toBe(before); // a hit
    for (let i = 2; i <= MAX_CACHED_GRAMMARS + 1; i++) await compileStructuredOutput(tokenizer, vocabSize, regex(i));
    expect(model.cachedKeys).toHaveLength(MAX_CACHED_GRAMMARS);
    expect(model.cachedKeys).not.toContain(JSON.stringify(['regex', 'a{1}']));
    // The matcher made before the eviction works on after its grammar was disposed.
    const a = tokensOf(tokenizer, vocabSize, 'a');
    expect(allowedIds(await walk(early, a), vocabSize)).toEqual([2]);
    early.dispose();
    const count = model.compileCount;
    const again = await first.createConstraint([2]);
    expect(model.compileCount).toBe(count + 1);
    expect(allowedIds(await walk(again, a), vocabSize)).toEqual([2]);
    again.dispose();
  });

  it('shares one compile among concurrent requests for the same structure, and remembers a failure', async () => {
    const model = await modelGrammars(tokenizer, vocabSize);
    const before = model.compileCount;
    const output: StructuredOutput = { type: 'regex', pattern: '[xyz]{2,5}' };
    await Promise.all([compileStructuredOutput(tokenizer, vocabSize, output), compileStructuredOutput(tokenizer, vocabSize, output)]);
    expect(model.compileCount).toBe(before + 1);
    const bad: StructuredOutput = { type: 'grammar', grammar: 'root ::= other' };
    const failures = await Promise.all([1, 2, 3].map(() => compileStructuredOutput(tokenizer, vocabSize, bad).catch((e: unknown) => e)));
    expect(model.compileCount).toBe(before + 2);
    for (const failure of failures) expect(failure).toBeInstanceOf(StructuredOutputError);
  });
});

describe('structured output errors', () => {
  const stories = grammarTokenizer('stories260K');
  /** The error message of compiling `output` for a tokenizer (stories260K's by default). */
  const message = (output: StructuredOutput, { tokenizer, vocabSize } = stories) =>
    compileStructuredOutput(tokenizer, vocabSize, output).then(
      () => 'compiled',
      (error: unknown) => {
        expect(error).toBeInstanceOf(StructuredOutputError);
        const text = (error as Error).message;
        expect(text).not.toMatch(/\.cc\b|\/Users\/|Aborted|RuntimeError/);
        return text;
      },
    );
  const schema = (s: unknown): StructuredOutput => ({ type: 'json_schema', schema: s as Record<string, unknown>, whitespace: { kind: 'compact' } });

  it('says what is wrong with a schema, from our checks and from XGrammar', async () => {
    expect(await message(schema({ type: 'object', properties: 5 }))).toBe('Invalid JSON schema: properties must be an object (at #/properties)');
    expect(await message(schema({ type: 'string', pattern: 'a(' }))).toBe('Invalid JSON schema: pattern is not a valid regular expression: Unterminated group (at #/pattern)');
    expect(await message(schema({ type: 'integer', minimum: 5, maximum: 1 }))).toBe('Invalid JSON schema: no integer satisfies minimum 5, maximum 1 (at #)');
    expect(await message(schema([1]))).toBe('Invalid JSON schema: a schema must be an object or a boolean');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(await message(schema(cyclic))).toMatch(/^Invalid JSON schema: not serializable as JSON/);
  });

  it('says what is wrong with a regex or a grammar, a grammar’s with the position', async () => {
    expect(await message({ type: 'regex', pattern: 'a(b' })).toBe('Invalid regex: Unterminated group');
    expect(await message({ type: 'regex', pattern: 'a(?=b)' })).toBe('Unsupported regex: lookarounds ((?=, (?!, (?<=, (?<!) are not supported');
    expect(await message({ type: 'regex', pattern: '' })).toBe('Invalid regex: the pattern must be a non-empty string');
    expect(await message({ type: 'grammar', grammar: 'root ::= "a" | ' })).toBe('Invalid grammar: line 1, column 16: Expect element, but got the end of the grammar');
    expect(await message({ type: 'grammar', grammar: 'root ::= other' })).toBe('Invalid grammar: line 1, column 10: Rule "other" is not defined');
    expect(await message({ type: 'grammar', grammar: 'start ::= "a"' })).toMatch(/^Invalid grammar: .*root/);
  });

  it('refuses what is over the limits, naming the limit', async () => {
    // Compile costs scale with the vocabulary: a long bounded string is refused on Qwen2.5's, not on stories260K's.
    const qwen = grammarTokenizer('Qwen2.5');
    const bio = schema({ type: 'object', properties: { bio: { type: 'string', maxLength: 100 } }, required: ['bio'] });
    expect(await message(bio, stories)).toBe('compiled');
    expect(await message(bio, qwen)).toMatch(
      /^Invalid JSON schema: too costly to compile, an estimated \d+ ms where at most 3000 ms are allowed; the largest part: string length bounds at #\/properties\/bio/,
    );
    expect(await message({ type: 'regex', pattern: '.{0,100}' }, qwen)).toMatch(/^Invalid regex: too costly to compile/);
    expect(await message({ type: 'regex', pattern: 'a'.repeat(5000) })).toBe('Invalid regex: 5000 characters; at most 4096 are supported');
    expect(await message({ type: 'grammar', grammar: `root ::= ${'('.repeat(40)}"a"${')'.repeat(40)}` })).toBe('Invalid grammar: groups nested 40 deep; at most 32 are supported');
    expect(await message(schema({ type: 'object', description: 'x'.repeat(70_000) }))).toMatch(/^Invalid JSON schema: 700\d\d bytes as JSON; at most 65536/);
    expect(await message({ type: 'json_object', whitespace: { kind: 'any', maxRun: 100 } })).toBe('Invalid JSON whitespace: maxRun must be an integer from 1 to 32');
  });

  it('refuses what XGrammar would not enforce: patternProperties, propertyNames, long ranges beyond ASCII in regexes, classes beyond ASCII in grammars', async () => {
    expect(await message(schema({ type: 'object', properties: { a: { type: 'string' } }, required: ['a'], patternProperties: { '^x': { type: 'string' } } }))).toMatch(
      /^Unsupported JSON schema: "patternProperties" is not supported/,
    );
    expect(await message(schema({ type: 'object', propertyNames: { pattern: '^[a-z]+$' } }))).toMatch(/^Unsupported JSON schema: "propertyNames" is not supported/);
    expect(await message({ type: 'regex', pattern: 'x[\\u4e00-\\u9fff]+' })).toMatch(/^Unsupported regex: the character range "\\u4e00"-"\\u9fff" beyond ASCII /);
    expect(await message({ type: 'regex', pattern: '[^é]' })).toBe('compiled'); // its ASCII part (pattern-rule.ts)
    expect(await message({ type: 'grammar', grammar: 'root ::= "[é]" [a-z]+' })).toBe('compiled'); // a literal, not a class
    expect(await message({ type: 'grammar', grammar: 'root ::= [à-ÿ]+' })).toMatch(/^Unsupported grammar: the character class at offset 9 /);
    expect(await message({ type: 'regex', pattern: 'café [a-z]+' })).toBe('compiled');
  });

  it('refuses a schema part XGrammar reports it ignores', async () => {
    expect(await message(schema({ type: 'string', pattern: 'a+', format: 'email' }))).toMatch(/^Unsupported JSON schema: "format" beside "pattern"/);
  });
});
