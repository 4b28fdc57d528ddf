// POST /v1/completions without the HTTP: a parsed JSON body in, an OpenAI completion (or an
// async iterable of chunks) out. Every host goes through handler.ts, which calls this.
// Browser code: nothing here may import Node modules.
import type { FinishReason, ModelInfo, TextGenerator } from '../engine/types.ts';
import { ApiError, invalidRequest, modelNotFound } from './errors.ts';
import { validateCompletionRequest, type CompletionParams } from './schema.ts';
import { generateText, type TextGenerationRequest } from './stream.ts';

export type { CompletionRequest, CompletionParams } from './schema.ts';

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface CompletionChoice {
  text: string;
  index: number;
  /** Always null until `logprobs` is supported. */
  logprobs: null;
  finish_reason: FinishReason;
}

export interface CompletionResponse {
  /** 'cmpl-…' */
  id: string;
  object: 'text_completion';
  /** Unix seconds. */
  created: number;
  /** The model's id (also when the request named an alias). */
  model: string;
  service_tier: 'default';
  system_fingerprint?: string;
  choices: CompletionChoice[];
  usage: CompletionUsage;
}

export interface CompletionChunkChoice {
  text: string;
  index: number;
  logprobs: null;
  /** null on every chunk but the last one with choices. */
  finish_reason: FinishReason | null;
}

/**
 * One streamed chunk. Every chunk of a response has the same id and created. The last chunk
 * with choices has the finish_reason; with stream_options.include_usage, every chunk has
 * `usage: null` and one more chunk follows with `choices: []` and the usage.
 */
export interface CompletionChunk {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  service_tier: 'default';
  system_fingerprint?: string;
  choices: CompletionChunkChoice[];
  usage?: CompletionUsage | null;
}

/** Whether `model` names the loaded model (its id or an alias). */
export function modelMatches(info: ModelInfo, model: string): boolean {
  return model === info.id || info.aliases.includes(model);
}

/** A fresh completion id: 'cmpl-' and 24 random alphanumerics. */
export function newCompletionId(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  let id = 'cmpl-';
  for (const b of bytes) id += alphabet[b % alphabet.length];
  return id;
}

/** Prompt tokens and the token budget of a validated request, checked against the context. */
function planGeneration(generator: TextGenerator, params: CompletionParams): { promptTokens: number[]; maxTokens: number } {
  const promptTokens = generator.tokenizer.encode(params.prompt);
  const context = generator.info.contextLength;
  const n = promptTokens.length;
  if (n === 0) {
    throw invalidRequest('The prompt is empty and the model has no BOS token to start from.', 'prompt', 'invalid_value');
  }
  if (params.max_tokens === null) {
    if (n >= context) {
      throw new ApiError(
        400,
        `This model's maximum context length is ${context} tokens, however your prompt is ${n} tokens, which leaves no room for the completion. Please reduce the length of the prompt.`,
        { param: 'prompt', code: 'context_length_exceeded' },
      );
    }
    return { promptTokens, maxTokens: context - n };
  }
  if (n + params.max_tokens > context) {
    throw new ApiError(
      400,
      `This model's maximum context length is ${context} tokens, however you requested ${n + params.max_tokens} tokens (${n} in your prompt; ${params.max_tokens} for the completion). Please reduce your prompt or completion length.`,
      { param: 'max_tokens', code: 'context_length_exceeded' },
    );
  }
  return { promptTokens, maxTokens: params.max_tokens };
}

/**
 * Creates a completion. `body` is the parsed JSON request body. Validation, the model check and
 * tokenization happen before this resolves, so their errors (ApiError: 400, 404) reject it;
 * generation errors reject it too (non-stream) or are thrown by the iterable (stream). With
 * `stream: true` it resolves to an async iterable of chunks whose generation starts on the first
 * next(); ending the iteration early (return()) ends the generation. `signal` aborts it (an
 * AbortError).
 */
export async function createCompletion(
  generator: TextGenerator,
  body: unknown,
  options: { signal?: AbortSignal } = {},
): Promise<CompletionResponse | AsyncIterable<CompletionChunk>> {
  const params = validateCompletionRequest(body);
  const info = generator.info;
  if (!modelMatches(info, params.model)) throw modelNotFound(params.model);
  const { promptTokens, maxTokens } = planGeneration(generator, params);
  const request: TextGenerationRequest = {
    promptTokens,
    maxTokens,
    sampling: {
      temperature: params.temperature,
      topP: params.top_p,
      ...(params.seed === null ? {} : { seed: params.seed }),
    },
    stopTokenIds: generator.tokenizer.eosIds,
    stop: params.stop,
    ...(options.signal ? { signal: options.signal } : {}),
  };
  const meta = {
    id: newCompletionId(),
    object: 'text_completion' as const,
    created: Math.floor(Date.now() / 1000),
    model: info.id,
    service_tier: 'default' as const,
  };
  const usage = (completionTokens: number): CompletionUsage => ({
    prompt_tokens: promptTokens.length,
    completion_tokens: completionTokens,
    total_tokens: promptTokens.length + completionTokens,
  });

  if (params.stream) {
    const includeUsage = params.stream_options?.include_usage ?? false;
    return streamChunks(generator, request, meta, usage, includeUsage);
  }

  options.signal?.throwIfAborted();
  const pieces = generateText(generator, request);
  let text = '';
  for (;;) {
    const step = await pieces.next();
    if (step.done) {
      const result = step.value;
      return {
        ...meta,
        choices: [{ text: text + result.text, index: 0, logprobs: null, finish_reason: result.finishReason }],
        usage: usage(result.completionTokens),
      };
    }
    text += step.value;
  }
}

type ChunkMeta = Pick<CompletionChunk, 'id' | 'object' | 'created' | 'model' | 'service_tier'>;

async function* streamChunks(
  generator: TextGenerator,
  request: TextGenerationRequest,
  meta: ChunkMeta,
  usage: (completionTokens: number) => CompletionUsage,
  includeUsage: boolean,
): AsyncGenerator<CompletionChunk, void, void> {
  const chunk = (text: string, finishReason: FinishReason | null): CompletionChunk => ({
    ...meta,
    choices: [{ text, index: 0, logprobs: null, finish_reason: finishReason }],
    ...(includeUsage ? { usage: null } : {}),
  });
  const pieces = generateText(generator, request);
  try {
    for (;;) {
      const step = await pieces.next();
      if (step.done) {
        const result = step.value;
        yield chunk(result.text, result.finishReason);
        if (includeUsage) yield { ...meta, choices: [], usage: usage(result.completionTokens) };
        return;
      }
      yield chunk(step.value, null);
    }
  } finally {
    // Ends the generation when the consumer stops early; a no-op once it has finished.
    await pieces.return({ finishReason: 'stop', completionTokens: 0, text: '' });
  }
}
