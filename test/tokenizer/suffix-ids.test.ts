// TextTokenizer.suffixIds: what a tokenizer appends after a text when it adds its special tokens
// (Qwen3-Embedding's tokenizer.json appends <|endoftext|>; a GGUF says so with add_eos_token),
// which encode() never appends and an embedding of text takes.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { readGgufHeader } from '../../src/io/formats/gguf.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { tokenizerFromGguf } from '../../src/tokenizer/gguf-tokenizer.ts';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { STORIES_GGUF, STORIES_HF } from '../helpers/model-files.ts';

const storiesJson = () => JSON.parse(readFileSync(`${STORIES_HF}/tokenizer.json`, 'utf8')) as Record<string, unknown>;

/** A TemplateProcessing post_processor: `before` $A `after` (token texts of the vocabulary). */
function template(before: [string, number][], after: [string, number][]) {
  const special = (t: string) => ({ SpecialToken: { id: t, type_id: 0 } });
  return {
    type: 'TemplateProcessing',
    single: [...before.map(([t]) => special(t)), { Sequence: { id: 'A', type_id: 0 } }, ...after.map(([t]) => special(t))],
    pair: [...before.map(([t]) => special(t)), { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }, ...after.map(([t]) => special(t))],
    special_tokens: Object.fromEntries([...before, ...after].map(([t, id]) => [t, { id: t, ids: [id], tokens: [t] }])),
  };
}

describe('suffixIds', () => {
  it('stories260K (GGUF and HF folder): none; encode() is unchanged', async () => {
    const files = filesFromPath(STORIES_GGUF);
    const gguf = tokenizerFromGguf((await readGgufHeader((await files.open(files.ggufFile!))!)).metadata);
    const hf = createHfTokenizer({ tokenizerJson: storiesJson() });
    expect(gguf.suffixIds).toEqual([]);
    expect(hf.suffixIds).toEqual([]);
  });

  it("a tokenizer.json whose TemplateProcessing appends the EOS after the text (Qwen3-Embedding's): that id; encode() leaves it out", () => {
    const json = { ...storiesJson(), post_processor: template([['<s>', 1]], [['</s>', 2]]) };
    const t = createHfTokenizer({ tokenizerJson: json });
    expect(t.suffixIds).toEqual([2]);
    expect(t.addBos).toBe(true);
    expect(t.encode('Once upon a time').at(-1)).not.toBe(2);
  });

  it('tokenizer_config add_eos_token without a template suffix: the EOS', () => {
    const t = createHfTokenizer({ tokenizerJson: storiesJson(), tokenizerConfig: { eos_token: '</s>', add_eos_token: true } });
    expect(t.suffixIds).toEqual([2]);
  });

  it('a GGUF with tokenizer.ggml.add_eos_token: its EOS', async () => {
    const files = filesFromPath(STORIES_GGUF);
    const metadata = (await readGgufHeader((await files.open(files.ggufFile!))!)).metadata;
    expect(tokenizerFromGguf({ ...metadata, 'tokenizer.ggml.add_eos_token': true }).suffixIds).toEqual([metadata['tokenizer.ggml.eos_token_id']]);
  });
});
