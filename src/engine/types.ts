// The contract between the request layer (src/api) and the generation loop (src/engine).
import type { TextTokenizer } from '../tokenizer/types.ts';
import type { WeightDType } from '../gpu/tensor.ts';
import type { GeneratedToken, SamplingParams, TokenConstraint } from '../sampling/types.ts';

// The sampling layer's request and result types, part of this contract too.
export type { GeneratedToken, SamplingParams, TokenConstraint, TokenLogprob } from '../sampling/types.ts';

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

/** The tool-call formats chat output can be parsed in (src/api/tool-parsers.ts). */
export type ToolCallFormat = 'hermes' | 'llama3_json' | 'mistral';
export const TOOL_CALL_FORMATS: readonly ToolCallFormat[] = ['hermes', 'llama3_json', 'mistral'];

/** How a model's hidden states become one vector per input (sentence-transformers' pooling modes). */
export type EmbeddingPooling = 'last' | 'mean' | 'cls';
export interface EmbeddingInfo {
  pooling: EmbeddingPooling;
  /** Vectors are L2-normalised (a sentence-transformers Normalize module, or the load option). */
  normalize: boolean;
  /** Length of the vectors (the model's hidden size). */
  dimensions: number;
  /** The model is trained for Matryoshka truncation (`dimensions` in a request may ask for fewer). */
  matryoshka: boolean;
  /** The sizes it was trained for, ascending (config.json `matryoshka_dimensions`); absent: any size up to `dimensions`. */
  matryoshkaDimensions?: readonly number[];
  /** Where the pooling came from: the model's files, a load option, or a generative model's default (last token). */
  source: 'sentence-transformers' | 'gguf' | 'option' | 'generative';
}

export interface ModelInfo {
  id: string;
  /** Other names the model answers to in `model`. */
  aliases: readonly string[];
  architecture: string;
  contextLength: number;
  /** The model's: rows of its embedding and lm_head (config.json vocab_size; see usableVocabSize). */
  vocabSize: number;
  format: 'gguf' | 'safetensors';
  /** Unix seconds when the model was loaded (GET /v1/models `created`). */
  created: number;
  /** How the weights are stored on the GPU and what the model takes there (set by loadGenerator). */
  storage?: ModelStorageInfo;
  /**
   * The tool-call format chat output is parsed with (LoadOptions.toolCallFormat); absent: chosen
   * from the chat template.
   */
  toolCallFormat?: ToolCallFormat;
  /**
   * false: the model's thinking is not split from its answers (LoadOptions.reasoning); absent: it
   * is, when the model thinks (`<think>` tokens or a template that writes `<think>`: src/api/reasoning.ts).
   */
  reasoning?: false;
  /** What the load left out of the files, said once (e.g. the vision tower of an image-text checkpoint: the model takes text only). */
  notices?: readonly string[];
  /**
   * How embed() makes vectors (set for every loaded model: an embedding model's from its files or
   * the load option; a generative model's the last token, normalised, source 'generative').
   */
  embedding?: EmbeddingInfo;
}

export interface ModelStorageInfo {
  /** The `weightStorage` the weights were loaded with ('source' for GGUF files, whose tensors keep their types). */
  weightStorage: 'f16' | 'f32' | 'source' | 'q8_0' | 'q4_0';
  /** Element type of the KV cache (LoadOptions.kvCacheDType). */
  kvCacheDType: 'f16' | 'f32';
  /** GPU memory saved prefixes may take beyond the KV cache (LoadOptions.prefixCacheBytes; 0: none, or the prefix cache is off). */
  prefixCacheBytes: number;
  /** Sequences that decode at once (LoadOptions.maxConcurrentSequences, within memoryBudgetBytes); 1: one request at a time. */
  maxConcurrentSequences?: number;
  /**
   * Every uploaded tensor by canonical Hugging Face name: its GPU storage type and buffer size (all
   * its buffers); `parts`: a matrix over the device's buffer limits, split into buffers of whole rows.
   */
  tensors: Record<string, { dtype: WeightDType; bytes: number; parts?: { rows: number; bytes: number }[] }>;
  /** Sum of the weight buffers. */
  weightBytes: number;
  /** The KV cache for `contextLength` positions. */
  kvCacheBytes: number;
  /** Estimated activation buffers (a prefill of `contextLength` tokens). */
  activationBytes: number;
  /** weightBytes + kvCacheBytes + activationBytes: what memoryBudgetBytes is compared with. */
  totalBytes: number;
}

/**
 * The ids requests may use and tokens are sampled and scored among: those the model has an
 * embedding and a logit for and the tokenizer a piece for. A checkpoint's lm_head may have padding
 * rows past its tokenizer's ids (Qwen2: 151936 rows, 151665 ids), or its tokenizer.json added
 * tokens past config.json's vocab_size.
 */
export function usableVocabSize(generator: Pick<TextGenerator, 'info' | 'tokenizer'>): number {
  return Math.min(generator.info.vocabSize, generator.tokenizer.vocabSize);
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
  /**
   * Waits for the GPU, runs the prompt once, and returns a session from which sequences are
   * decoded. The caller must close() it (also on errors and aborts).
   */
  openSession(request: SessionRequest): Promise<GenerationSession>;
  /**
   * One pooled vector per input (token ids: each non-empty and within the context), at full
   * `info.embedding.dimensions`, L2-normalised when `info.embedding.normalize`. Waits its turn on
   * the GPU like any request; throws an AbortError when `signal` aborts. The LM head does not run,
   * and no request's cached K/V is reused or changed. Optional: test fakes need not embed.
   */
  embed?(inputs: readonly (readonly number[])[], options?: { signal?: AbortSignal }): Promise<Float32Array[]>;
}

// ---- Sessions: one prefill shared by several sequences (n, best_of), with logprobs ----

export interface SessionRequest {
  promptTokens: readonly number[];
  /** Sampling shared by the sequences; sequence j draws from its own stream seeded by (seed, j). */
  sampling: SamplingParams;
  /** How many top alternatives to report per token (0..20); undefined = none. */
  logprobs?: number;
  /** Also score the prompt (echo + logprobs): `promptLogprobs` is then filled. */
  promptLogprobs?: boolean;
  /**
   * Whether the prompt may reuse K/V cached from earlier requests, and leave its own for later
   * ones (default true; llama.cpp's `cache_prompt`). False: prefilled whole, and kept from no one.
   */
  cachePrompt?: boolean;
  /** How many sequences the caller will run at once (n, best_of): the session takes a slot for each, up to the engine's limit (default 1). */
  sequences?: number;
  signal?: AbortSignal;
}

export interface SequenceOptions {
  /** The sequence's number within the session (choice index); seeds its random stream. */
  index: number;
  maxTokens: number;
  /** Ids that end the sequence (not yielded). */
  stopTokenIds: readonly number[];
  /** Stop ids are not sampled before this many tokens were generated (vLLM `min_tokens`). */
  minTokens?: number;
  /**
   * Structured output: every token comes from those the constraint allows (it is told each sampled
   * token; the caller disposes of it). Tokens it forces (jump-forward) are yielded with `forced:
   * true`, with their logprobs as if sampled, and count toward maxTokens. The sequence ends with
   * 'stop' when the constraint allows nothing but stop ids, or nothing at all, or forces a stop id:
   * the structure is complete (no stop id is sampled then).
   */
  constraint?: TokenConstraint;
}

export interface GenerationSession {
  /** Per prompt token, its logprob given the tokens before it (the first is null); when asked for. */
  readonly promptLogprobs: readonly (GeneratedToken | null)[] | undefined;
  /** Prompt tokens whose K/V was reused from earlier requests rather than prefilled (OpenAI's `cached_tokens`). */
  readonly cachedTokens: number;
  /**
   * Decodes one sequence from the shared prefill; sequences may run at once (as many as
   * SessionRequest.sequences, within the engine's limit; more wait for one to end). Returns 'stop'
   * when a stop id is sampled (not yielded) or the constraint ends the sequence, 'length' after
   * maxTokens tokens (0: none) or when prompt + generated tokens fill the context. Throws an AbortError at the next token once the
   * session's signal aborts; misuse (a closed session, a second sequence while one runs) throws
   * from the first next().
   */
  sequence(options: SequenceOptions): AsyncGenerator<GeneratedToken, FinishReason, void>;
  /** Ends the session and frees the GPU for the next request. Safe to call twice. */
  close(): void;
}
