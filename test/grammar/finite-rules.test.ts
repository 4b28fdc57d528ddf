// A structure with a rule that never ends is refused at compile (its jump-forward would otherwise
// build forced text until the wasm memory ran out: 6 s, then a trap). The reader of XGrammar's
// normalized grammar text on hand-written texts, on every structure the guarantee tests use and on
// tool-call tags (each read, none refused), and the refusals through compileStructuredOutput.
import { describe, expect, it } from 'vitest';
import { validateCompletionRequest } from '../../src/api/schema.ts';
import { requestStructure } from '../../src/api/structured-output.ts';
import { toolCallStructure } from '../../src/api/tool-call-grammar.ts';
import { checkFiniteRules } from '../../src/grammar/finite-rules.ts';
import { prepareOutput } from '../../src/grammar/prepare.ts';
import { compileStructuredOutput, StructuredOutputError, type StructuredOutput } from '../../src/grammar/structured-output.ts';
import { byteLevelVocabulary } from '../../src/grammar/vocabulary.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import { STRUCTURED_CASES } from '../fixtures/structured-cases.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';

const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
const compact = { kind: 'compact' } as const;

describe('checkFiniteRules', () => {
  it('finds a reachable rule that never ends, and only such a rule', () => {
    expect(checkFiniteRules('root ::= (("a" root))\n')).toEqual({ ok: false, rule: 'root' });
    expect(checkFiniteRules('root ::= ((root_1 loop))\nloop ::= (("a" loop))\nroot_1 ::= (("x") | ("y"))\n')).toEqual({ ok: false, rule: 'loop' });
    // b cannot end, and root reaches it through root_1 (which can, through c).
    const reached = 'root ::= (("a" root_1 [^x]*)) (=("q"))\nb ::= (("b" b))\nc ::= (("c"))\nroot_1 ::= ((root_1_1 root_1) | (b) | (c))\nroot_1_1 ::= ((b) | (c))\n';
    expect(checkFiniteRules(reached)).toEqual({ ok: false, rule: 'b' });
    // d cannot end, but nothing reaches it.
    expect(checkFiniteRules('root ::= (("a" b*))\nb ::= (("c") | ("\\"" b))\nd ::= ((d))\n')).toMatchObject({ ok: true });
    // Repetitions: * ? {0,n} may be skipped, + and {m,} with m > 0 not; a rule under either is
    // reached, and once a sequence enters it, it must be able to end.
    expect(checkFiniteRules('root ::= ((y* "a"?))\ny ::= (("y"))\n')).toMatchObject({ ok: true });
    expect(checkFiniteRules('root ::= ((x{0,3} y+))\nx ::= (("x" x) | ("x"))\ny ::= (("y"))\n')).toMatchObject({ ok: true });
    expect(checkFiniteRules('root ::= ((x*))\nx ::= (("x" x))\n')).toEqual({ ok: false, rule: 'x' });
    expect(checkFiniteRules('root ::= ((x+))\nx ::= (("x" x))\n')).toEqual({ ok: false, rule: 'x' });
    expect(checkFiniteRules('root ::= ((x{2,}))\nx ::= (("x" x))\n')).toEqual({ ok: false, rule: 'x' });
    // A TagDispatch ends at its stops, but the rules it dispatches to are reached.
    const dispatch = (group: string) =>
      `root ::= ((t))\nt ::= TagDispatch(\n  ("<f", g),\n  stop_eos=true,\n  stop_str=(),\n  loop_after_dispatch=true\n)\ng ::= ((">" ${group} "</f>"))\nh ::= (("h" h))\n`;
    expect(checkFiniteRules(dispatch('"x"'))).toMatchObject({ ok: true });
    expect(checkFiniteRules(dispatch('h'))).toEqual({ ok: false, rule: 'h' });
    // Strings and classes with escapes, brackets and quotes inside.
    expect(checkFiniteRules('root ::= (("\\"(" [\\]\\"(] [^\\0-\\x1f\\"\\\\\\r\\n]* "|"))\n')).toMatchObject({ ok: true });
  });

  it('reads a long chain of rules, defined in either order (a sweep until nothing changes took minutes: the test times out)', () => {
    const chain = Array.from({ length: 20_000 }, (_, i) => `r${i} ::= (("x" r${i + 1}) | ("y"))\n`);
    const text = (lines: string[]) => `root ::= ((r0))\n${lines.join('')}r20000 ::= (("z"))\n`;
    expect(checkFiniteRules(text(chain))).toMatchObject({ ok: true });
    expect(checkFiniteRules(text(chain.slice().reverse()))).toMatchObject({ ok: true });
  }, 10_000);

  it('finds the longest output a part of a reachable rule requires', () => {
    expect(checkFiniteRules('root ::= (("abc" x{3}))\nx ::= (("\\u00e9" "z") | ("q"))\n')).toEqual({ ok: true, longestRequired: 6 });
    // An option that may be skipped still forces its text once entered.
    expect(checkFiniteRules('root ::= (("") | ("a"{1000000}))\n')).toEqual({ ok: true, longestRequired: 1_000_000 });
    expect(checkFiniteRules('root ::= ((x*))\nx ::= (("ab"{50} "c"))\n')).toEqual({ ok: true, longestRequired: 101 });
  });

  it('says when it cannot read the text, rather than guessing', () => {
    expect(checkFiniteRules('root ::= (("a"')).toHaveProperty('unreadable');
    expect(checkFiniteRules('root ::= ((b))\n')).toHaveProperty('unreadable'); // b undefined
    expect(checkFiniteRules('root ::= (("a" @))\n')).toHaveProperty('unreadable');
  });
});

describe('compiled structures', () => {
  /** XGrammar's normalized text of `output`, compiled for stories260K. */
  async function normalizedText(output: StructuredOutput): Promise<string> {
    const xg = await loadXGrammar();
    const prepared = prepareOutput(output);
    const { value } = await xg.run(async (api) => {
      const info = await api.TokenizerInfo.createTokenizerInfo(byteLevelVocabulary(tokenizer, vocabSize), 'byte_level', false, vocabSize, []);
      const compiler = await api.GrammarCompiler.createGrammarCompiler(info, false);
      const compiled = await prepared.compile(api, compiler);
      const grammar = compiled.grammar();
      const text = grammar.toString();
      for (const object of [grammar, compiled, compiler, info]) object.dispose();
      return text;
    });
    return value;
  }

  const structures: [string, StructuredOutput][] = STRUCTURED_CASES.map((c) => [
    c.name,
    requestStructure(validateCompletionRequest({ model: 'm', prompt: 'p', ...c.request }))!.output,
  ]);
  const tool = (name: string, parameters: Record<string, unknown>) => ({ type: 'function' as const, function: { name, parameters } });
  const tools = [tool('get_weather', { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city'] }), tool('noop', { type: 'object' })];
  for (const format of ['hermes', 'llama3_json', 'mistral'] as const) {
    structures.push([`${format} tool calls`, toolCallStructure({ format, tools, choice: 'required', parallel: true, template: '' })]);
  }
  structures.push(['json_object', { type: 'json_object', whitespace: compact }]);

  it.each(structures)('%s: read, every reachable rule ends', async (_name, output) => {
    expect(checkFiniteRules(await normalizedText(output))).toMatchObject({ ok: true });
  });

  it('refuses structures with a rule that never ends, with a 400', async () => {
    const endless: StructuredOutput[] = [
      { type: 'grammar', grammar: 'root ::= "a" root' },
      { type: 'grammar', grammar: 'root ::= ("x" | "y") loop\nloop ::= "a" loop' },
      { type: 'json_schema', schema: { type: 'object', properties: { a: { $ref: '#' } }, required: ['a'] }, whitespace: compact },
      { type: 'json_schema', schema: { type: 'array', items: { $ref: '#' }, minItems: 1 }, whitespace: compact },
    ];
    for (const output of endless) {
      const error = await compileStructuredOutput(tokenizer, vocabSize, output).catch((e: unknown) => e);
      expect(error, JSON.stringify(output)).toBeInstanceOf(StructuredOutputError);
      expect((error as Error).message).toMatch(/admits no finite output/);
    }
    // Parts that require more text than the bound: refused, where XGrammar's jump-forward would build it all at once.
    const long: StructuredOutput[] = [
      { type: 'grammar', grammar: 'root ::= "x" | "a"{1000000}' },
      { type: 'grammar', grammar: 'root ::= ("abcdefghij"{100}){10}' },
      { type: 'json_schema', schema: { type: 'array', items: { const: 'abcdefghij' }, minItems: 10000 }, whitespace: compact },
    ];
    for (const output of long) {
      const error = await compileStructuredOutput(tokenizer, vocabSize, output).catch((e: unknown) => e);
      expect(error, JSON.stringify(output)).toBeInstanceOf(StructuredOutputError);
      expect((error as Error).message).toMatch(/requires at least \d+ characters of output; at most 4096/);
    }
    // Recursion that can end compiles.
    await compileStructuredOutput(tokenizer, vocabSize, { type: 'json_schema', schema: { type: 'object', properties: { a: { $ref: '#' } } }, whitespace: compact });
    await compileStructuredOutput(tokenizer, vocabSize, { type: 'grammar', grammar: 'root ::= "a" root | "b"' });
  });
});
