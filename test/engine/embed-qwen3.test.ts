// A Qwen3-Embedding-shaped model end to end: a random tiny Qwen3 (q/k norms, sharpened attention)
// with the real Qwen3 tokenizer, as a sentence-transformers folder (modules.json, last-token
// Pooling, Normalize) whose tokenizer.json appends <|endoftext|> after a text, as
// Qwen3-Embedding's does. Loaded through the ordinary loader; its vectors against the float64
// reference of the same weights.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateModel } from '../../scripts/model-families.ts';
import { openModel } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { cpuLlamaWeights, readFolderTensors, tempModels } from '../helpers/temp-models.ts';
import { CpuLlama } from '../reference/cpu-llama.ts';

const models = tempModels();
const ENDOFTEXT = 151643;

/** Qwen3-Embedding's post-processor: the text, then <|endoftext|>. */
const APPEND_ENDOFTEXT = {
  type: 'TemplateProcessing',
  single: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<|endoftext|>', type_id: 0 } }],
  pair: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: '<|endoftext|>', type_id: 1 } }],
  special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [ENDOFTEXT], tokens: ['<|endoftext|>'] } },
};

function embeddingFolder(dir: string): void {
  generateModel({ family: 'qwen3', shape: 'tiny', out: dir, dtype: 'f32', seed: 3, scales: { 'self_attn.q_proj': 3, 'self_attn.k_proj': 3 } });
  const tokenizerPath = join(dir, 'tokenizer.json');
  const tokenizer = JSON.parse(readFileSync(tokenizerPath, 'utf8'));
  writeFileSync(tokenizerPath, JSON.stringify({ ...tokenizer, post_processor: APPEND_ENDOFTEXT }));
  writeFileSync(join(dir, 'modules.json'), JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
    { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' },
  ]));
  mkdirSync(join(dir, '1_Pooling'));
  const modes = ['cls_token', 'mean_tokens', 'max_tokens', 'mean_sqrt_len_tokens', 'weightedmean_tokens', 'lasttoken'];
  writeFileSync(join(dir, '1_Pooling', 'config.json'), JSON.stringify({ word_embedding_dimension: 0, ...Object.fromEntries(modes.map((m) => [`pooling_mode_${m}`, m === 'lasttoken'])), include_prompt: true }));
}

describe('a Qwen3-Embedding-shaped folder', () => {
  it('loads as a last-token, normalised embedding model whose tokenizer appends <|endoftext|>; vectors match the float64 reference', async () => {
    const dir = models.dir('webgpu-llama-qwen3-embedding-');
    embeddingFolder(dir);
    const g = await models.load(dir, { weightStorage: 'f32', contextLength: 64 });
    const { config } = await openModel(filesFromPath(dir));
    expect(g.info.embedding).toEqual({ pooling: 'last', normalize: true, dimensions: config.hiddenSize, matryoshka: false, source: 'sentence-transformers' });
    expect(g.tokenizer.suffixIds).toEqual([ENDOFTEXT]);

    const texts = ['A cat sits on the mat.', 'Where is the cat?', 'Quarterly revenue grew by 12% in the third quarter, driven by new markets.'];
    const inputs = texts.map((t) => [...g.tokenizer.encode(t), ...g.tokenizer.suffixIds!]);
    expect(inputs.every((ids) => ids.at(-1) === ENDOFTEXT && ids.at(-2) !== ENDOFTEXT)).toBe(true);
    const vectors = await g.embed(inputs);
    const cpu = cpuLlamaWeights(config, await readFolderTensors(dir));
    const D = config.hiddenSize;
    inputs.forEach((tokens, i) => {
      const hidden = new CpuLlama(config, cpu, 64, g.info.storage!.kvCacheDType).hiddenStates(tokens, 0);
      const want = hidden.subarray((tokens.length - 1) * D, tokens.length * D);
      const n = Math.hypot(...want);
      let dot = 0;
      for (let k = 0; k < D; k++) dot += (vectors[i]![k]! * want[k]!) / n;
      expect(1 - dot).toBeLessThan(1e-4);
      expect(Math.abs(Math.hypot(...vectors[i]!) - 1)).toBeLessThan(1e-6);
    });
    // Without the suffix the vector is another one (the text's own last token's state).
    const [withoutSuffix] = await g.embed([g.tokenizer.encode(texts[0]!)]);
    let dot = 0;
    for (let k = 0; k < D; k++) dot += withoutSuffix![k]! * vectors[0]![k]!;
    expect(dot).toBeLessThan(0.999);
  });
});
