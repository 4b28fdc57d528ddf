// Structured output under a stream of hostile structures: thousands of refused regexes, grammars
// and schemas in a row, interleaved with accepted ones, leave the grammar engine working (each
// refusal used to leak XGrammar's shadow stack until the ~68th trapped the module for good); a trap
// restarts the module, failing only the sequences whose matchers lived in it; the cache's memory
// returns to its bound after bursts of distinct structures. stories260K's vocabulary: fast.
import { describe, expect, it } from 'vitest';
import { MAX_CACHED_GRAMMAR_BYTES, MAX_CACHED_GRAMMARS, modelGrammars } from '../../src/grammar/model-grammars.ts';
import { compileStructuredOutput, StructuredOutputError, type StructuredOutput } from '../../src/grammar/structured-output.ts';
import { GrammarEngineRestartedError } from '../../src/grammar/types.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import type { PreparedOutput } from '../../src/grammar/prepare.ts';
import { mulberry32 } from '../../scripts/prng.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';
import { allowedIds, walk } from '../helpers/grammar-walk.ts';

const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
const compact = { kind: 'compact' } as const;

/** A structure XGrammar itself refuses (the checks before it pass it on), different for each `i`. */
function refused(i: number): StructuredOutput {
  switch (i % 3) {
    case 0:
      return { type: 'grammar', grammar: `root ::= "a" ( "b${i}" | ` };
    case 1:
      return { type: 'grammar', grammar: `root ::= "a" | rule_${i}` };
    default:
      return { type: 'grammar', grammar: `root ::= undefined_rule_${i}` };
  }
}

/** A structure that compiles, different for each `i`. */
function accepted(i: number): StructuredOutput {
  if (i % 2 === 0) return { type: 'regex', pattern: `a{${1 + (i % 5)}}b[cd]{0,${i % 9}}` };
  const properties = { [`k${i}`]: { type: 'integer' }, s: { type: 'string', maxLength: 1 + (i % 3) } };
  return { type: 'json_schema', schema: { type: 'object', properties, required: [`k${i}`] }, whitespace: compact };
}

describe('structured output under hostile structures', () => {
  it('refuses thousands of structures in a row with 400s and keeps compiling and matching', async () => {
    const xg = await loadXGrammar();
    const epoch = xg.epoch;
    // A sequence decoding throughout: its matcher must stay valid.
    const live = await (await compileStructuredOutput(tokenizer, vocabSize, { type: 'choice', choices: ['Once upon'] })).createConstraint([2]);
    const model = await modelGrammars(tokenizer, vocabSize);
    const compiles = model.compileCount;
    const random = mulberry32(29);
    let refusals = 0;
    let accepts = 0;
    for (let i = 0; i < 2400; i++) {
      if (random() < 0.8) {
        const error = await compileStructuredOutput(tokenizer, vocabSize, refused(i)).catch((e: unknown) => e);
        expect(error, `structure ${i}`).toBeInstanceOf(StructuredOutputError);
        expect((error as Error).message).not.toMatch(/restarted|trapped|reload/);
        refusals++;
      } else {
        await compileStructuredOutput(tokenizer, vocabSize, accepted(i));
        accepts++;
      }
    }
    expect(refusals).toBeGreaterThan(1500);
    // Every refusal was XGrammar's own (a compile each), not a check's before it.
    expect(model.compileCount - compiles).toBeGreaterThanOrEqual(refusals);
    expect(model.compileCount - compiles).toBeLessThanOrEqual(refusals + accepts);
    expect(xg.epoch).toBe(epoch); // nothing trapped
    const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'regex', pattern: 'ab' });
    const constraint = await compiled.createConstraint([2]);
    expect(allowedIds(await walk(constraint, []), vocabSize).length).toBeGreaterThan(0);
    constraint.dispose();
    expect(allowedIds(await walk(live, []), vocabSize).length).toBeGreaterThan(0);
    live.dispose();
  });

  it('after a trap, fails the sequences whose matchers lived in the module, and serves new ones', async () => {
    const xg = await loadXGrammar();
    const output: StructuredOutput = { type: 'regex', pattern: '[ab]{1,3}c' };
    const before = await (await compileStructuredOutput(tokenizer, vocabSize, output)).createConstraint([2]);
    const mask = new Uint32Array(Math.ceil(vocabSize / 32));
    await before.fillNextMask(mask);
    // A trap: a schema nested past what the checks before XGrammar allow, given to it directly.
    let deep: unknown = { type: 'integer' };
    for (let i = 0; i < 200; i++) deep = { type: 'object', properties: { a: deep }, required: ['a'] };
    const epoch = xg.epoch;
    await expect(xg.run((api) => api.Grammar.fromJSONSchema(JSON.stringify(deep), false, -1))).rejects.toThrow();
    expect(xg.epoch).toBe(epoch + 1);
    await expect(before.fillNextMask(mask)).rejects.toThrow(GrammarEngineRestartedError);
    expect(() => before.forced()).toThrow(GrammarEngineRestartedError);
    before.dispose(); // frees nothing in the restarted module
    // The same structure compiles again in the new epoch and matches as before.
    const after = await (await compileStructuredOutput(tokenizer, vocabSize, output)).createConstraint([2]);
    const model = await modelGrammars(tokenizer, vocabSize);
    expect(model.cachedKeys).toEqual([JSON.stringify(['regex', '[ab]{1,3}c'])]);
    await after.fillNextMask(mask);
    const first = allowedIds(mask, vocabSize).map((id) => new TextDecoder().decode(tokenizer.tokenBytes!(id)!));
    expect(first.length).toBeGreaterThan(0);
    for (const piece of first) expect(piece, piece).toMatch(/^[ab]{1,3}c?$/);
    after.dispose();
  });

  it('restores the memory only once no call is under way: a matcher call waiting when a compile traps gets a restart error', async () => {
    const xg = await loadXGrammar();
    const output: StructuredOutput = { type: 'regex', pattern: '[ab]{1,3}c' };
    let deep: unknown = { type: 'integer' };
    for (let i = 0; i < 200; i++) deep = { type: 'object', properties: { a: deep }, required: ['a'] };
    const mask = new Uint32Array(Math.ceil(vocabSize / 32));
    for (let delay = 0; delay < 6; delay++) {
      const constraint = await (await compileStructuredOutput(tokenizer, vocabSize, output)).createConstraint([2]);
      const epoch = xg.epoch;
      // The trapping compile is queued; the matcher's call goes out `delay` microtasks later, and
      // the package makes its wasm call after awaits of its own: either side of the trap.
      const trap = xg.run((api) => api.Grammar.fromJSONSchema(JSON.stringify(deep), false, -1)).catch((e: unknown) => e);
      for (let i = 0; i < delay; i++) await Promise.resolve();
      const masked = constraint.fillNextMask(mask).then(
        () => 'filled',
        (e: unknown) => e,
      );
      const [trapped, outcome] = await Promise.all([trap, masked]);
      expect(trapped).toBeInstanceOf(Error);
      if (outcome !== 'filled') expect(outcome, `delay ${delay}`).toBeInstanceOf(GrammarEngineRestartedError);
      expect(xg.epoch, `delay ${delay}`).toBe(epoch + 1); // one restart, not a second from a stale call
      constraint.dispose();
      // The restored module serves a new constraint exactly.
      const fresh = await (await compileStructuredOutput(tokenizer, vocabSize, output)).createConstraint([2]);
      await fresh.fillNextMask(mask);
      for (const id of allowedIds(mask, vocabSize)) expect(new TextDecoder().decode(tokenizer.tokenBytes!(id)!)).toMatch(/^[ab]{1,3}c?$/);
      fresh.dispose();
    }
  });

  it('remembers a structure that trapped the module across the restart: sent again, it is refused without another', async () => {
    const xg = await loadXGrammar();
    const model = await modelGrammars(tokenizer, vocabSize);
    let deep: unknown = { type: 'integer' };
    for (let i = 0; i < 200; i++) deep = { type: 'object', properties: { a: deep }, required: ['a'] };
    // No request reaches such a trap past the checks before XGrammar; this prepared output does.
    const trapping: PreparedOutput = {
      key: 'a structure that traps',
      subject: 'JSON schema',
      cost: { cost: 0 },
      warningsAreErrors: true,
      compile: async (api, compiler) => compiler.compileGrammar(await api.Grammar.fromJSONSchema(JSON.stringify(deep), false, -1)),
    };
    const epoch = xg.epoch;
    const compiles = model.compileCount;
    const first = await model.compile(trapping).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(StructuredOutputError);
    expect((first as Error).message).toMatch(/failed on it .* and was restarted/);
    expect(xg.epoch).toBe(epoch + 1);
    for (let i = 0; i < 3; i++) await expect(model.compile(trapping)).rejects.toBe(first);
    expect(xg.epoch).toBe(epoch + 1);
    expect(model.compileCount).toBe(compiles + 1);
  });

  it('returns to its memory bound after bursts of distinct schemas and tool-call tags', async () => {
    const xg = await loadXGrammar();
    const model = await modelGrammars(tokenizer, vocabSize);
    const burst = async (from: number, count: number) => {
      for (let i = from; i < from + count; i++) {
        const tags = [0, 1].map((k) => ({
          type: 'tag',
          begin: `<tool_call>{"name": "t${i}_${k}", "arguments": `,
          content: { type: 'json_schema', json_schema: { type: 'object', properties: { [`q${i}`]: { type: 'string' } }, required: [`q${i}`] } },
          end: '}</tool_call>',
        }));
        const tag = { type: 'structural_tag', format: { type: 'triggered_tags', triggers: ['<tool_call>'], tags, at_least_one: true, stop_after_first: false } };
        await compileStructuredOutput(tokenizer, vocabSize, i % 2 === 0 ? accepted(i) : { type: 'structural_tag', tag });
      }
    };
    await burst(100_000, 2 * MAX_CACHED_GRAMMARS);
    const plateau = xg.memoryBytes();
    expect(plateau).toBeGreaterThan(0);
    await burst(200_000, 8 * MAX_CACHED_GRAMMARS);
    expect(model.cachedKeys.length).toBeLessThanOrEqual(MAX_CACHED_GRAMMARS);
    expect(model.cachedBytes).toBeLessThanOrEqual(MAX_CACHED_GRAMMAR_BYTES);
    // Evicted grammars are freed: their memory is reused, the module does not grow.
    expect(xg.memoryBytes()).toBe(plateau);
  });
});
