// POST /v1/embeddings without the HTTP: a parsed JSON body in, an OpenAI embedding list out.
// The request is validated against its table, its inputs tokenized and checked against the
// vocabulary and the context, then the generator's embed() pools one vector per input; this
// layer truncates them (`dimensions`) and encodes them (`encoding_format`).
// Browser code: nothing here may import Node modules.
import { usableVocabSize, type EmbeddingInfo, type TextGenerator } from '../engine/types.ts';
import { modelMatches, type RequestOptions } from './completions.ts';
import { ApiError, invalidRequest, modelNotFound } from './errors.ts';
import { clipText } from './excerpt.ts';
import { boolean, integer, object, row, string, tokenIdArray, validateParams, wrongType, type TableParams } from './params.ts';

/** Most inputs one request may embed (OpenAI's limit). */
export const MAX_EMBEDDING_INPUTS = 2048;

/** One input of the request: text to tokenize, or token ids as given. */
export type EmbeddingInput = { text: string } | { tokens: number[] };

export type EmbeddingEncodingFormat = 'float' | 'base64';

/** What `input` may be: OpenAI's four forms. */
export type EmbeddingInputValue = string | string[] | number[] | number[][];

/** POST /v1/embeddings, as a TypeScript caller writes it. */
export interface EmbeddingRequest {
  model: string;
  input: EmbeddingInputValue;
  /** 'float' (the default): arrays of numbers; 'base64': little-endian float32 bytes in base64. */
  encoding_format?: EmbeddingEncodingFormat | null;
  /** Matryoshka models only: the first `dimensions` components, renormalised. */
  dimensions?: number | null;
  user?: string | null;
  /** vLLM: keep only the last k tokens of each input (-1: the model's context length). */
  truncate_prompt_tokens?: number | null;
  /** vLLM: the tokenizer's special tokens around each text input (default true). */
  add_special_tokens?: boolean | null;
  extra_body?: { truncate_prompt_tokens?: number | null; add_special_tokens?: boolean | null } | null;
}

export interface EmbeddingObject {
  object: 'embedding';
  index: number;
  /** The vector: numbers ('float'), or its little-endian float32 bytes in base64 ('base64'). */
  embedding: number[] | string;
}

export interface EmbeddingUsage {
  prompt_tokens: number;
  total_tokens: number;
}

export interface EmbeddingResponse {
  object: 'list';
  data: EmbeddingObject[];
  /** The model's id (also when the request named an alias). */
  model: string;
  usage: EmbeddingUsage;
}

function parseInput(value: unknown, param: string): EmbeddingInput[] {
  if (typeof value === 'string') {
    if (value === '') throw invalidRequest(`Invalid '${param}': the string is empty; give text to embed.`, param, 'invalid_value');
    return [{ text: value }];
  }
  if (!Array.isArray(value)) wrongType(param, 'a string, an array of strings, or token ids', value);
  if (value.length === 0) throw invalidRequest(`Invalid '${param}': the array is empty.`, param, 'invalid_value');
  // One array of token ids is one input, however long (the context bounds it).
  if (value.every((v) => typeof v === 'number')) return [{ tokens: tokenIdArray(value, param, param) }];
  if (value.length > MAX_EMBEDDING_INPUTS) {
    throw invalidRequest(`Invalid '${param}': ${value.length} inputs were given; at most ${MAX_EMBEDDING_INPUTS} are embedded per request.`, param, 'array_above_max_length');
  }
  if (value.every((v) => typeof v === 'string')) {
    return (value as string[]).map((text, i) => {
      if (text === '') throw invalidRequest(`Invalid '${param}': ${param}[${i}] is an empty string; give text to embed.`, param, 'invalid_value');
      return { text };
    });
  }
  if (value.every((v) => Array.isArray(v))) {
    return value.map((ids: unknown[], i) => {
      if (ids.length === 0) throw invalidRequest(`Invalid '${param}': ${param}[${i}] is an empty array of token ids.`, param, 'invalid_value');
      return { tokens: tokenIdArray(ids, param, `${param}[${i}]`) };
    });
  }
  wrongType(param, 'a string, an array of strings, an array of token ids, or an array of arrays of token ids (not a mix)', value);
}

/** Every request body field of POST /v1/embeddings; a field not here is a 400. */
export const EMBEDDING_PARAMS = {
  model: row<string>({
    ...string(),
    required: true,
    nullable: false,
    default: '',
    doc: 'ID (or alias) of the loaded model; another id is answered with 404 model_not_found.',
  }),
  input: row<EmbeddingInput[]>({
    type: 'string, array of strings, array of token ids, or array of arrays of token ids',
    required: true,
    nullable: false,
    default: [],
    parse: parseInput,
    doc: `The text to embed, or a batch (at most ${MAX_EMBEDDING_INPUTS} inputs): strings or token-id arrays, none empty. Each input gets one vector, in order.`,
  }),
  encoding_format: row<EmbeddingEncodingFormat>({
    type: 'string',
    range: "'float' or 'base64'",
    nullable: true,
    default: 'float',
    parse(value, param) {
      if (typeof value !== 'string') wrongType(param, "'float' or 'base64'", value);
      if (value !== 'float' && value !== 'base64') {
        throw invalidRequest(`Invalid '${param}': expected 'float' or 'base64', but got '${clipText(value)}'.`, param, 'invalid_value');
      }
      return value;
    },
    doc: "'float': each vector as an array of numbers; 'base64': its little-endian float32 bytes in base64 (what the openai client asks for and decodes).",
  }),
  dimensions: row<number | null>({
    ...integer({ min: 1 }),
    nullable: true,
    default: null,
    doc: "Matryoshka models only: each vector's first `dimensions` components (1 to the model's size), L2-renormalised when the model's vectors are normalised. Any value on another model is a 400 (as vLLM answers).",
  }),
  user: row<string | null>({ ...string(), nullable: true, default: null, doc: 'An end-user id; accepted and ignored.' }),
  truncate_prompt_tokens: row<number | null>({
    ...integer({ min: -1 }),
    nullable: true,
    default: null,
    extension: true,
    doc: "vLLM: keep only each input's last k tokens (-1: the model's context length); 0 is a 400, as is k above the context length. Without it an input longer than the context is a 400.",
  }),
  add_special_tokens: row<boolean>({
    ...boolean(),
    nullable: true,
    default: true,
    extension: true,
    doc: "vLLM: text inputs get the tokens the model's tokenizer adds around a text (BOS where it adds one; a suffix its post-processor appends, such as Qwen3-Embedding's <|endoftext|>); false: the text's tokens only.",
  }),
  extra_body: row<Record<string, unknown> | null>({
    ...object(),
    type: 'object of further parameters',
    nullable: true,
    default: null,
    doc: 'Its keys are treated as top-level parameters (truncate_prompt_tokens, add_special_tokens); unknown keys are a 400.',
  }),
};

export type EmbeddingParams = TableParams<typeof EMBEDDING_PARAMS>;

/** 400: the model has no embedding (as vLLM answers a model without the embed task). */
function cannotEmbed(id: string): ApiError {
  return invalidRequest(`The model '${id}' does not support the Embeddings API.`, 'model', 'model_not_supported');
}

/** The model's embedding settings (a 400 for a model that cannot embed), with `dimensions` checked against them. */
function embeddingOf(generator: TextGenerator, params: EmbeddingParams): EmbeddingInfo {
  const info = generator.info.embedding;
  if (!info || typeof generator.embed !== 'function') throw cannotEmbed(generator.info.id);
  if (params.dimensions !== null) {
    if (!info.matryoshka) {
      throw invalidRequest(
        `Model '${generator.info.id}' does not support matryoshka representation: its vectors cannot be shortened, so 'dimensions' is not accepted (its vectors have ${info.dimensions}).`,
        'dimensions',
        'invalid_value',
      );
    }
    if (params.dimensions > info.dimensions) {
      throw invalidRequest(
        `Invalid 'dimensions': ${params.dimensions} is out of range; the model's vectors have ${info.dimensions} components (expected 1 to ${info.dimensions}).`,
        'dimensions',
        'value_above_maximum',
      );
    }
    const sizes = info.matryoshkaDimensions;
    if (sizes && params.dimensions !== info.dimensions && !sizes.includes(params.dimensions)) {
      throw invalidRequest(
        `Invalid 'dimensions': the model was trained for ${[...sizes, info.dimensions].filter((d, i, all) => all.indexOf(d) === i).join(', ')} dimensions, not ${params.dimensions}.`,
        'dimensions',
        'invalid_value',
      );
    }
  }
  return info;
}

/**
 * The token ids of every input: text tokenized (with the tokenizer's special tokens unless
 * add_special_tokens is false), ids as given; each checked against the vocabulary, cut to its
 * last truncate_prompt_tokens, and checked against the context (a 400 naming the input).
 */
export function embeddingTokens(generator: TextGenerator, params: EmbeddingParams, named: (name: 'truncate_prompt_tokens') => string): number[][] {
  const { tokenizer } = generator;
  const context = generator.info.contextLength;
  const vocabSize = usableVocabSize(generator);
  const truncateParam = named('truncate_prompt_tokens');
  let keep: number | null = params.truncate_prompt_tokens;
  if (keep === -1) keep = context;
  if (keep === 0) throw invalidRequest(`Invalid '${truncateParam}': 0 would leave no tokens; give -1 (the context length) or a count from 1 to ${context}.`, truncateParam, 'invalid_value');
  if (keep !== null && keep > context) {
    throw invalidRequest(
      `Invalid '${truncateParam}': ${keep} is greater than the model's maximum context length (${context} tokens); give a smaller truncation size.`,
      truncateParam,
      'value_above_maximum',
    );
  }
  const batch = params.input.length > 1;
  return params.input.map((input, i) => {
    const which = batch ? `input ${i}` : 'the input';
    let tokens: number[];
    if ('tokens' in input) {
      // Ids as given: truncation keeps the last ones.
      tokens = input.tokens;
      if (keep !== null && tokens.length > keep) tokens = tokens.slice(tokens.length - keep);
    } else {
      // The tokenizer's special tokens around the text (BOS, Qwen3-Embedding's <|endoftext|>) stay
      // through truncation, which cuts the text from its start (vLLM: the tokenizer's left truncation).
      const text = tokenizer.encode(input.text, { addBos: false });
      const prefix = params.add_special_tokens ? tokenizer.encode(input.text, {}).slice(0, -text.length || undefined) : [];
      const suffix = params.add_special_tokens ? [...(tokenizer.suffixIds ?? [])] : [];
      let body = text;
      if (keep !== null && prefix.length + text.length + suffix.length > keep) body = text.slice(Math.min(text.length, text.length - (keep - prefix.length - suffix.length)));
      tokens = [...prefix, ...body, ...suffix];
      if (keep !== null && tokens.length > keep) tokens = tokens.slice(tokens.length - keep);
      // A text the tokenizer turns into nothing (whitespace a normalizer strips, without special tokens).
      if (tokens.length === 0) throw invalidRequest(`Invalid 'input': ${which} gives no tokens; give text to embed.`, 'input', 'invalid_value');
    }
    for (const id of tokens) {
      if (id >= vocabSize) {
        throw invalidRequest(
          `Invalid 'input': ${which} has token id ${id}, outside the model's vocabulary (token ids are 0..${vocabSize - 1}).`,
          'input',
          'invalid_value',
        );
      }
    }
    if (tokens.length > context) {
      throw new ApiError(
        400,
        `This model's maximum context length is ${context} tokens, however ${which} is ${tokens.length} tokens. Please shorten it, or set 'truncate_prompt_tokens' to keep only its last tokens.`,
        { param: 'input', code: 'context_length_exceeded' },
      );
    }
    return tokens;
  });
}

/** A vector's first `k` components, L2-normalised when `normalize` (a zero vector stays zero). */
export function truncateVector(vector: Float32Array, k: number, normalize: boolean): Float32Array {
  const out = vector.slice(0, k);
  if (!normalize) return out;
  let sum = 0;
  for (const x of out) sum += x * x;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let i = 0; i < out.length; i++) out[i] = out[i]! / norm;
  return out;
}

const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** A vector as OpenAI's base64 encoding: its float32 values' little-endian bytes, in base64 (with padding). */
export function vectorBase64(vector: Float32Array): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  vector.forEach((x, i) => view.setFloat32(i * 4, x, true));
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i]!;
    const b = bytes[i + 1];
    const c = bytes[i + 2];
    out += BASE64[a >> 2]! + BASE64[((a & 3) << 4) | ((b ?? 0) >> 4)]!;
    out += b === undefined ? '=' : BASE64[((b & 15) << 2) | ((c ?? 0) >> 6)]!;
    out += c === undefined ? '=' : BASE64[c & 63]!;
  }
  return out;
}

/**
 * Creates embeddings. `body` is the parsed JSON request body. Validation, the model checks and
 * tokenization happen before anything reaches the GPU, so their errors (ApiError: 400, 404) reject
 * it; so do the engine's. `signal` aborts it (an AbortError).
 */
export async function createEmbeddings(generator: TextGenerator, body: unknown, options: RequestOptions = {}): Promise<EmbeddingResponse> {
  const { params, named } = validateParams(EMBEDDING_PARAMS, body);
  const info = generator.info;
  if (!modelMatches(info, params.model)) throw modelNotFound(params.model);
  const embedding = embeddingOf(generator, params);
  const inputs = embeddingTokens(generator, params, named);
  options.signal?.throwIfAborted();
  const vectors = await generator.embed!(inputs, options.signal ? { signal: options.signal } : {});
  if (vectors.length !== inputs.length) throw new Error(`the engine returned ${vectors.length} vectors for ${inputs.length} inputs`);
  const size = params.dimensions ?? embedding.dimensions;
  const data = vectors.map((full, index): EmbeddingObject => {
    if (full.length !== embedding.dimensions) throw new Error(`the engine returned a vector of ${full.length} components; the model's have ${embedding.dimensions}`);
    const vector = size < full.length ? truncateVector(full, size, embedding.normalize) : full;
    return { object: 'embedding', index, embedding: params.encoding_format === 'base64' ? vectorBase64(vector) : Array.from(vector) };
  });
  const promptTokens = inputs.reduce((sum, tokens) => sum + tokens.length, 0);
  return { object: 'list', data, model: info.id, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } };
}
