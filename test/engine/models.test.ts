// The real test models end to end: files -> tokenizer -> GPU forward pass -> greedy tokens -> text.
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import { loadModelFromPath } from '../../src/node/index.ts';

const reference = JSON.parse(readFileSync(new URL('../fixtures/stories260K-reference.json', import.meta.url), 'utf8'));
const stories = {
  gguf: 'public/models/stories260K/stories260K.gguf',
  hf: 'public/models/stories260K/hf',
};
const tinyRandom = {
  gguf: 'test/fixtures/llama-2-tiny-random/llama-2-tiny-random.gguf',
  hf: 'test/fixtures/llama-2-tiny-random/hf',
};
const TINY_RANDOM_GREEDY = [17196, 5211, 21440, 25431, 7455, 3285, 29710, 4660, 29509, 31364, 19741, 8021, 29710, 4660, 29509, 31364];

async function greedyTokens(engine: Engine, promptTokens: number[], maxTokens: number): Promise<number[]> {
  const out: number[] = [];
  const tokens = engine.generator.generate({
    promptTokens,
    maxTokens,
    sampling: { temperature: 0, topP: 1 },
    stopTokenIds: engine.generator.tokenizer.eosIds,
  });
  for await (const t of tokens) out.push(t);
  return out;
}

function logSoftmax(logits: Float32Array): Float64Array {
  let max = -Infinity;
  for (const v of logits) max = Math.max(max, v);
  let sum = 0;
  for (const v of logits) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(logits, (v) => v - lse);
}

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.unload()));

for (const layout of ['gguf', 'hf'] as const) {
  describe(`stories260K (${layout})`, () => {
    let engine: Engine;
    it('loads, named after its file or folder', async () => {
      engine = await loadModelFromPath(stories[layout], layout === 'hf' ? { id: 'stories260K' } : {});
      engines.push(engine);
      expect(engine.info.id).toBe('stories260K');
      expect(engine.info.vocabSize).toBe(512);
    });

    it('tokenizes the prompt as llama.cpp does', () => {
      expect(engine.generator.tokenizer.encode(reference.prompt)).toEqual(reference.prompt_token_ids);
    });

    it('reproduces the reference greedy continuation token for token', async () => {
      const tokens = await greedyTokens(engine, reference.prompt_token_ids, reference.completion_token_ids.length);
      expect(tokens).toEqual(reference.completion_token_ids);
    });

    it('reproduces the reference text through the completions API', async () => {
      const response = await engine.complete({
        model: 'stories260K',
        prompt: reference.prompt,
        max_tokens: reference.completion_token_ids.length,
        temperature: 0,
      });
      expect(response.choices[0].text).toBe(reference.completion_text);
      expect(response.choices[0].finish_reason).toBe('length');
      expect(response.usage).toEqual({ prompt_tokens: 5, completion_tokens: 32, total_tokens: 37, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
    });

    it('matches the reference first-step log-probabilities within 2e-2', async () => {
      const generator = engine.generator as LlamaGenerator;
      const cache = generator.model.createKvCache(16);
      const logprobs = logSoftmax(await generator.model.forward(reference.prompt_token_ids, 0, cache));
      cache.destroy();
      const top5 = Array.from(logprobs.keys()).sort((a, b) => logprobs[b] - logprobs[a]).slice(0, 5);
      expect(top5).toEqual(reference.first_step_top5_logprobs.map((e: { id: number }) => e.id));
      for (const { id, logprob } of reference.first_step_top5_logprobs) {
        expect(Math.abs(logprobs[id] - logprob)).toBeLessThan(2e-2);
      }
    });
  });
}

for (const layout of ['gguf', 'hf'] as const) {
  describe(`llama-2-tiny-random (${layout}, f16 weights, 32000-token vocabulary)`, () => {
    it('gives the known greedy tokens', async () => {
      const engine = await loadModelFromPath(tinyRandom[layout]);
      engines.push(engine);
      const prompt = engine.generator.tokenizer.encode('Once upon a time');
      expect(prompt).toEqual([1, 9038, 2501, 263, 931]);
      expect(await greedyTokens(engine, prompt, TINY_RANDOM_GREEDY.length)).toEqual(TINY_RANDOM_GREEDY);
    });
  });
}
