// A wasm trap (here a stack overflow from a schema nested past what limits.ts allows) may leave
// XGrammar's memory corrupt: the loader refuses every later call. A file of its own: the module
// stays broken for the rest of the process.
import { describe, expect, it } from 'vitest';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';

describe('a trapped XGrammar', () => {
  it('is not used again', async () => {
    const xg = await loadXGrammar();
    let schema: unknown = { type: 'integer' };
    for (let i = 0; i < 200; i++) schema = { type: 'object', properties: { a: schema }, required: ['a'] };
    const text = JSON.stringify(schema);
    await expect(xg.run((api) => api.Grammar.fromJSONSchema(text, false, -1))).rejects.toThrow(/trapped \(.*\) and is not used again/);
    await expect(xg.run((api) => api.Grammar.fromEBNF('root ::= "a"', 'root'))).rejects.toThrow(/is not used again/);
  });
});
