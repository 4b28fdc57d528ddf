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

/** Whether `ebnf` accepts each of `texts`, in order. */
export async function grammarAcceptsAll(ebnf: string, texts: readonly string[]): Promise<boolean[]> {
  const grammar = await grammarAccepts(ebnf);
  try {
    const results: boolean[] = [];
    for (const text of texts) results.push(await grammar.accepts(text));
    return results;
  } finally {
    grammar.dispose();
  }
}
