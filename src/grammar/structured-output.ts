// Structured output: what a request may constrain its output to, compiled into grammars for one
// model's vocabulary, and the per-sequence constraints (sampling/types.ts TokenConstraint) that the
// generation loop applies. The grammar engine is XGrammar (@mlc-ai/web-xgrammar). The entry of the
// grammar layer, and all of it the base bundle holds: the implementation (compile-output.ts) and
// XGrammar (xgrammar.ts) load when a request first asks for structure; a service worker, which may
// not import(), has them from its own script (preload.ts).
// Browser code: nothing here may import Node modules.
import type { TextTokenizer } from '../tokenizer/types.ts';
import type { CompiledStructuredOutput, StructuredOutput } from './types.ts';

export { GrammarEngineRestartedError, StructuredOutputError } from './types.ts';
export type { CompiledStructuredOutput, JsonWhitespace, StructuredOutput } from './types.ts';

type Implementation = typeof import('./compile-output.ts');
let implementation: Promise<Implementation> | undefined;

function loadImplementation(): Promise<Implementation> {
  implementation ??= import('./compile-output.ts').catch((error: unknown) => {
    implementation = undefined; // a failed chunk load may succeed on a later try
    throw error;
  });
  return implementation;
}

/** Hands the implementation over where import() is refused (preload.ts). */
export function provideStructuredOutput(module: Implementation): void {
  implementation = Promise.resolve(module);
}

/**
 * Compiles `output` for the tokenizer's first `vocabSize` ids (the sampler's), through a bounded
 * cache per (tokenizer, vocabSize, output). Rejects with StructuredOutputError when the schema,
 * regex or grammar is invalid, unsupported, too large, or takes too long to compile.
 */
export async function compileStructuredOutput(
  tokenizer: TextTokenizer,
  vocabSize: number,
  output: StructuredOutput,
): Promise<CompiledStructuredOutput> {
  return (await loadImplementation()).compileStructuredOutput(tokenizer, vocabSize, output);
}
