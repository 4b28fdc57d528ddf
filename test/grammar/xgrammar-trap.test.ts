// XGrammar under failures: a refused compile leaks nothing that accumulates (its shadow stack is
// put back), and a trap (here a stack overflow from a schema nested past what limits.ts allows)
// restarts the module: the call that trapped fails, objects made before it are refused, and the
// next calls work. A file of its own: it drives the process's one XGrammar module.
import { describe, expect, it } from 'vitest';
import { GrammarEngineRestartedError } from '../../src/grammar/types.ts';
import { loadXGrammar, XGrammarCallError } from '../../src/grammar/xgrammar.ts';

const REFUSED_REGEX = (i: number) => JSON.stringify({ type: 'structural_tag', format: { type: 'regex', pattern: `(a${')'.repeat(2 + (i % 3))}${'x'.repeat(i % 50)}` } });

describe('XGrammar after failures', () => {
  it('takes thousands of refused compiles in a row, and compiles after them', async () => {
    const xg = await loadXGrammar();
    const { value: info } = await xg.run((api) => api.TokenizerInfo.createTokenizerInfo(['a', 'b', 'x', ')'], 'raw', false, 4, []));
    const { value: compiler } = await xg.run((api) => api.GrammarCompiler.createGrammarCompiler(info, false));
    // Each refusal leaked ~650 bytes of the 64 KiB shadow stack before: the ~100th trapped.
    for (let i = 0; i < 2000; i++) {
      const failure = await xg.run(() => compiler.compileStructuralTag(REFUSED_REGEX(i))).catch((e: unknown) => e);
      expect(failure, `refusal ${i}`).toBeInstanceOf(XGrammarCallError);
      expect((failure as XGrammarCallError).trapped, `refusal ${i}: ${String(failure)}`).toBe(false);
      if (i % 100 === 0) {
        const { value: grammar } = await xg.run(() => compiler.compileStructuralTag(JSON.stringify({ type: 'structural_tag', format: { type: 'regex', pattern: 'ab+' } })));
        grammar.dispose();
      }
    }
    expect(xg.epoch).toBe(0);
    compiler.dispose();
    info.dispose();
  });

  it('restarts after a trap: the trapping call fails, older objects are refused, new calls work', async () => {
    const xg = await loadXGrammar();
    const epoch = xg.epoch;
    const { value: before } = await xg.run((api) => api.Grammar.fromEBNF('root ::= "a"', 'root'));
    let schema: unknown = { type: 'integer' };
    for (let i = 0; i < 200; i++) schema = { type: 'object', properties: { a: schema }, required: ['a'] };
    const text = JSON.stringify(schema);
    const trap = await xg.run((api) => api.Grammar.fromJSONSchema(text, false, -1)).catch((e: unknown) => e);
    expect(trap).toBeInstanceOf(XGrammarCallError);
    expect((trap as XGrammarCallError).trapped).toBe(true);
    expect(xg.epoch).toBe(epoch + 1);
    expect(() => xg.live(epoch, () => before.toString())).toThrow(GrammarEngineRestartedError);
    const { value: after } = await xg.run((api) => api.Grammar.fromEBNF('root ::= "a" "b"*', 'root'));
    expect(await xg.api.Testings.isGrammarAcceptString(after, 'abbb')).toBe(true);
    expect(await xg.api.Testings.isGrammarAcceptString(after, 'ba')).toBe(false);
    after.dispose();
    // And again: every trap restarts.
    await expect(xg.run((api) => api.Grammar.fromJSONSchema(text, false, -1))).rejects.toThrow();
    expect(xg.epoch).toBe(epoch + 2);
    const { value: again } = await xg.run((api) => api.Grammar.fromEBNF('root ::= "c"', 'root'));
    expect(again.toString()).toContain('"c"');
    again.dispose();
  });
});
