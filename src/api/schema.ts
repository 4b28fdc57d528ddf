// The request parameters of POST /v1/completions: ONE table (COMPLETION_PARAMS) of name, type,
// range, default and nullability that validation runs over. To support a parameter, add a row
// (or drop a row's `supported` limit) and use the value in completions.ts.
// Browser code: nothing here may import Node modules.
import { invalidRequest, notSupportedYet } from './errors.ts';

/** One parameter of the request body. */
export interface ParamRow<T> {
  /** JSON type, as error messages and docs say it ('integer', 'string or array of strings'). */
  type: string;
  /** Allowed range, as docs say it ('[0, 2]'); absent when any value of the type goes. */
  range?: string;
  /** Whether the field must be present (and not null). */
  required?: boolean;
  /** Whether `null` is accepted; it means `nullValue` (by default the default). */
  nullable: boolean;
  /** The value when the field is absent. */
  default: T;
  /** The value for an explicit `null`, where it differs from `default` (max_tokens: null = no limit). */
  nullValue?: T;
  /** Checks a present, non-null value and returns it normalized; throws a 400 ApiError naming `param`. */
  parse(value: unknown, param: string): T;
  /** Values this runtime implements; others are valid but answered with 400 "not supported yet". */
  supported?: { test(value: T): boolean; only: string };
  /** What the parameter does. */
  doc: string;
}

function row<T>(r: ParamRow<T>): ParamRow<T> {
  return r;
}

// ---- value checks -------------------------------------------------------------------------------

function jsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number') return Number.isFinite(value) ? (Number.isInteger(value) ? 'an integer' : 'a decimal') : String(value);
  if (typeof value === 'object') return 'an object';
  return `a ${typeof value}`;
}

function wrongType(param: string, expected: string, value: unknown): never {
  throw invalidRequest(`Invalid type for '${param}': expected ${expected}, but got ${jsonType(value)} instead.`, param, 'invalid_type');
}

interface Bounds {
  min?: number;
  max?: number;
  /** min itself is not allowed. */
  exclusiveMin?: boolean;
}

function rangeText(b: Bounds): string | undefined {
  if (b.min !== undefined && b.max !== undefined) return `${b.exclusiveMin ? '(' : '['}${b.min}, ${b.max}]`;
  if (b.min !== undefined) return `${b.exclusiveMin ? '>' : '>='} ${b.min}`;
  if (b.max !== undefined) return `<= ${b.max}`;
  return undefined;
}

function checkBounds(param: string, value: number, b: Bounds): number {
  const low = b.min !== undefined && (b.exclusiveMin ? value <= b.min : value < b.min);
  const high = b.max !== undefined && value > b.max;
  if (low || high) {
    throw invalidRequest(
      `Invalid '${param}': ${value} is out of range; expected a value in ${rangeText(b)}.`,
      param,
      low ? 'value_below_minimum' : 'value_above_maximum',
    );
  }
  return value;
}

function integer(b: Bounds = {}) {
  return {
    type: 'integer',
    range: rangeText(b),
    parse(value: unknown, param: string): number {
      if (typeof value !== 'number' || !Number.isSafeInteger(value)) wrongType(param, 'an integer', value);
      return checkBounds(param, value, b);
    },
  };
}

function number(b: Bounds = {}) {
  return {
    type: 'number',
    range: rangeText(b),
    parse(value: unknown, param: string): number {
      if (typeof value !== 'number' || !Number.isFinite(value)) wrongType(param, 'a number', value);
      return checkBounds(param, value, b);
    },
  };
}

function boolean() {
  return {
    type: 'boolean',
    parse(value: unknown, param: string): boolean {
      if (typeof value !== 'boolean') wrongType(param, 'a boolean', value);
      return value;
    },
  };
}

function string() {
  return {
    type: 'string',
    parse(value: unknown, param: string): string {
      if (typeof value !== 'string') wrongType(param, 'a string', value);
      return value;
    },
  };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

// ---- the table ----------------------------------------------------------------------------------

export interface StreamOptions {
  include_usage: boolean;
}

const MAX_STOP_STRINGS = 4;

/**
 * Every request body field of POST /v1/completions. A field not in this table is rejected (400).
 * Validation (validateCompletionRequest) runs each row: absent → `default`; null → `nullValue`
 * (or `default`) when `nullable`; otherwise `parse`, then `supported`.
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
  prompt: row<string>({
    type: 'string, or an array holding one string',
    nullable: true,
    default: '',
    parse(value, param) {
      if (typeof value === 'string') return value;
      if (!Array.isArray(value)) wrongType(param, 'a string or an array of strings', value);
      if (value.length === 1 && typeof value[0] === 'string') return value[0];
      if (value.length > 0 && value.every((v) => typeof v === 'number' || Array.isArray(v))) {
        throw notSupportedYet(param, 'token id arrays are not supported yet; send the prompt as a string');
      }
      if (value.length > 1 && value.every((v) => typeof v === 'string')) {
        throw notSupportedYet(param, 'several prompts in one request are not supported yet; send one string');
      }
      if (value.length === 0) throw invalidRequest(`Invalid '${param}': the array is empty.`, param, 'invalid_value');
      wrongType(param, 'a string or an array of strings', value);
    },
    doc: 'The text to complete. The tokenizer adds BOS when the model wants one.',
  }),
  max_tokens: row<number | null>({
    ...integer({ min: 0 }),
    nullable: true,
    default: 16,
    nullValue: null,
    doc: 'Most tokens to generate; null = until EOS or the context is full. Prompt + max_tokens must fit the context.',
  }),
  temperature: row<number>({
    ...number({ min: 0, max: 2 }),
    nullable: true,
    default: 1,
    doc: 'Sampling temperature; 0 = greedy (argmax).',
  }),
  top_p: row<number>({
    ...number({ min: 0, max: 1, exclusiveMin: true }),
    nullable: true,
    default: 1,
    doc: 'Nucleus sampling: keep the smallest set of tokens holding top_p of the probability mass.',
  }),
  stream: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    doc: 'Answer with server-sent events, one chunk per piece of text, ending with [DONE].',
  }),
  stream_options: row<StreamOptions | null>({
    type: 'object {include_usage: boolean}',
    nullable: true,
    default: null,
    parse(value, param) {
      if (!isPlainObject(value)) wrongType(param, 'an object', value);
      const out: StreamOptions = { include_usage: false };
      for (const [key, v] of Object.entries(value)) {
        if (key !== 'include_usage') {
          throw invalidRequest(`Unrecognized field '${param}.${key}'; only 'include_usage' is known.`, `${param}.${key}`, 'unknown_parameter');
        }
        if (v !== null) out.include_usage = boolean().parse(v, `${param}.${key}`);
      }
      return out;
    },
    doc: "Only with stream: {include_usage: true} sends one more chunk before [DONE] with `choices: []` and the usage.",
  }),
  seed: row<number | null>({
    ...integer(),
    nullable: true,
    default: null,
    doc: 'Seed of the random stream; the same seed, prompt and parameters give the same text.',
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
    doc: 'Up to 4 strings; generation ends before the first of them, which is not returned.',
  }),
  user: row<string | null>({
    ...string(),
    nullable: true,
    default: null,
    doc: 'An end-user id; accepted and ignored.',
  }),
  n: row<number>({
    ...integer({ min: 1, max: 128 }),
    nullable: true,
    default: 1,
    supported: { test: (v) => v === 1, only: 'only n = 1' },
    doc: 'Completions per prompt.',
  }),
  best_of: row<number>({
    ...integer({ min: 1, max: 20 }),
    nullable: true,
    default: 1,
    supported: { test: (v) => v === 1, only: 'only best_of = 1' },
    doc: 'Completions generated server-side, the best returned.',
  }),
  echo: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    supported: { test: (v) => v === false, only: 'only false' },
    doc: 'Echo the prompt before the completion.',
  }),
  logprobs: row<number | null>({
    ...integer({ min: 0, max: 5 }),
    nullable: true,
    default: null,
    supported: { test: (v) => v === null, only: 'only null' },
    doc: 'Log probabilities of the chosen and of the `logprobs` most likely tokens.',
  }),
  presence_penalty: row<number>({
    ...number({ min: -2, max: 2 }),
    nullable: true,
    default: 0,
    supported: { test: (v) => v === 0, only: 'only 0' },
    doc: 'Penalty for tokens that already appear in the text.',
  }),
  frequency_penalty: row<number>({
    ...number({ min: -2, max: 2 }),
    nullable: true,
    default: 0,
    supported: { test: (v) => v === 0, only: 'only 0' },
    doc: 'Penalty growing with how often a token already appears in the text.',
  }),
  logit_bias: row<Record<string, number> | null>({
    type: 'object mapping token ids to numbers in [-100, 100]',
    nullable: true,
    default: null,
    parse(value, param) {
      if (!isPlainObject(value)) wrongType(param, 'an object', value);
      const out: Record<string, number> = {};
      for (const [key, bias] of Object.entries(value)) {
        if (!/^\d+$/.test(key)) throw invalidRequest(`Invalid '${param}': key '${key}' is not a token id.`, param, 'invalid_value');
        out[key] = number({ min: -100, max: 100 }).parse(bias, `${param}.${key}`);
      }
      return out;
    },
    supported: { test: (v) => v === null || Object.keys(v).length === 0, only: 'only null or {}' },
    doc: 'Bias added to the logits of the given token ids before sampling.',
  }),
  suffix: row<string | null>({
    ...string(),
    nullable: true,
    default: null,
    supported: { test: (v) => v === null || v === '', only: 'only null or ""' },
    doc: 'Text that comes after the completion (fill-in-the-middle).',
  }),
} satisfies Record<string, ParamRow<unknown>>;

export type CompletionParamName = keyof typeof COMPLETION_PARAMS;

/** A validated request: every parameter present, defaults filled in, values normalized. */
export type CompletionParams = {
  [K in CompletionParamName]: (typeof COMPLETION_PARAMS)[K] extends ParamRow<infer T> ? T : never;
};

/** The request body, as a TypeScript caller writes it (OpenAI's names and types). */
export interface CompletionRequest {
  model: string;
  prompt?: string | string[] | null;
  max_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  seed?: number | null;
  stop?: string | string[] | null;
  user?: string | null;
  n?: number | null;
  best_of?: number | null;
  echo?: boolean | null;
  logprobs?: number | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
  suffix?: string | null;
}

// The request type and the table name the same fields (a compile error here means one lacks a row).
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never] ? true : never;
const _requestMatchesTable: SameKeys<CompletionRequest, typeof COMPLETION_PARAMS> = true;
void _requestMatchesTable;

/**
 * Checks a parsed JSON body against COMPLETION_PARAMS and returns every parameter normalized.
 * Throws a 400 ApiError: body not an object, unknown fields (all named), a missing required
 * field, a wrong type / NaN / out-of-range value (`param` names the field), a value not
 * supported yet, or stream_options without stream.
 */
export function validateCompletionRequest(body: unknown): CompletionParams {
  if (!isPlainObject(body)) {
    throw invalidRequest(`The request body must be a JSON object, but got ${jsonType(body)}.`, null, 'invalid_body');
  }
  const unknown = Object.keys(body).filter((key) => !Object.hasOwn(COMPLETION_PARAMS, key));
  if (unknown.length > 0) {
    throw invalidRequest(
      `Unrecognized request argument${unknown.length > 1 ? 's' : ''} supplied: ${unknown.join(', ')}.`,
      unknown[0]!,
      'unknown_parameter',
    );
  }
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(COMPLETION_PARAMS) as [string, ParamRow<unknown>][]) {
    const present = Object.hasOwn(body, name) && body[name] !== undefined;
    const value = present ? body[name] : undefined;
    let parsed: unknown;
    if (!present || value === null) {
      if (spec.required) throw invalidRequest(`Missing required parameter: '${name}'.`, name, 'missing_required_parameter');
      if (value === null && !spec.nullable) throw wrongType(name, `${spec.type}`, null);
      parsed = value === null && 'nullValue' in spec ? spec.nullValue : spec.default;
    } else {
      parsed = spec.parse(value, name);
      if (spec.supported && !spec.supported.test(parsed)) {
        throw notSupportedYet(name, `${JSON.stringify(value)} was given; ${spec.supported.only} is accepted for now`);
      }
    }
    // Defaults may be mutable (stop: []); hand out a fresh copy.
    out[name] = Array.isArray(parsed) ? [...parsed] : parsed;
  }
  const params = out as CompletionParams;
  if (params.stream_options !== null && !params.stream) {
    throw invalidRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options', 'invalid_value');
  }
  return params;
}
