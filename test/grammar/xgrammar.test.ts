// The XGrammar loader in Node: the package loads through the dynamic import, leaves no globals
// behind, and each run reports what XGrammar printed, without C++ file names.
import { describe, expect, it } from 'vitest';
import { loadXGrammar, messagesOf, XGrammarCallError } from '../../src/grammar/xgrammar.ts';

describe('loadXGrammar', () => {
  it('loads the package in Node and puts require, __filename and the console back', async () => {
    const { error, log } = console;
    const xg = await loadXGrammar();
    expect(typeof xg.api.GrammarCompiler.createGrammarCompiler).toBe('function');
    expect('require' in globalThis).toBe(false);
    expect('__filename' in globalThis).toBe(false);
    expect(console.error).toBe(error);
    expect(console.log).toBe(log);
    expect(await loadXGrammar()).toBe(xg);
  });

  it('reports a FATAL message without its C++ file, and keeps working after the abort', async () => {
    const xg = await loadXGrammar();
    const failure = await xg.run((api) => api.Grammar.fromEBNF('root ::= "a" | ', 'root')).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(XGrammarCallError);
    expect((failure as XGrammarCallError).fatal).toBe('EBNF parser error at line 1, column 16: Expect element, but got');
    expect((failure as XGrammarCallError).trapped).toBe(false);
    const { value, warnings } = await xg.run((api) => api.Grammar.fromEBNF('root ::= "a"', 'root'));
    expect(warnings).toEqual([]);
    expect(await xg.api.Testings.isGrammarAcceptString(value, 'a')).toBe(true);
    value.dispose();
  });

  it('runs one call at a time, in order', async () => {
    const xg = await loadXGrammar();
    const order: string[] = [];
    const slow = xg.run(async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      order.push('first');
    });
    const fast = xg.run(() => order.push('second'));
    await Promise.all([slow, fast]);
    expect(order).toEqual(['first', 'second']);
  });
});

describe('messagesOf', () => {
  const lines = [
    '[WARNING] /build/xgrammar/cpp/json_schema_converter.cc:3179: Specifying pattern and minLength is not supported',
    '[FATAL] /Users/someone/xgrammar/cpp/json_schema_converter.cc:3460: Check failed: (err.empty()) is false: Failed to parse JSON: syntax error',
    'at line 2',
    'Aborted()',
  ];

  it('strips the level and the C++ location, and joins the lines a message runs on over', () => {
    expect(messagesOf(lines, 'FATAL')).toEqual(['Check failed: (err.empty()) is false: Failed to parse JSON: syntax error\nat line 2']);
    expect(messagesOf(lines, 'WARNING')).toEqual(['Specifying pattern and minLength is not supported']);
    expect(messagesOf(['Aborted()'], 'FATAL')).toEqual([]);
  });
});
