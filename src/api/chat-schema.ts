// The request parameters of POST /v1/chat/completions: one table (CHAT_PARAMS), as schema.ts is
// for completions. The sampling parameters are completions' own rows, so both endpoints validate
// and sample alike; the rows here are what chat adds: messages, tools, logprobs as OpenAI's chat
// API has them, vLLM's template controls, and the parameters a local text model cannot honour
// (a 400 naming them). Messages come out normalized for the chat template (messages.ts).
// Browser code: nothing here may import Node modules.
import { invalidRequest } from './errors.ts';
import { clipText } from './excerpt.ts';
import { parseMessages, parseTools, type ChatTool, type TemplateMessage } from './messages.ts';
import { boolean, integer, isPlainObject, object, row, string, validateParams, wrongType, type ParamRow, type TableParams } from './params.ts';
import { COMPLETION_PARAMS, MAX_LOGPROBS, type CompletionExtensions, type RequestServiceTier } from './schema.ts';
import { STRUCTURED_OUTPUT_PARAMS, type ResponseFormat } from './structured-output.ts';

export type { ChatTool, TemplateMessage } from './messages.ts';

/** tool_choice, normalized: 'none', 'auto', 'required', or the one function to call. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** A row that takes only null: the parameter exists in OpenAI's chat API, but not for this model. */
function cannotHonour(why: string): ParamRow<null> {
  return row<null>({
    type: 'null',
    nullable: true,
    default: null,
    parse(_value, param) {
      throw invalidRequest(`'${param}' is not supported by webgpu-llama: ${why}.`, param, 'unsupported_parameter');
    },
    doc: `Not supported: ${why}; only null is accepted.`,
  });
}

function chatTemplateRow(doc: string) {
  return row<string | null>({ ...string(), nullable: true, default: null, extension: true, doc });
}

const { max_tokens: completionMaxTokens } = COMPLETION_PARAMS;

/**
 * Every request body field of POST /v1/chat/completions. A field not in this table is rejected
 * (400). Rows marked `extension` are vLLM's (OpenAI clients send them in `extra_body`).
 */
export const CHAT_PARAMS = {
  model: COMPLETION_PARAMS.model,
  messages: row<TemplateMessage[]>({
    type: 'array of messages',
    required: true,
    nullable: false,
    default: [],
    parse: parseMessages,
    doc:
      'The conversation: {role, content} objects with roles system, developer (as system), user, assistant (content null with tool_calls, or refusal; a thinking model\'s thinking in reasoning or reasoning_content) and tool (tool_call_id). ' +
      'content is a string or an array of {type: "text", text} parts (joined with newlines). It is rendered with the model\'s chat template.',
  }),
  max_tokens: row<number | null>({
    ...completionMaxTokens,
    ...integer({ min: 1 }),
    default: null,
    doc: 'Deprecated in OpenAI\'s API for max_completion_tokens, which wins when both are given. Most tokens to generate per choice; null (the default) = until the end of the turn or the context is full.',
  }),
  max_completion_tokens: row<number | null>({
    ...integer({ min: 1 }),
    nullable: true,
    default: null,
    doc: 'Most tokens to generate per choice; null (the default) = until the end of the turn or the context is full. The prompt plus this must fit the context.',
  }),
  temperature: COMPLETION_PARAMS.temperature,
  top_p: COMPLETION_PARAMS.top_p,
  n: COMPLETION_PARAMS.n,
  stream: row<boolean>({
    ...COMPLETION_PARAMS.stream,
    doc: 'Answer with server-sent chat.completion.chunk events: the role first, then content and tool-call deltas, a last chunk with finish_reason, then [DONE].',
  }),
  stream_options: COMPLETION_PARAMS.stream_options,
  stop: COMPLETION_PARAMS.stop,
  presence_penalty: COMPLETION_PARAMS.presence_penalty,
  frequency_penalty: COMPLETION_PARAMS.frequency_penalty,
  logit_bias: COMPLETION_PARAMS.logit_bias,
  logprobs: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    doc: 'Return the log probability of each generated token (log-softmax of the raw logits) in choices[].logprobs.content.',
  }),
  top_logprobs: row<number | null>({
    ...integer({ min: 0, max: MAX_LOGPROBS }),
    nullable: true,
    default: null,
    doc: `With logprobs: this many most likely alternatives per token (0..${MAX_LOGPROBS}).`,
  }),
  seed: COMPLETION_PARAMS.seed,
  user: COMPLETION_PARAMS.user,
  service_tier: COMPLETION_PARAMS.service_tier,
  metadata: row<Record<string, string> | null>({
    type: 'object of strings',
    nullable: true,
    default: null,
    parse(value, param) {
      if (!isPlainObject(value)) wrongType(param, 'an object', value);
      for (const [key, v] of Object.entries(value)) if (typeof v !== 'string') wrongType(`${param}.${clipText(key)}`, 'a string', v);
      return value as Record<string, string>;
    },
    doc: 'Key-value pairs for the caller; accepted and ignored.',
  }),
  store: row<boolean>({ ...boolean(), nullable: true, default: false, doc: 'Accepted; nothing is stored.' }),
  prompt_cache_key: row<string | null>({ ...string(), nullable: true, default: null, doc: 'Accepted and ignored.' }),
  safety_identifier: row<string | null>({ ...string(), nullable: true, default: null, doc: 'An end-user id; accepted and ignored.' }),
  tools: row<ChatTool[] | null>({
    type: 'array of function tools',
    nullable: true,
    default: null,
    parse: parseTools,
    doc: 'Functions the model may call: {type: "function", function: {name, description, parameters}}. They are given to the chat template; calls in the output come back as tool_calls.',
  }),
  tool_choice: row<ToolChoice | null>({
    type: "'none', 'auto', 'required' or {type: 'function', function: {name}}",
    nullable: true,
    default: null,
    parse(value, param) {
      if (value === 'none' || value === 'auto' || value === 'required') return value;
      if (typeof value === 'string') {
        throw invalidRequest(`Invalid '${param}': expected 'none', 'auto', 'required' or a function, but got '${clipText(value)}'.`, param, 'invalid_value');
      }
      if (!isPlainObject(value)) wrongType(param, "'none', 'auto', 'required' or an object", value);
      const fn = value.function;
      if (value.type !== 'function' || !isPlainObject(fn) || typeof fn.name !== 'string') {
        throw invalidRequest(`Invalid '${param}': a named tool choice is {"type": "function", "function": {"name": "..."}}.`, param, 'invalid_value');
      }
      return { name: fn.name };
    },
    doc:
      "'none': no call (the tools are left out of the prompt, as vLLM's --exclude-tools-when-tool-choice-none); 'auto' (the default with tools): the model decides; " +
      "'required': the output is constrained to calls of the tools (one or more; exactly one with parallel_tool_calls false), in the model's own tool-call format, " +
      "with arguments valid against each function's parameters; a named function: exactly one call of it. Not with another structured output parameter.",
  }),
  parallel_tool_calls: row<boolean>({
    ...boolean(),
    nullable: true,
    default: true,
    doc: "Whether a reply may hold several tool calls; false keeps the first (with tool_choice 'required', the output holds exactly one). Only with tools.",
  }),
  modalities: row<null>({
    type: "array ['text']",
    nullable: true,
    default: null,
    parse(value, param) {
      if (Array.isArray(value) && value.every((m) => m === 'text')) return null;
      throw invalidRequest(`'${param}' is not supported by webgpu-llama beyond ["text"]: the model writes text only.`, param, 'unsupported_parameter');
    },
    doc: 'Only ["text"]: the model writes text.',
  }),
  audio: cannotHonour('the model writes text, not audio'),
  prediction: cannotHonour('predicted outputs are not implemented'),
  web_search_options: cannotHonour('a local model has no web search'),
  functions: cannotHonour("the deprecated 'functions' are not accepted; send them as 'tools'"),
  function_call: cannotHonour("the deprecated 'function_call' is not accepted; use 'tool_choice'"),
  reasoning_effort: cannotHonour('the model has no reasoning-effort setting'),
  verbosity: cannotHonour('the model has no verbosity setting'),
  extra_body: COMPLETION_PARAMS.extra_body,
  top_k: COMPLETION_PARAMS.top_k,
  min_p: COMPLETION_PARAMS.min_p,
  repetition_penalty: COMPLETION_PARAMS.repetition_penalty,
  ignore_eos: COMPLETION_PARAMS.ignore_eos,
  min_tokens: COMPLETION_PARAMS.min_tokens,
  cache_prompt: COMPLETION_PARAMS.cache_prompt,
  stop_token_ids: COMPLETION_PARAMS.stop_token_ids,
  skip_special_tokens: COMPLETION_PARAMS.skip_special_tokens,
  include_stop_str_in_output: COMPLETION_PARAMS.include_stop_str_in_output,
  ...STRUCTURED_OUTPUT_PARAMS,
  echo: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    extension: true,
    doc: 'With continue_final_message: the content starts with the continued assistant message (vLLM).',
  }),
  chat_template: chatTemplateRow("A Jinja chat template for this request, in place of the model's own (vLLM)."),
  chat_template_kwargs: row<Record<string, unknown> | null>({
    ...object(),
    nullable: true,
    default: null,
    extension: true,
    doc: 'Extra variables for the chat template (vLLM), e.g. {"enable_thinking": false}.',
  }),
  add_generation_prompt: row<boolean>({
    ...boolean(),
    nullable: true,
    default: true,
    extension: true,
    doc: "End the prompt with the template's start of an assistant turn (vLLM; default true).",
  }),
  continue_final_message: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    extension: true,
    doc: 'Continue the last (assistant) message instead of starting a new turn; not with add_generation_prompt (vLLM).',
  }),
  add_special_tokens: row<boolean>({
    ...boolean(),
    nullable: true,
    default: false,
    extension: true,
    doc: "Add the tokenizer's BOS to the rendered prompt (vLLM; default false: templates write their own).",
  }),
  include_reasoning: row<boolean>({
    ...boolean(),
    nullable: true,
    default: true,
    extension: true,
    doc: "A model that thinks: return its thinking in reasoning and reasoning_content (vLLM; default true). false: the thinking is left out of the reply; content is the answer either way.",
  }),
} satisfies Record<string, ParamRow<unknown>>;
export type ChatParams = TableParams<typeof CHAT_PARAMS>;

/** vLLM's chat extensions, as a TypeScript caller writes them (top level or in extra_body). */
export interface ChatExtensions extends CompletionExtensions {
  echo?: boolean | null;
  chat_template?: string | null;
  chat_template_kwargs?: Record<string, unknown> | null;
  add_generation_prompt?: boolean | null;
  continue_final_message?: boolean | null;
  add_special_tokens?: boolean | null;
  include_reasoning?: boolean | null;
}

/** One content part of a message (only text parts are read). */
export interface ChatContentPart {
  type: 'text' | 'refusal' | 'image_url' | 'input_audio' | 'file';
  text?: string;
  refusal?: string;
  [key: string]: unknown;
}

/** A message as OpenAI's chat API takes it. */
export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  content?: string | ChatContentPart[] | null;
  name?: string;
  refusal?: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
  [key: string]: unknown;
}

/** The request body, as a TypeScript caller writes it (OpenAI's names and types, and vLLM's extensions). */
export interface ChatCompletionRequest extends ChatExtensions {
  model: string;
  messages: ChatMessage[];
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  n?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  stop?: string | string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
  logprobs?: boolean | null;
  top_logprobs?: number | null;
  seed?: number | null;
  user?: string | null;
  service_tier?: RequestServiceTier | null;
  metadata?: Record<string, string> | null;
  store?: boolean | null;
  prompt_cache_key?: string | null;
  safety_identifier?: string | null;
  tools?: { type: 'function'; function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null } }[] | null;
  tool_choice?: 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } } | null;
  parallel_tool_calls?: boolean | null;
  response_format?: ResponseFormat | null;
  modalities?: 'text'[] | null;
  audio?: null;
  prediction?: null;
  web_search_options?: null;
  functions?: null;
  function_call?: null;
  reasoning_effort?: null;
  verbosity?: null;
  extra_body?: (ChatExtensions & Partial<Omit<ChatCompletionRequest, 'extra_body'>>) | null;
}

// The request type and the table name the same fields (a compile error here means one lacks a row).
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never] ? true : never;
const _requestMatchesTable: SameKeys<Omit<ChatCompletionRequest, never>, typeof CHAT_PARAMS> = true;
void _requestMatchesTable;

/** continue_final_message and add_generation_prompt exclude each other (chat and /tokenize). */
export function checkTemplateFlags(
  params: { continue_final_message: boolean; add_generation_prompt: boolean },
  named: (name: 'continue_final_message') => string,
): void {
  if (params.continue_final_message && params.add_generation_prompt) {
    throw invalidRequest(
      "'continue_final_message' and 'add_generation_prompt' cannot both be true: set add_generation_prompt to false to continue the last message.",
      named('continue_final_message'),
      'invalid_value',
    );
  }
}

/**
 * Checks a parsed JSON body against CHAT_PARAMS and returns every parameter normalized (messages
 * ready for the template). Throws a 400 ApiError: anything validateParams refuses, a message or
 * tool that is not valid, or a bad combination (stream_options without stream, top_logprobs
 * without logprobs, add_generation_prompt with continue_final_message, tool_choice or
 * parallel_tool_calls without tools, a named tool_choice for a tool not given, min_tokens over
 * the token limit). The structured output parameters are resolved, and checked together with
 * tool_choice, when the request is planned (chat.ts).
 */
export function validateChatRequest(body: unknown): ChatParams {
  const { params, named, given } = validateParams(CHAT_PARAMS, body);
  if (params.stream_options !== null && !params.stream) {
    throw invalidRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", named('stream_options'), 'invalid_value');
  }
  if (params.top_logprobs !== null && !params.logprobs) {
    throw invalidRequest("Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.", named('top_logprobs'), 'invalid_value');
  }
  if (params.messages.length === 0) {
    throw invalidRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", named('messages'), 'empty_array');
  }
  checkTemplateFlags(params, named);
  if (params.tools === null || params.tools.length === 0) {
    const without = given('parallel_tool_calls') ? 'parallel_tool_calls' : params.tool_choice !== null && params.tool_choice !== 'none' ? 'tool_choice' : null;
    if (without) throw invalidRequest(`Invalid value for '${without}': '${without}' is only allowed when 'tools' are specified.`, named(without), 'invalid_value');
  }
  const choice = params.tool_choice;
  if (choice !== null && typeof choice === 'object' && !params.tools?.some((t) => t.function.name === choice.name)) {
    throw invalidRequest(`Invalid 'tool_choice': no tool named '${clipText(choice.name)}' was given in 'tools'.`, named('tool_choice'), 'invalid_value');
  }
  const limit = params.max_completion_tokens ?? params.max_tokens;
  if (limit !== null && params.min_tokens > limit) {
    throw invalidRequest(`Invalid 'min_tokens': ${params.min_tokens} is more than the token limit (${limit}).`, named('min_tokens'), 'invalid_value');
  }
  return params;
}
