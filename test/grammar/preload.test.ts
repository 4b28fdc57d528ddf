// The service worker's way in (preload.ts): the grammar layer and XGrammar imported statically
// and handed over, with Node's globals gone again once they are.
import { describe, expect, it } from 'vitest';
import { preloadStructuredOutput } from '../../src/grammar/preload.ts';
import { compileStructuredOutput } from '../../src/grammar/structured-output.ts';
import { grammarTokenizer } from '../helpers/grammar-tokenizers.ts';

describe('preloadStructuredOutput', () => {
  it('hands over what it imported statically, and leaves no Node globals', async () => {
    expect('require' in globalThis).toBe(true); // set for the package's import, until the hand-over
    preloadStructuredOutput();
    expect('require' in globalThis).toBe(false);
    expect('__filename' in globalThis).toBe(false);
    const { tokenizer, vocabSize } = grammarTokenizer('stories260K');
    const compiled = await compileStructuredOutput(tokenizer, vocabSize, { type: 'choice', choices: ['yes', 'no'] });
    const constraint = await compiled.createConstraint([2]);
    expect(constraint.maskWords).toBe(16);
    constraint.dispose();
  });
});
