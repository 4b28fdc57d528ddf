// The vocabulary XGrammar reads, on the four tokenizers: every token's entry is its bytes (read
// back from XGrammar's decoded vocabulary where the bytes are whole UTF-8, which embind can
// return; the others, partial characters, are covered by the matcher walks of
// structured-output.test.ts), special tokens and ids past the tokenizer are empty.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TokenizerInfo } from '@mlc-ai/web-xgrammar';
import { byteLevelPiece, byteLevelVocabulary } from '../../src/grammar/vocabulary.ts';
import { loadXGrammar } from '../../src/grammar/xgrammar.ts';
import { grammarTokenizer, type GrammarTokenizerName } from '../helpers/grammar-tokenizers.ts';

describe('byteLevelPiece', () => {
  it("writes each byte as GPT-2's character for it", () => {
    expect(byteLevelPiece(new TextEncoder().encode('Hello world'))).toBe('HelloĠworld');
    expect(byteLevelPiece(Uint8Array.of(0x0a, 0x00, 0xad, 0x7f, 0xe4))).toBe('ĊĀŃġä');
    const all = byteLevelPiece(Uint8Array.from({ length: 256 }, (_, b) => b));
    expect(new Set(all).size).toBe(256);
  });
});

const NAMES: GrammarTokenizerName[] = ['stories260K', 'llama-2-tiny-random', 'Llama 3.2', 'Qwen2.5'];

for (const name of NAMES) {
  describe(`vocabulary: ${name}`, () => {
    const { tokenizer, vocabSize } = grammarTokenizer(name);
    let info: TokenizerInfo;

    beforeAll(async () => {
      const xg = await loadXGrammar();
      info = (await xg.run((api) => api.TokenizerInfo.createTokenizerInfo(byteLevelVocabulary(tokenizer, vocabSize), 'byte_level', false, vocabSize, []))).value;
    }, 60_000);
    afterAll(() => info?.dispose());

    it("holds every token's bytes, and nothing for special tokens and ids past the tokenizer", () => {
      const decoded = info.getDecodedVocabHandle();
      expect(decoded.size()).toBe(vocabSize);
      const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
      const counts = { whole: 0, partial: 0, empty: 0 };
      const wrong: string[] = [];
      for (let id = 0; id < vocabSize; id++) {
        const held = decoded.get(id) as string;
        const bytes = id < tokenizer.vocabSize && !tokenizer.isSpecial(id) ? tokenizer.tokenBytes(id)! : new Uint8Array(0);
        if (bytes.length === 0) {
          counts.empty++;
          if (held !== '') wrong.push(`${id}: ${JSON.stringify(held)} where '' belongs`);
          continue;
        }
        let text: string | undefined;
        try {
          text = utf8.decode(bytes);
        } catch {
          counts.partial++;
          if (held === '') wrong.push(`${id}: empty where bytes ${[...bytes]} belong`);
          continue;
        }
        counts.whole++;
        if (held !== text) wrong.push(`${id}: ${JSON.stringify(held)} where ${JSON.stringify(text)} belongs`);
      }
      expect(wrong.slice(0, 5)).toEqual([]);
      expect(counts.whole).toBeGreaterThan(vocabSize / 2);
      expect(counts.empty).toBeGreaterThanOrEqual(tokenizer.eosIds.length + vocabSize - tokenizer.vocabSize);
      decoded.delete();
    });
  });
}
