// POST /v1/completions without the HTTP: a parsed JSON body in, an OpenAI completion (or an
// async iterable of chunks) out. Every host goes through handler.ts, which calls this.
// Browser code: nothing here may import Node modules.
//
// Sampling order (the engine applies it; this layer maps the parameters onto SamplingParams):
//   logit_bias -> repetition_penalty, presence_penalty, frequency_penalty -> temperature
//   -> top_k -> top_p -> min_p -> draw        (temperature 0: greedy, the argmax)
import { usableVocabSize, type FinishReason, type ModelInfo, type SamplingParams, type TextGenerator } from '../engine/types.ts';
import { ApiError, invalidRequest, modelNotFound } from './errors.ts';
import { appendEntries, toLegacyLogprobs, type CompletionLogprobs, type LogprobEntry } from './logprobs.ts';
import { validateCompletionRequest, type CompletionParams, type ServiceTier } from './schema.ts';
import { runPrompt, type ChoiceSettings, type PromptPlan, type SequencePiece } from './stream.ts';
import { compileRequestStructure, requestStructure, type RequestStructure, type StructureCompiler } from './structured-output.ts';

export type { CompletionRequest, CompletionParams, CompletionExtensions, ServiceTier } from './schema.ts';
export type { CompletionLogprobs } from './logprobs.ts';
export type { ResponseFormat, StructuredOutputExtensions } from './structured-output.ts';

/** How a request runs: `signal` aborts it; `compileStructuredOutput` compiles its structure (default: src/grammar's). */
export interface RequestOptions {
  signal?: AbortSignal;
  compileStructuredOutput?: StructureCompiler;
}

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** cached_tokens: prompt tokens whose K/V was reused from earlier requests (not prefilled). */
  prompt_tokens_details: { cached_tokens: number };
}

/** The usage of a request whose prompts have `promptTokens` tokens, `cachedTokens` of them cached. */
export function usageOf(promptTokens: number, cachedTokens: number, completionTokens: number): CompletionUsage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

export interface CompletionChoice {
  text: string;
  index: number;
  /** With `logprobs`: the legacy shape (see logprobs.ts); null otherwise. */
  logprobs: CompletionLogprobs | null;
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
  /** The tier used: the requested one, 'default' for 'auto'. */
  service_tier: ServiceTier;
  system_fingerprint?: string;
  choices: CompletionChoice[];
  usage: CompletionUsage;
}

export interface CompletionChunkChoice {
  text: string;
  /** The choice this piece belongs to (prompt position x n + j). */
  index: number;
  /** With `logprobs`: the entries of the tokens whose text this chunk carries (offsets into the whole choice text). */
  logprobs: CompletionLogprobs | null;
  /** null on every chunk of a choice but its last. */
  finish_reason: FinishReason | null;
}

/**
 * One streamed chunk, one choice's piece. Every chunk of a response has the same id and created.
 * The choices of a request come one after another (each ends with its own finish_reason); with
 * stream_options.include_usage, every chunk has `usage: null` and one more chunk follows with
 * `choices: []` and the usage.
 */
export interface CompletionChunk {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  service_tier: ServiceTier;
  system_fingerprint?: string;
  choices: CompletionChunkChoice[];
  usage?: CompletionUsage | null;
}

/** Whether `model` names the loaded model (its id or an alias). */
export function modelMatches(info: ModelInfo, model: string): boolean {
  return model === info.id || info.aliases.includes(model);
}

/** `prefix` and `length` random alphanumerics. */
export function randomId(prefix: string, length: number): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  let id = prefix;
  for (const b of bytes) id += alphabet[b % alphabet.length];
  return id;
}

/** A fresh completion id: 'cmpl-' and 24 random alphanumerics. */
export function newCompletionId(): string {
  return randomId('cmpl-', 24);
}

/** Everything a validated request needs to run: prompts tokenized and checked, shared settings. */
export interface CompletionPlan {
  prompts: PromptPlan[];
  settings: ChoiceSettings;
  n: number;
  bestOf: number;
  /** The structure the output must have; null: none. */
  structure: RequestStructure | null;
}

function contextExceeded(message: string, param: string): ApiError {
  return new ApiError(400, message, { param, code: 'context_length_exceeded' });
}

/** The token ids of `ids` outside the vocabulary, as a 400 naming `param`. */
function checkVocabulary(ids: Iterable<number>, vocabSize: number, param: string, what: string): void {
  for (const id of ids) {
    if (id >= vocabSize) {
      throw invalidRequest(
        `Invalid '${param}': ${what} ${id} is outside the model's vocabulary (token ids are 0..${vocabSize - 1}).`,
        param,
        'invalid_value',
      );
    }
  }
}

/**
 * Temperatures below this are greedy (vLLM's epsilon): 1/T would overflow f32 on the GPU, or a
 * subnormal T be flushed to 0 by some GPUs and not others; the distribution is one-hot long before.
 */
export const MIN_SAMPLING_TEMPERATURE = 1e-5;

/** The sampling parameters of the engine contract, from the request's. */
export function samplingParams(params: SharedSamplingParams): SamplingParams {
  return {
    temperature: params.temperature < MIN_SAMPLING_TEMPERATURE ? 0 : params.temperature,
    topP: params.top_p,
    ...(params.seed === null ? {} : { seed: params.seed }),
    topK: params.top_k > 0 ? params.top_k : 0,
    minP: params.min_p,
    repetitionPenalty: params.repetition_penalty,
    presencePenalty: params.presence_penalty,
    frequencyPenalty: params.frequency_penalty,
    ...(params.logit_bias && params.logit_bias.size > 0 ? { logitBias: new Map(params.logit_bias) } : {}),
  };
}

/**
 * What an empty prompt (text that encodes to no token: no BOS is added) starts from: the
 * beginning of a new document, as OpenAI's API documents it. That is BOS where the tokenizer has
 * one, else its end-of-text token, which separates a model's training documents (Qwen2's
 * <|endoftext|>, as GPT's).
 */
function documentStart(tokenizer: TextGenerator['tokenizer'], vocabSize: number, which: string): number[] {
  const start = tokenizer.bosId ?? tokenizer.eosIds[0];
  if (start === undefined || start >= vocabSize) {
    throw invalidRequest(`The prompt${which} is empty, and the tokenizer has no BOS or EOS token to start a document from.`, 'prompt', 'invalid_value');
  }
  return [start];
}

/** How context errors name the prompt: completions' "your prompt (prompt 1)", chat's "your messages". */
export interface PromptWording {
  /** "your prompt is 12 tokens" / "your messages resulted in 12 tokens". */
  size(tokens: number): string;
  /** "in your prompt" / "in the messages". */
  within: string;
  /** The parameters a context error names: the prompt's, and the token limit's. */
  promptParam: string;
  maxTokensParam: string;
}

/**
 * One prompt's plan: its tokens checked against the context (prompt + maxTokens must fit: 400
 * context_length_exceeded naming both numbers). maxTokens null: the rest of the context.
 */
export function planPrompt(generator: TextGenerator, tokens: number[], text: string | null, maxTokens: number | null, wording: PromptWording): PromptPlan {
  const context = generator.info.contextLength;
  const n = tokens.length;
  if (maxTokens === null) {
    if (n >= context) {
      throw contextExceeded(
        `This model's maximum context length is ${context} tokens, however ${wording.size(n)}, which leaves no room for the completion. Please reduce the length of the ${wording.promptParam}.`,
        wording.promptParam,
      );
    }
    return { tokens, text, maxTokens: context - n };
  }
  if (n + maxTokens > context) {
    throw contextExceeded(
      `This model's maximum context length is ${context} tokens, however you requested ${n + maxTokens} tokens (${n} ${wording.within}; ${maxTokens} for the completion). Please reduce your ${wording.promptParam} or completion length.`,
      wording.maxTokensParam,
    );
  }
  return { tokens, text, maxTokens };
}

/** The request parameters every endpoint maps onto the engine's settings alike. */
export type SharedSamplingParams = Pick<
  CompletionParams,
  | 'temperature' | 'top_p' | 'seed' | 'top_k' | 'min_p' | 'repetition_penalty' | 'presence_penalty' | 'frequency_penalty' | 'logit_bias'
  | 'stop_token_ids' | 'ignore_eos' | 'min_tokens' | 'stop' | 'include_stop_str_in_output' | 'skip_special_tokens' | 'cache_prompt'
>;

/**
 * The settings the engine gets, with logit_bias and stop_token_ids ids checked against the
 * vocabulary. `sequences`: candidates per prompt; `logprobs`: alternatives per token, or null.
 */
export function choiceSettings(
  generator: TextGenerator,
  params: SharedSamplingParams,
  run: { sequences: number; logprobs: number | null; echo: boolean },
): ChoiceSettings {
  const vocabSize = usableVocabSize(generator);
  if (params.logit_bias) checkVocabulary(params.logit_bias.keys(), vocabSize, 'logit_bias', 'token id');
  checkVocabulary(params.stop_token_ids, vocabSize, 'stop_token_ids', 'token id');
  const stopTokenIds = [...new Set([...(params.ignore_eos ? [] : generator.tokenizer.eosIds), ...params.stop_token_ids])];
  return {
    sampling: samplingParams(params),
    sequences: run.sequences,
    stopTokenIds,
    minTokens: params.min_tokens,
    stop: params.stop,
    includeStop: params.include_stop_str_in_output,
    skipSpecialTokens: params.skip_special_tokens,
    logprobs: run.logprobs,
    echo: run.echo,
    cachePrompt: params.cache_prompt,
  };
}

/** Token ids of a prompt outside the vocabulary: a 400 naming `param`. */
export function checkPromptVocabulary(generator: TextGenerator, tokens: readonly number[], param: string, what: string): void {
  checkVocabulary(tokens, usableVocabSize(generator), param, what);
}

/**
 * Prompts tokenized and checked against the vocabulary and the context (see planPrompt), the
 * settings the engine gets, and the structure asked for (not compiled yet).
 */
export function planCompletion(generator: TextGenerator, params: CompletionParams): CompletionPlan {
  const { tokenizer } = generator;
  const vocabSize = usableVocabSize(generator);
  const batch = params.prompt.length > 1;
  const prompts = params.prompt.map((input, i): PromptPlan => {
    const which = batch ? ` (prompt ${i})` : '';
    let tokens: number[];
    if ('tokens' in input) {
      checkVocabulary(input.tokens, vocabSize, 'prompt', `token id${which}`);
      tokens = input.tokens;
    } else {
      tokens = tokenizer.encode(input.text);
      checkVocabulary(tokens, vocabSize, 'prompt', `token id${which} (from the prompt's text)`);
    }
    if (tokens.length === 0) tokens = documentStart(tokenizer, vocabSize, which);
    return planPrompt(generator, tokens, 'text' in input ? input.text : null, params.max_tokens, {
      size: (n) => `your prompt${which} is ${n} tokens`,
      within: `in your prompt${which}`,
      promptParam: 'prompt',
      maxTokensParam: 'max_tokens',
    });
  });
  const bestOf = params.best_of ?? params.n;
  return {
    prompts,
    n: params.n,
    bestOf,
    settings: choiceSettings(generator, params, { sequences: bestOf, logprobs: params.logprobs, echo: params.echo }),
    structure: requestStructure(params),
  };
}

/**
 * Creates a completion. `body` is the parsed JSON request body. Validation, the model check,
 * tokenization and the compile of a structured output happen before this resolves (nothing has
 * been queued for the GPU then), so their errors (ApiError: 400, 404) reject it;
 * generation errors reject it too (non-stream) or are thrown by the iterable (stream). With
 * `stream: true` it resolves to an async iterable of chunks whose generation starts on the first
 * next(); ending the iteration early (return()) ends the generation. `signal` aborts it (an
 * AbortError) at the next token.
 */
export async function createCompletion(
  generator: TextGenerator,
  body: unknown,
  options: RequestOptions = {},
): Promise<CompletionResponse | AsyncIterable<CompletionChunk>> {
  const params = validateCompletionRequest(body);
  const info = generator.info;
  if (!modelMatches(info, params.model)) throw modelNotFound(params.model);
  const plan = planCompletion(generator, params);
  if (plan.structure) plan.settings.structure = await compileRequestStructure(generator, plan.structure, options.compileStructuredOutput);
  const meta = {
    id: newCompletionId(),
    object: 'text_completion' as const,
    created: Math.floor(Date.now() / 1000),
    model: info.id,
    service_tier: (params.service_tier === 'auto' ? 'default' : params.service_tier) as ServiceTier,
  };
  const promptTokens = plan.prompts.reduce((sum, p) => sum + p.tokens.length, 0);
  const usage = (completionTokens: number, cachedTokens: number): CompletionUsage => usageOf(promptTokens, cachedTokens, completionTokens);

  if (params.stream) {
    const includeUsage = params.stream_options?.include_usage ?? false;
    return streamChunks(generator, plan, meta, usage, includeUsage, options.signal);
  }

  options.signal?.throwIfAborted();
  const choices: CompletionChoice[] = [];
  let completionTokens = 0;
  let cachedTokens = 0;
  for (const [position, prompt] of plan.prompts.entries()) {
    const candidates = Array.from({ length: plan.bestOf }, () => ({ text: '', entries: [] as LogprobEntry[], end: null as SequencePiece['end'] | null }));
    for await (const piece of runPrompt(generator, prompt, plan.settings, options.signal)) {
      const candidate = candidates[piece.sequence]!;
      candidate.text += piece.text;
      appendEntries(candidate.entries, piece.entries);
      if (piece.end) candidate.end = piece.end;
    }
    const ranked = candidates.map((c, j) => ({ ...c, j, end: c.end! }));
    for (const c of ranked) completionTokens += c.end.completionTokens;
    cachedTokens += ranked[0]!.end.cachedTokens;
    if (plan.bestOf > plan.n) {
      // best_of: the n with the highest mean token logprob, best first (the lower index on ties);
      // a candidate without tokens has no mean and comes last.
      const mean = (c: (typeof ranked)[number]) => (c.end.completionTokens > 0 ? c.end.logprobSum / c.end.completionTokens : -Infinity);
      ranked.sort((a, b) => mean(b) - mean(a) || a.j - b.j);
    }
    ranked.slice(0, plan.n).forEach((c, rank) => {
      choices.push({
        text: c.text,
        index: position * plan.n + rank,
        logprobs: plan.settings.logprobs === null ? null : toLegacyLogprobs(c.entries),
        finish_reason: c.end.finishReason,
      });
    });
  }
  return { ...meta, choices, usage: usage(completionTokens, cachedTokens) };
}

type ChunkMeta = Pick<CompletionChunk, 'id' | 'object' | 'created' | 'model' | 'service_tier'>;

async function* streamChunks(
  generator: TextGenerator,
  plan: CompletionPlan,
  meta: ChunkMeta,
  usage: (completionTokens: number, cachedTokens: number) => CompletionUsage,
  includeUsage: boolean,
  signal: AbortSignal | undefined,
): AsyncGenerator<CompletionChunk, void, void> {
  // With stream, best_of is n (validation refuses more): sequence j is choice j.
  let completionTokens = 0;
  let cachedTokens = 0;
  for (const [position, prompt] of plan.prompts.entries()) {
    for await (const piece of runPrompt(generator, prompt, plan.settings, signal)) {
      if (piece.end) completionTokens += piece.end.completionTokens;
      if (piece.end && piece.sequence === 0) cachedTokens += piece.end.cachedTokens;
      yield {
        ...meta,
        choices: [
          {
            text: piece.text,
            index: position * plan.n + piece.sequence,
            logprobs: plan.settings.logprobs === null ? null : toLegacyLogprobs(piece.entries),
            finish_reason: piece.end?.finishReason ?? null,
          },
        ],
        ...(includeUsage ? { usage: null } : {}),
      };
    }
  }
  if (includeUsage) yield { ...meta, choices: [], usage: usage(completionTokens, cachedTokens) };
}
