// The contract between the request layer (src/api) and the generation loop (src/engine).
import type { TextTokenizer } from '../tokenizer/types.ts';

export interface SamplingParams {
  /** 0 = greedy (argmax). */
  temperature: number;
  /** Nucleus mass in (0, 1]; 1 disables it. */
  topP: number;
  /** Seed of the request's random stream; undefined = a fresh random seed. */
  seed?: number;
}

export interface GenerationRequest {
  promptTokens: readonly number[];
  /** Most tokens to generate; the caller has already checked prompt + maxTokens against the context. */
  maxTokens: number;
  sampling: SamplingParams;
  /** Token ids that end the sequence (normally the tokenizer's EOS ids); they are not yielded. */
  stopTokenIds: readonly number[];
  signal?: AbortSignal;
}

export type FinishReason = 'stop' | 'length';

export interface ModelInfo {
  id: string;
  /** Other names the model answers to in `model`. */
  aliases: readonly string[];
  architecture: string;
  contextLength: number;
  vocabSize: number;
  format: 'gguf' | 'safetensors';
  /** Unix seconds when the model was loaded (GET /v1/models `created`). */
  created: number;
}

/**
 * A loaded model that generates tokens. One request runs on the GPU at a time; others wait
 * their turn. Each request owns its sequence state (KV positions, random stream).
 */
export interface TextGenerator {
  readonly info: ModelInfo;
  readonly tokenizer: TextTokenizer;
  /**
   * Yields generated token ids one by one. Returns 'stop' when a stop token was sampled (not
   * yielded) and 'length' after `maxTokens` tokens. Throws an AbortError when `signal` aborts.
   * Breaking out of the loop (return()) ends the request and frees the GPU for the next one.
   */
  generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void>;
}
