// The generation loop: prefill the prompt, then sample and decode one token at a time.
import type { LlamaModel } from '../model/llama.ts';
import type { KvCache } from '../model/kv-cache.ts';
import { createRandomStream, randomSeed } from '../sampling/random.ts';
import { sampleToken } from '../sampling/sampler.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { Scheduler, abortError } from './scheduler.ts';
import type { FinishReason, GenerationRequest, ModelInfo, TextGenerator } from './types.ts';

export class LlamaGenerator implements TextGenerator {
  private readonly scheduler: Scheduler;

  constructor(
    readonly model: LlamaModel,
    readonly tokenizer: TextTokenizer,
    readonly info: ModelInfo,
    /** One KV cache, lent to the request that holds the GPU: each request rewrites it from position 0. */
    private readonly cache: KvCache,
    options: { maxQueued?: number } = {},
  ) {
    this.scheduler = new Scheduler(options.maxQueued);
  }

  async *generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void> {
    const { promptTokens, maxTokens, sampling, stopTokenIds, signal } = request;
    if (promptTokens.length === 0) throw new Error('the prompt has no tokens');
    if (promptTokens.length > this.cache.capacity) {
      throw new Error(`the prompt has ${promptTokens.length} tokens; the context holds ${this.cache.capacity}`);
    }
    const release = await this.scheduler.acquire(signal);
    try {
      const random = createRandomStream(sampling.seed ?? randomSeed());
      const stops = new Set(stopTokenIds);
      let position = promptTokens.length;
      let logits = await this.model.forward(promptTokens, 0, this.cache);
      for (let generated = 0; generated < maxTokens; generated++) {
        if (signal?.aborted) throw abortError(signal);
        const token = sampleToken(logits, sampling, random);
        if (stops.has(token)) return 'stop';
        yield token;
        if (signal?.aborted) throw abortError(signal);
        if (generated + 1 === maxTokens) break; // no forward pass for a token nobody will read
        if (position >= this.cache.capacity) return 'length';
        logits = await this.model.forward([token], position, this.cache);
        position++;
      }
      return 'length';
    } finally {
      release();
    }
  }

  destroy(): void {
    this.cache.destroy();
    this.model.destroy();
  }
}
