// Whether an EBNF grammar accepts whole strings, asked of XGrammar without a tokenizer
// (Testings.isGrammarAcceptString): for tests of the rules the grammar layer writes itself.
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';

/** A membership test for `ebnf` from rule `root`; `dispose` frees the grammar. */
export async function grammarAccepts(ebnf: string, root = 'root'): Promise<{ accepts(text: string): Promise<boolean>; dispose(): void }> {
  const xg = await loadXGrammar();
  const { value: grammar } = await xg.run((api) => api.Grammar.fromEBNF(ebnf, root));
  return {
    accepts: (text) => xg.api.Testings.isGrammarAcceptString(grammar, text),
    dispose: () => grammar.dispose(),
  };
}
