// Ids as text: enough of a tokenizer for the engine tests, where the engine never decodes. BOS is
// 1 and EOS is 2.
import type { TextTokenizer } from '../../src/tokenizer/types.ts';

export class IdTokenizer implements TextTokenizer {
  readonly bosId = 1;
  readonly eosIds = [2];
  readonly addBos = true;
  constructor(readonly vocabSize: number) {}
  encode(text: string): number[] {
    return text.split(/\s+/).filter(Boolean).map(Number);
  }
  decode(ids: readonly number[]): string {
    return ids.join(' ');
  }
  isSpecial(id: number): boolean {
    return id === 1 || id === 2;
  }
}
