// The request parameters of POST /v1/completions: ONE table (COMPLETION_PARAMS) of name, type,
// range, default and nullability that validation runs over. A parameter is a row here and a use
// in completions.ts. vLLM's extensions (top_k, min_p, ..., guided_json) are rows too: they are
// accepted at the top level and inside `extra_body`, whose keys count as top-level parameters.
// The structured-output rows come from structured-output.ts, which chat shares.
// Browser code: nothing here may import Node modules.
import { invalidRequest } from './errors.ts';
import { clipText } from './excerpt.ts';
import {
  boolean,
  integer,
  isPlainObject,
  jsonType,
  number,
  object,
  row,
  string,
  tokenIdArray,
  validateParams,
  wrongType,
  type ParamRow,
  type TableParams,
} from './params.ts';
import { STRUCTURED_OUTPUT_PARAMS, type ResponseFormat, type StructuredOutputExtensions } from './structured-output.ts';

export type { ParamRow } from './params.ts';

// ---- the table ----------------------------------------------------------------------------------

export interface StreamOptions {
  include_usage: boolean;
}

/** One prompt of the request: text to tokenize, or token ids as given. */
export type PromptInput = { text: string } | { tokens: number[] };

/** The service tiers a request may ask for ('over-limit' only ever appears in responses). */
export type RequestServiceTier = 'auto' | 'default' | 'flex' | 'no-limit';
/** The service tier a response names. */
export type ServiceTier = 'default' | 'flex' | 'no-limit' | 'over-limit';

export const MAX_STOP_STRINGS = 4;
/** Most alternatives `logprobs` may ask for (OpenAI: 5; vLLM: 20). */
export const MAX_LOGPROBS = 20;
export const MAX_N = 128;
export const MAX_BEST_OF = 20;

/**
 * Every request body field of POST /v1/completions. A field not in this table is rejected (400).
 * Validation (validateCompletionRequest) runs each row: absent → `default`; null → `nullValue`
 * (or `default`) when `nullable`; otherwise `parse`, then `supported`. Rows marked `extension`
 * are vLLM's sampling parameters (OpenAI clients send them in `extra_body`).
 */
export const COMPLETION_PARAMS = {
  model: row<string>({
    type: 'string',
    required: true,
    nullable: false,
    default: '',
    parse: string().parse,
    doc: 'ID (or alias) of the loaded model; another id is answered with 404 model_not_found.',
  }),
  prompt: row<PromptInput[]>({
    type: 'string, array of strings, array of token ids, or array of arrays of token ids',
    nullable: true,
    default: [{ text: '' }],
    parse(value, param) {
      if (typeof value === 'string') return [{ text: value }];
      if (!Array.isArray(value)) wrongType(param, 'a string, an array of strings, or token ids', value);
      if (value.length === 0) throw invalidRequest(`Invalid '${param}': the array is empty.`, param, 'invalid_value');
      if (value.every((v) => typeof v === 'string')) return (value as string[]).map((text) => ({ text }));
      if (value.every((v) => typeof v === 'number')) return [{ tokens: tokenIdArray(value, param, param) }];
      if (value.every((v) => Array.isArray(v))) {
        return value.map((ids: unknown[], i) => {
          if (ids.length === 0) throw invalidRequest(`Invalid '${param}': ${param}[${i}] is an empty array of token ids.`, param, 'invalid_value');
          return { tokens: tokenIdArray(ids, param, `${param}[${i}]`) };
        });
      }
      wrongType(param, 'a string, an array of strings, an array of token ids, or an array of arrays of token ids (not a mix)', value);
    },
    doc:
      'The text to complete, or a batch: several strings or token-id arrays. Text gets BOS when the model wants it; token ids are used as given. ' +
      'A batch yields n choices per prompt, in order (index = prompt position x n + j).',
  }),
  suffix: row<string | null>({
    ...string(),
    nullable: true,
    default: null,
    supported: {
      test: (v) => v === null || v === '',
      only: 'only null or ""',
      error: (param) =>
        invalidRequest(
          "Llama models have no fill-in-the-middle, so 'suffix' is not supported: send it empty or null, and put the text to complete in 'prompt'.",
          param,
          'unsupported_value',
        ),
    },
    doc: 'Text after the completion (fill-in-the-middle). Llama models have no fill-in-the-middle: only null or "" is accepted.',
  }),
  max_tokens: row<number | null>({
    ...integer({ min: 0 }),
    nullable: true,
    default: 16,
    nullValue: null,
    doc: 'Most tokens to generate per choice (default 16); null = until EOS or the context is full; 0 generates nothing (with echo: scores the prompt). Prompt + max_tokens must fit the context.',
  }),
  temperature: row<number>({
    ...number({ min: 0, max: 2 }),
    nullable: true,
    default: 1,
    doc: 'Sampling temperature; 0 (or below 1e-5) = greedy (argmax).',
  }),
  top_p: row<number>({
    ...number({ min: 0, max: 1 }),
    nullable: true,
    default: 1,
    doc: 'Nucleus sampling: keep the smallest set of most likely tokens holding top_p of the probability mass; 0 keeps the most likely token alone (as OpenAI accepts it).',
  }),
  n: row<number>({
    ...integer({ min: 1, max: MAX_N }),
    nullable: true,
    default: 1,
    doc: 'Choices per prompt. Each has its own random stream (seed, choice index); all of a prompt share one prefill.',
  }),
  best_of: row<number | null>({
    ...integer({ min: 1, max: MAX_BEST_OF }),
    nullable: true,
    default: null,
    doc: 'Candidates generated per prompt (>= n, default n); the n with the highest mean token logprob are returned. Not with stream (unless equal to n).',
  }),
  stream: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    doc: 'Answer with server-sent events, one chunk per piece of text (each naming its choice index), ending with [DONE].',
  }),
  stream_options: row<StreamOptions | null>({
    type: 'object {include_usage: boolean, include_obfuscation: boolean}',
    nullable: true,
    default: null,
    parse(value, param) {
      if (!isPlainObject(value)) wrongType(param, 'an object', value);
      const out: StreamOptions = { include_usage: false };
      for (const [key, v] of Object.entries(value)) {
        if (key !== 'include_usage' && key !== 'include_obfuscation') {
          throw invalidRequest(
            `Unrecognized field '${param}.${clipText(key)}'; only 'include_usage' and 'include_obfuscation' are known.`,
            `${param}.${clipText(key)}`,
            'unknown_parameter',
          );
        }
        if (v === null) continue;
        const on = boolean().parse(v, `${param}.${key}`);
        if (key === 'include_usage') out.include_usage = on;
      }
      return out;
    },
    doc: 'Only with stream: {include_usage: true} sends one more chunk before [DONE] with `choices: []` and the usage. include_obfuscation (the openai client\'s type has it) is accepted and has no effect: nothing here crosses a network.',
  }),
  logprobs: row<number | null>({
    ...integer({ min: 0, max: MAX_LOGPROBS }),
    nullable: true,
    default: null,
    doc:
      'Log probabilities (log-softmax of the raw logits, before bias, penalties and temperature) of each chosen token and of the `logprobs` most likely ones; ' +
      'the chosen token is always among them, so there may be logprobs+1 entries. 0 = the chosen token only.',
  }),
  echo: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    doc: 'Put the prompt before the completion in `text`; with logprobs, the prompt tokens get logprobs too (the first one null).',
  }),
  stop: row<string[]>({
    type: `string or array of up to ${MAX_STOP_STRINGS} strings`,
    nullable: true,
    default: [],
    parse(value, param) {
      const list = typeof value === 'string' ? [value] : value;
      if (!Array.isArray(list)) wrongType(param, 'a string or an array of strings', value);
      if (list.length > MAX_STOP_STRINGS) {
        throw invalidRequest(`Invalid '${param}': at most ${MAX_STOP_STRINGS} stop strings are allowed, got ${list.length}.`, param, 'array_above_max_length');
      }
      list.forEach((s, i) => {
        if (typeof s !== 'string') {
          throw invalidRequest(`Invalid type for '${param}[${i}]': expected a string, but got ${jsonType(s)} instead.`, param, 'invalid_type');
        }
      });
      // An empty stop string would match everywhere; it stops nothing.
      return (list as string[]).filter((s) => s.length > 0);
    },
    doc: 'Up to 4 strings; generation ends at the first of them, which is not returned (unless include_stop_str_in_output).',
  }),
  presence_penalty: row<number>({
    ...number({ min: -2, max: 2 }),
    nullable: true,
    default: 0,
    doc: 'logit[j] -= presence_penalty for every token j already generated (OpenAI).',
  }),
  frequency_penalty: row<number>({
    ...number({ min: -2, max: 2 }),
    nullable: true,
    default: 0,
    doc: 'logit[j] -= count[j] x frequency_penalty, count over the tokens generated so far (OpenAI).',
  }),
  logit_bias: row<ReadonlyMap<number, number> | null>({
    type: 'object mapping token ids (string keys) to numbers in [-100, 100]',
    nullable: true,
    default: null,
    parse(value, param) {
      if (!isPlainObject(value)) wrongType(param, 'an object', value);
      const out = new Map<number, number>();
      for (const [key, bias] of Object.entries(value)) {
        if (!/^(0|[1-9]\d*)$/.test(key) || !Number.isSafeInteger(Number(key))) {
          throw invalidRequest(`Invalid '${param}': key '${clipText(key)}' is not a token id.`, param, 'invalid_value');
        }
        out.set(Number(key), number({ min: -100, max: 100 }).parse(bias, `${param}.${key}`));
      }
      return out;
    },
    doc: 'Bias added to the logits of the given token ids before anything else; -100 bans a token, +100 forces it. Ids must be in the vocabulary.',
  }),
  seed: row<number | null>({
    ...integer(),
    nullable: true,
    default: null,
    doc: 'Seed of the random streams: choice j draws from a stream seeded by (seed, j). The same seed, prompt and parameters give the same text.',
  }),
  user: row<string | null>({
    ...string(),
    nullable: true,
    default: null,
    doc: 'An end-user id; accepted and ignored.',
  }),
  service_tier: row<RequestServiceTier>({
    type: "'auto', 'default', 'flex' or 'no-limit'",
    nullable: true,
    default: 'auto',
    parse(value, param) {
      if (typeof value !== 'string') wrongType(param, 'a string', value);
      if (value === 'over-limit') {
        throw invalidRequest(`Invalid '${param}': 'over-limit' cannot be requested; it only appears in responses.`, param, 'invalid_value');
      }
      if (value !== 'auto' && value !== 'default' && value !== 'flex' && value !== 'no-limit') {
        throw invalidRequest(`Invalid '${param}': expected one of 'auto', 'default', 'flex', 'no-limit', but got '${clipText(value)}'.`, param, 'invalid_value');
      }
      return value;
    },
    doc: "The tier; every tier runs the same way. The response names it ('auto' answers 'default').",
  }),
  extra_body: row<Record<string, unknown> | null>({
    ...object(),
    type: 'object of further parameters',
    nullable: true,
    default: null,
    doc: 'Its keys are treated as top-level parameters (top_k, min_p, ...); unknown keys are a 400.',
  }),
  top_k: row<number>({
    ...integer({ min: -1 }),
    nullable: true,
    default: 0,
    extension: true,
    doc: 'Keep the top_k most likely tokens; 0 or -1 disables it (vLLM).',
  }),
  min_p: row<number>({
    ...number({ min: 0, max: 1 }),
    nullable: true,
    default: 0,
    extension: true,
    doc: 'Drop tokens whose probability is below min_p x that of the most likely one; 0 disables it (vLLM).',
  }),
  repetition_penalty: row<number>({
    ...number({ min: 0, exclusiveMin: true }),
    nullable: true,
    default: 1,
    extension: true,
    doc: 'Over prompt and generated tokens: logit / p if positive, logit x p otherwise; 1 disables it (vLLM / HF).',
  }),
  ignore_eos: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    extension: true,
    doc: 'Keep generating after EOS (stop_token_ids still stop) (vLLM).',
  }),
  min_tokens: row<number>({
    ...integer({ min: 0 }),
    nullable: true,
    default: 0,
    extension: true,
    doc: 'EOS, stop_token_ids and stop strings take effect only once this many tokens were generated (vLLM).',
  }),
  cache_prompt: row<boolean>({
    ...boolean(),
    nullable: true,
    default: true,
    extension: true,
    doc: "Reuse the K/V of a cached prompt prefix (earlier requests' prompts and completions) and leave this one's for later requests; false prefills the whole prompt and keeps nothing (llama.cpp's name). `usage.prompt_tokens_details.cached_tokens` counts the reused tokens.",
  }),
  stop_token_ids: row<number[]>({
    type: 'array of token ids',
    nullable: true,
    default: [],
    extension: true,
    parse: (value, param) => tokenIdArray(value, param, param),
    doc: 'Token ids that end the choice with finish_reason "stop", besides EOS; their text is not returned (vLLM).',
  }),
  skip_special_tokens: row<boolean>({
    ...boolean(),
    nullable: true,
    default: true,
    extension: true,
    doc: 'Leave special tokens (BOS, EOS, ...) out of the text (vLLM; default true).',
  }),
  include_stop_str_in_output: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    extension: true,
    doc: 'Keep the stop string that ended the text in it (vLLM).',
  }),
  // Structured output: response_format (as vLLM takes it here too), guided_*, structured_outputs.
  ...STRUCTURED_OUTPUT_PARAMS,
} satisfies Record<string, ParamRow<unknown>>;

/** A validated request: every parameter present, defaults filled in, values normalized (extra_body merged in). */
export type CompletionParams = TableParams<typeof COMPLETION_PARAMS>;

/** vLLM's extensions (sampling, structured output), as a TypeScript caller writes them (top level or in extra_body). */
export interface CompletionExtensions extends StructuredOutputExtensions {
  top_k?: number | null;
  min_p?: number | null;
  repetition_penalty?: number | null;
  ignore_eos?: boolean | null;
  min_tokens?: number | null;
  cache_prompt?: boolean | null;
  stop_token_ids?: number[] | null;
  skip_special_tokens?: boolean | null;
  include_stop_str_in_output?: boolean | null;
}

/** The request body, as a TypeScript caller writes it (OpenAI's names and types, and vLLM's extensions). */
export interface CompletionRequest extends CompletionExtensions {
  model: string;
  prompt?: string | string[] | number[] | number[][] | null;
  suffix?: string | null;
  max_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  n?: number | null;
  best_of?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  logprobs?: number | null;
  echo?: boolean | null;
  stop?: string | string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
  seed?: number | null;
  user?: string | null;
  service_tier?: RequestServiceTier | null;
  response_format?: ResponseFormat | null;
  extra_body?: (CompletionExtensions & Partial<Omit<CompletionRequest, 'extra_body'>>) | null;
}

// The request type and the table name the same fields (a compile error here means one lacks a row).
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never] ? true : never;
const _requestMatchesTable: SameKeys<CompletionRequest, typeof COMPLETION_PARAMS> = true;
void _requestMatchesTable;

/**
 * Checks a parsed JSON body against COMPLETION_PARAMS (see validateParams) and returns every
 * parameter normalized. Throws a 400 ApiError: anything validateParams refuses, or a bad
 * combination (stream_options without stream, best_of < n, best_of with stream, min_tokens >
 * max_tokens).
 */
export function validateCompletionRequest(body: unknown): CompletionParams {
  const { params, named } = validateParams(COMPLETION_PARAMS, body);
  if (params.stream_options !== null && !params.stream) {
    throw invalidRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", named('stream_options'), 'invalid_value');
  }
  if (params.best_of !== null && params.best_of < params.n) {
    throw invalidRequest(
      `Invalid 'best_of': it must be at least n (${params.n}), but got ${params.best_of}.`,
      named('best_of'),
      'invalid_value',
    );
  }
  if (params.stream && params.best_of !== null && params.best_of > params.n) {
    throw invalidRequest(
      "'best_of' cannot be used with 'stream': the best completions are only known once all are done. Drop best_of, or set stream to false.",
      named('best_of'),
      'invalid_value',
    );
  }
  if (params.max_tokens !== null && params.min_tokens > params.max_tokens) {
    throw invalidRequest(
      `Invalid 'min_tokens': ${params.min_tokens} is more than max_tokens (${params.max_tokens}).`,
      named('min_tokens'),
      'invalid_value',
    );
  }
  return params;
}
