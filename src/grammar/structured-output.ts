// Structured output: what a request may constrain its output to, compiled into grammars for one
// model's vocabulary, and the per-sequence constraints (sampling/types.ts TokenConstraint) that the
// generation loop applies. The grammar engine is XGrammar (@mlc-ai/web-xgrammar), loaded only when a
// request first asks for structure (xgrammar.ts). The entry of the grammar layer: the rest of the
// runtime imports this module only.
// Browser code: nothing here may import Node modules.
import type { TokenConstraint } from '../sampling/types.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { GrammarConstraint } from './constraint.ts';
import { JumpForwardTokens } from './jump-forward.ts';
import { modelGrammars } from './model-grammars.ts';
import { prepareOutput } from './prepare.ts';
import type { StructuredOutput } from './types.ts';

export { StructuredOutputError } from './types.ts';
export type { JsonWhitespace, StructuredOutput } from './types.ts';

/** A structure compiled for one model's vocabulary, cached; each sequence gets its own constraint from it. */
export interface CompiledStructuredOutput {
  /** A fresh constraint for one sequence; `stopTokenIds` end the structure once it is complete. */
  createConstraint(stopTokenIds: readonly number[]): Promise<TokenConstraint>;
}

/** The largest vocabulary taken (XGrammar keeps a bitset and a string per id). */
const MAX_VOCAB_SIZE = 1 << 22;

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
  if (!Number.isInteger(vocabSize) || vocabSize < 1 || vocabSize > MAX_VOCAB_SIZE) {
    throw new RangeError(`vocabSize must be an integer from 1 to ${MAX_VOCAB_SIZE}, not ${vocabSize}`);
  }
  const prepared = prepareOutput(output);
  const model = await modelGrammars(tokenizer, vocabSize);
  await model.compile(prepared);
  return {
    async createConstraint(stopTokenIds) {
      const stops = [...new Set(stopTokenIds)];
      const outside = stops.find((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize);
      if (outside !== undefined) throw new RangeError(`stop token id ${outside} is outside the vocabulary (0..${vocabSize - 1})`);
      const matcher = await model.matcher(prepared);
      return new GrammarConstraint(matcher, vocabSize, model.emptyIds, stops, jumpForwardTokens(tokenizer, vocabSize));
    },
  };
}

const jumpForwards = new WeakMap<TextTokenizer, Map<number, JumpForwardTokens>>();

function jumpForwardTokens(tokenizer: TextTokenizer, vocabSize: number): JumpForwardTokens {
  let bySize = jumpForwards.get(tokenizer);
  if (!bySize) jumpForwards.set(tokenizer, (bySize = new Map()));
  let tokens = bySize.get(vocabSize);
  if (!tokens) bySize.set(vocabSize, (tokens = new JumpForwardTokens(tokenizer, vocabSize)));
  return tokens;
}
