// compileStructuredOutput's implementation (structured-output.ts loads it on first use, so the
// base bundle stays without the grammar layer): check and prepare the output (prepare.ts), compile
// it through the model's cache (model-grammars.ts), and make each sequence's constraint
// (constraint.ts).
import type { TextTokenizer } from '../tokenizer/types.ts';
import { GrammarConstraint } from './constraint.ts';
import { modelGrammars } from './model-grammars.ts';
import { prepareOutput } from './prepare.ts';
import type { CompiledStructuredOutput, StructuredOutput } from './types.ts';

/** The largest vocabulary taken (XGrammar keeps a bitset and a string per id). */
const MAX_VOCAB_SIZE = 1 << 22;

/** See structured-output.ts. */
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
      const { matcher, epoch } = await model.matcher(prepared);
      return new GrammarConstraint(model.xg, epoch, matcher, vocabSize, model.emptyIds, stops, model.jumpForward, model.utf8);
    },
  };
}
