// How a model's vectors are made (src/engine/embedding-config.ts): sentence-transformers
// modules.json and 1_Pooling/config.json, a GGUF's <arch>.pooling_type, LoadOptions.embedding over
// them; and info.embedding of a model loaded from an in-memory folder.
import { describe, expect, it } from 'vitest';
import { poolingFromGguf, poolingFromSentenceTransformers, readEmbeddingInfo, type EmbeddingOptions } from '../../src/engine/embedding-config.ts';
import { filesFromMemory } from '../../src/io/files.ts';
import { openModel } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { STORIES_GGUF, STORIES_HF } from '../helpers/model-files.ts';
import { loadGenerator } from '../../src/engine/load.ts';
import type { ModelFiles } from '../../src/io/files.ts';
import { testGpu } from '../helpers/gpu.ts';

const TRANSFORMER = { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' };
const POOLING = { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' };
const NORMALIZE = { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' };

function poolingConfig(mode: string): Record<string, unknown> {
  const modes = ['cls_token', 'mean_tokens', 'max_tokens', 'mean_sqrt_len_tokens', 'weightedmean_tokens', 'lasttoken'];
  return { word_embedding_dimension: 24, ...Object.fromEntries(modes.map((m) => [`pooling_mode_${m}`, `pooling_mode_${m}` === mode])), include_prompt: true };
}

/** An in-memory sentence-transformers folder's extra files (beside a model's own). */
function stFiles(modules: unknown[], pooling?: Record<string, unknown>): Record<string, string> {
  return { 'modules.json': JSON.stringify(modules), ...(pooling ? { '1_Pooling/config.json': JSON.stringify(pooling) } : {}) };
}

async function readSt(modules: unknown, pooling?: Record<string, unknown>) {
  return poolingFromSentenceTransformers(modules, async (path) => (path === '1_Pooling' ? pooling ?? null : null));
}

describe('sentence-transformers modules.json and 1_Pooling/config.json', () => {
  it('last token, with a Normalize module (Qwen3-Embedding)', async () => {
    expect(await readSt([TRANSFORMER, POOLING, NORMALIZE], poolingConfig('pooling_mode_lasttoken'))).toEqual({ pooling: 'last', normalize: true, source: 'sentence-transformers' });
  });

  it('mean and CLS; no Normalize module: not normalised', async () => {
    expect(await readSt([TRANSFORMER, POOLING], poolingConfig('pooling_mode_mean_tokens'))).toEqual({ pooling: 'mean', normalize: false, source: 'sentence-transformers' });
    expect(await readSt([TRANSFORMER, POOLING], poolingConfig('pooling_mode_cls_token'))).toMatchObject({ pooling: 'cls' });
  });

  it('no modules.json, or no Pooling module: nothing said', async () => {
    expect(await readSt(null)).toBeUndefined();
    expect(await readSt([TRANSFORMER])).toBeUndefined();
  });

  it('modes it does not pool with, several modes, or none: an error naming them', async () => {
    await expect(readSt([TRANSFORMER, POOLING], poolingConfig('pooling_mode_max_tokens'))).rejects.toThrow(/pools with pooling_mode_max_tokens/);
    await expect(readSt([TRANSFORMER, POOLING], poolingConfig('pooling_mode_weightedmean_tokens'))).rejects.toThrow(/weightedmean/);
    await expect(readSt([TRANSFORMER, POOLING], { ...poolingConfig('pooling_mode_lasttoken'), pooling_mode_mean_tokens: true })).rejects.toThrow(/several pooling modes/);
    await expect(readSt([TRANSFORMER, POOLING], poolingConfig('none'))).rejects.toThrow(/no pooling mode/);
    await expect(readSt([TRANSFORMER, POOLING])).rejects.toThrow(/1_Pooling\/config.json is missing/);
  });

  it('a module that changes the vector (Dense): an error', async () => {
    const dense = { idx: 2, name: '2', path: '2_Dense', type: 'sentence_transformers.models.Dense' };
    await expect(readSt([TRANSFORMER, POOLING, dense], poolingConfig('pooling_mode_mean_tokens'))).rejects.toThrow(/Dense module/);
  });
});

describe('GGUF <arch>.pooling_type (llama.cpp: 0 none, 1 mean, 2 cls, 3 last, 4 rank)', () => {
  const meta = (value?: number) => ({ 'general.architecture': 'qwen3', ...(value === undefined ? {} : { 'qwen3.pooling_type': value }) });
  it('mean, cls, last: normalised, as llama.cpp embeds', () => {
    expect(poolingFromGguf(meta(1))).toEqual({ pooling: 'mean', normalize: true, source: 'gguf' });
    expect(poolingFromGguf(meta(2))).toMatchObject({ pooling: 'cls' });
    expect(poolingFromGguf(meta(3))).toMatchObject({ pooling: 'last' });
  });
  it('absent or none: nothing said; rank and unknown numbers: an error', () => {
    expect(poolingFromGguf(meta())).toBeUndefined();
    expect(poolingFromGguf(meta(0))).toBeUndefined();
    expect(() => poolingFromGguf(meta(4))).toThrow(/rank/);
    expect(() => poolingFromGguf(meta(9))).toThrow(/not one of llama.cpp's pooling types/);
  });
});

describe('readEmbeddingInfo: files, option, defaults', () => {
  const folder = (extra: Record<string, string>, config = '{}') => filesFromMemory('st-model', { 'config.json': config, ...extra });
  const read = async (extra: Record<string, string>, options?: EmbeddingOptions, config?: string) =>
    (await readEmbeddingInfo({ files: folder(extra, config), hiddenSize: 24 }, options)).embedding;
  const noticeOf = async (extra: Record<string, string>, options?: EmbeddingOptions) => readEmbeddingInfo({ files: folder(extra), hiddenSize: 24 }, options);

  it('a generative model: the last token, normalised, no Matryoshka', async () => {
    expect(await read({})).toEqual({ pooling: 'last', normalize: true, dimensions: 24, matryoshka: false, source: 'generative' });
  });

  it('a sentence-transformers folder: its pooling and Normalize module', async () => {
    expect(await read(stFiles([TRANSFORMER, POOLING, NORMALIZE], poolingConfig('pooling_mode_lasttoken')))).toEqual({
      pooling: 'last', normalize: true, dimensions: 24, matryoshka: false, source: 'sentence-transformers',
    });
  });

  it('the option overrides the files', async () => {
    const files = stFiles([TRANSFORMER, POOLING], poolingConfig('pooling_mode_mean_tokens'));
    expect(await read(files, { normalize: true, matryoshka: true })).toEqual({ pooling: 'mean', normalize: true, dimensions: 24, matryoshka: true, source: 'sentence-transformers' });
    expect(await read(files, { pooling: 'last' })).toEqual({ pooling: 'last', normalize: false, dimensions: 24, matryoshka: false, source: 'option' });
  });

  it("Matryoshka from config.json (vLLM's is_matryoshka, matryoshka_dimensions), the option over it", async () => {
    expect(await read({}, undefined, '{"is_matryoshka": true}')).toMatchObject({ matryoshka: true });
    expect(await read({}, undefined, '{"matryoshka_dimensions": [16, 8, 64]}')).toMatchObject({ matryoshka: true, matryoshkaDimensions: [8, 16] });
    expect(await read({}, { matryoshka: false }, '{"matryoshka_dimensions": [16, 8]}')).toEqual({ pooling: 'last', normalize: true, dimensions: 24, matryoshka: false, source: 'generative' });
    expect(await read({}, undefined, '{"is_matryoshka": "yes"}')).toMatchObject({ matryoshka: false });
  });

  it('a mode it does not pool with gives no embeddings and a notice, unless the option names one; a Dense module, whatever the option', async () => {
    const max = stFiles([TRANSFORMER, POOLING], poolingConfig('pooling_mode_max_tokens'));
    const refused = await noticeOf(max);
    expect(refused.embedding).toBeUndefined();
    expect(refused.notice).toMatch(/no embeddings.*pooling_mode_max_tokens/);
    expect(await read(max, { pooling: 'mean' })).toMatchObject({ pooling: 'mean', source: 'option' });
    const dense = stFiles([TRANSFORMER, POOLING, { type: 'sentence_transformers.models.Dense', path: '2_Dense' }], poolingConfig('pooling_mode_mean_tokens'));
    const withDense = await noticeOf(dense, { pooling: 'mean' });
    expect(withDense.embedding).toBeUndefined();
    expect(withDense.notice).toMatch(/Dense/);
  });

  it('bad options: an error naming the value', async () => {
    await expect(read({}, { pooling: 'max' as never })).rejects.toThrow(/embedding.pooling must be one of 'last', 'mean', 'cls'/);
    await expect(read({}, { normalize: 'yes' as never })).rejects.toThrow(/embedding.normalize must be a boolean/);
  });

  it('real files: stories260K (GGUF and HF folder) say nothing: a generative model', async () => {
    const gguf = await openModel(filesFromPath(STORIES_GGUF));
    expect((await readEmbeddingInfo({ files: gguf.files, ggufMetadata: gguf.ggufMetadata, hiddenSize: gguf.config.hiddenSize })).embedding).toMatchObject({ source: 'generative', pooling: 'last', dimensions: 64 });
    const hf = await openModel(filesFromPath(STORIES_HF));
    expect((await readEmbeddingInfo({ files: hf.files, hiddenSize: hf.config.hiddenSize })).embedding).toMatchObject({ source: 'generative', dimensions: 64 });
  });

  it('a GGUF whose metadata gives the pooling; a reranker\'s gives none', async () => {
    const files = filesFromMemory('x', {}, 'x.gguf');
    expect((await readEmbeddingInfo({ files, ggufMetadata: { 'general.architecture': 'llama', 'llama.pooling_type': 3 }, hiddenSize: 8 })).embedding).toEqual({
      pooling: 'last', normalize: true, dimensions: 8, matryoshka: false, source: 'gguf',
    });
    const rank = await readEmbeddingInfo({ files, ggufMetadata: { 'general.architecture': 'llama', 'llama.pooling_type': 4 }, hiddenSize: 8 });
    expect(rank.embedding).toBeUndefined();
    expect(rank.notice).toMatch(/rank/);
  });
});

describe('loadGenerator: info.embedding, and embed() on the loaded model', () => {
  it('stories260K with sentence-transformers files beside it: mean pooling, not normalised, Matryoshka by the option', async () => {
    const own = filesFromPath(STORIES_HF);
    const extra = filesFromMemory('extra', stFiles([TRANSFORMER, POOLING], poolingConfig('pooling_mode_mean_tokens')));
    const files: ModelFiles = { id: own.id, open: async (name, options) => (await extra.open(name, { optional: true })) ?? own.open(name, options) };
    const generator = await loadGenerator(await testGpu(), files, { contextLength: 64, embedding: { matryoshka: true } });
    try {
      expect(generator.info.embedding).toEqual({ pooling: 'mean', normalize: false, dimensions: 64, matryoshka: true, source: 'sentence-transformers' });
      const ids = generator.tokenizer.encode('Once upon a time', { addBos: true });
      const [v, w] = await generator.embed([ids, ids.slice(0, 2)]);
      expect(v).toHaveLength(64);
      expect(Math.hypot(...v!)).not.toBeCloseTo(1, 3);
      expect(v).not.toEqual(w);
    } finally {
      generator.destroy();
    }
  });

  it('stories260K alone: a generative model, normalised vectors', async () => {
    const generator = await loadGenerator(await testGpu(), filesFromPath(STORIES_GGUF), { contextLength: 64 });
    try {
      expect(generator.info.embedding).toEqual({ pooling: 'last', normalize: true, dimensions: 64, matryoshka: false, source: 'generative' });
      const [v] = await generator.embed([generator.tokenizer.encode('Once upon a time', { addBos: true })]);
      expect(Math.hypot(...v!)).toBeCloseTo(1, 5);
    } finally {
      generator.destroy();
    }
  });
});
