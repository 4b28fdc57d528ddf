// POST /v1/chat/completions without the HTTP: a parsed JSON body in, an OpenAI chat completion (or
// an async iterable of chat.completion.chunk objects) out. The messages become a prompt through the
// model's chat template (chat-prompt.ts); from there the request runs exactly as a completion
// does (the same planning, sampling settings, structured output and runPrompt), and each choice's
// text is split into content and tool calls (tool-parsers.ts) in the model's own tool-call format;
// tool_choice 'required' or a named function constrains the output to those calls. A model that
// thinks has its thinking split off first (reasoning.ts): tool calls and structured output are
// the answer's, after the thinking.
// Browser code: nothing here may import Node modules.
import { usableVocabSize, type FinishReason, type TextGenerator } from '../engine/types.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { validateChatRequest, type ChatParams } from './chat-schema.ts';
import { generationPart, renderChatPrompt, toolCallFormatFor, type ChatPromptInput } from './chat-prompt.ts';
import {
  checkPromptVocabulary,
  choiceSettings,
  modelMatches,
  planPrompt,
  randomId,
  type CompletionUsage,
  type RequestOptions,
  usageOf,
} from './completions.ts';
import { invalidRequest, modelNotFound } from './errors.ts';
import { appendEntries, type LogprobEntry } from './logprobs.ts';
import type { ServiceTier } from './schema.ts';
import { runPrompt, type ChoiceSettings, type PromptPlan } from './stream.ts';
import { compileRequestStructure, requestStructure, type RequestStructure } from './structured-output.ts';
import { toolCallStructure } from './tool-call-grammar.ts';
import { reasoningStart, reasoningTagsOf, ReasoningStream, splitReasoning, type ReasoningPlan } from './reasoning.ts';
import { parseToolCalls, TOOL_CALL_MARKERS, ToolCallStream, type ParsedToolCall, type ToolCallFormat, type ToolParse } from './tool-parsers.ts';

export type { ChatCompletionRequest, ChatMessage, ChatContentPart, ChatExtensions, ChatParams } from './chat-schema.ts';

export type ChatFinishReason = FinishReason | 'tool_calls';

export interface ChatTopLogprob {
  token: string;
  logprob: number;
  /** The token's text as UTF-8 bytes. */
  bytes: number[] | null;
}

/** One generated token's logprob: its text as it joins `content`, and the most likely alternatives. */
export interface ChatTokenLogprob extends ChatTopLogprob {
  top_logprobs: ChatTopLogprob[];
}

export interface ChatLogprobs {
  content: ChatTokenLogprob[] | null;
  refusal: null;
}

export interface ChatToolCall {
  /** 'call_…' */
  id: string;
  type: 'function';
  /** `arguments`: the JSON text of the arguments object. */
  function: { name: string; arguments: string };
}

export interface ChatCompletionMessage {
  role: 'assistant';
  /** null when the reply is only tool calls, or only thinking. */
  content: string | null;
  refusal: null;
  tool_calls?: ChatToolCall[];
  /**
   * A model that thinks: its thinking, without the tags (null when the reply did not think).
   * Absent for models that do not think.
   */
  reasoning?: string | null;
  /** The same as `reasoning` (DeepSeek's name, which many clients read). */
  reasoning_content?: string | null;
}

export interface ChatCompletionChoice {
  index: number;
  message: ChatCompletionMessage;
  logprobs: ChatLogprobs | null;
  /** 'tool_calls' when the reply holds tool calls. */
  finish_reason: ChatFinishReason;
}

export interface ChatCompletion {
  /** 'chatcmpl-…' */
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  service_tier: ServiceTier;
  system_fingerprint: string;
  choices: ChatCompletionChoice[];
  usage: CompletionUsage;
}

/** A piece of a tool call: the first of a call has id, type and name; the others add to arguments. */
export interface ChatToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

export interface ChatDelta {
  role?: 'assistant';
  content?: string;
  tool_calls?: ChatToolCallDelta[];
  /** Thinking text (a model that thinks); `reasoning_content` is the same text. */
  reasoning?: string;
  reasoning_content?: string;
}

export interface ChatChunkChoice {
  index: number;
  delta: ChatDelta;
  logprobs: ChatLogprobs | null;
  finish_reason: ChatFinishReason | null;
}

/**
 * One streamed chunk. Per choice: a first chunk with the role, content and tool-call deltas, a last
 * one with finish_reason (choices come one after another); with stream_options.include_usage,
 * every chunk has `usage: null` and one more follows with `choices: []` and the usage.
 */
export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  service_tier: ServiceTier;
  system_fingerprint: string;
  choices: ChatChunkChoice[];
  usage?: CompletionUsage | null;
}

/** Whether `text` is one special token of the vocabulary (then skip_special_tokens would take it out of the text). */
function isSpecialToken(tokenizer: TextTokenizer, text: string): boolean {
  const ids = tokenizer.encode(text, { addBos: false });
  return ids.length === 1 && tokenizer.isSpecial(ids[0]!);
}

/** Where a tool-call format's marker is a special token, special tokens must stay in the text for the parser to see it. */
function markerIsSpecial(tokenizer: TextTokenizer, format: ToolCallFormat): boolean {
  return isSpecialToken(tokenizer, TOOL_CALL_MARKERS[format]);
}

/** The same configuration gives the same fingerprint: the model and how it is stored. */
function systemFingerprint(info: TextGenerator['info']): string {
  const key = [info.id, info.format, info.contextLength, info.storage?.weightStorage ?? '', info.storage?.kvCacheDType ?? ''].join('|');
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193) >>> 0;
  return `fp_${hash.toString(16).padStart(8, '0')}`;
}

/** What a validated request runs with. */
interface ChatPlan {
  prompt: PromptPlan;
  settings: ChoiceSettings;
  n: number;
  /** The tool-call format the output is parsed with; null: no tools, the text is all content. */
  format: ToolCallFormat | null;
  parallelToolCalls: boolean;
  /** Content put before each choice's (echo of the continued assistant message). */
  echo: string;
  /** The structure the output must have (tool_choice 'required' or named: the calls); null: none. */
  structure: RequestStructure | null;
  /** How the thinking is split from the answer; null: the model does not think. */
  reasoning: ReasoningPlan | null;
  /** Whether the reply carries the thinking (include_reasoning). */
  includeReasoning: boolean;
}

/**
 * The structure a chat request asks for: its structured output parameters', or with tool_choice
 * 'required' or a named function, calls in the model's tool-call format (tool-call-grammar.ts).
 * 400: both at once, or forced calls where the tool-call format is not known.
 */
function chatStructure(params: ChatParams, format: ToolCallFormat | null, template: string): RequestStructure | null {
  const requested = requestStructure(params);
  const choice = params.tool_choice;
  if (choice !== 'required' && (choice === null || typeof choice !== 'object')) return requested;
  const forced = choice === 'required' ? "'required'" : `the function '${choice.name}'`;
  if (requested) {
    throw invalidRequest(
      `'tool_choice' ${forced} constrains the output to tool calls, so '${requested.param}' cannot constrain it too; give one of them.`,
      requested.param,
      'invalid_value',
    );
  }
  if (format === null) {
    throw invalidRequest(
      `'tool_choice' ${forced} needs the model's tool-call format, and its chat template implies none; load the model with the 'toolCallFormat' option, or use 'auto'.`,
      'tool_choice',
      'unsupported_value',
    );
  }
  const output = toolCallStructure({ format, tools: params.tools ?? [], choice, parallel: params.parallel_tool_calls, template });
  return { output, param: 'tools' };
}

/** The template's input from a request: tool_choice 'none' leaves the tools out of the prompt (as vLLM). */
export function chatPromptInput(params: Pick<ChatParams, 'messages' | 'tools' | 'tool_choice' | 'chat_template' | 'chat_template_kwargs' | 'add_generation_prompt' | 'continue_final_message' | 'add_special_tokens'>): ChatPromptInput {
  return {
    messages: params.messages,
    tools: params.tool_choice === 'none' ? null : params.tools,
    chatTemplate: params.chat_template,
    templateKwargs: params.chat_template_kwargs,
    addGenerationPrompt: params.add_generation_prompt,
    continueFinalMessage: params.continue_final_message,
    addSpecialTokens: params.add_special_tokens,
  };
}

async function planChat(generator: TextGenerator, params: ChatParams): Promise<ChatPlan> {
  const input = chatPromptInput(params);
  const rendered = await renderChatPrompt(generator, input);
  if (rendered.tokens.length === 0) throw invalidRequest("The messages rendered to an empty prompt: the chat template wrote nothing.", 'messages', 'invalid_value');
  checkPromptVocabulary(generator, rendered.tokens, 'messages', 'token id (from the rendered messages)');
  const limitParam = params.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens';
  const prompt = planPrompt(generator, rendered.tokens, rendered.text, params.max_completion_tokens ?? params.max_tokens, {
    size: (n) => `your messages resulted in ${n} tokens`,
    within: 'in the messages',
    promptParam: 'messages',
    maxTokensParam: limitParam,
  });
  const format = input.tools !== null && input.tools.length > 0 ? toolCallFormatFor(generator, rendered.template) : null;
  const settings = choiceSettings(generator, params, {
    sequences: params.n,
    logprobs: params.logprobs ? (params.top_logprobs ?? 0) : null,
    echo: false,
  });
  if (format !== null && markerIsSpecial(generator.tokenizer, format)) settings.skipSpecialTokens = false;
  const tags = reasoningTagsOf(generator);
  // Only the reply's own part of the prompt says where it starts (a second render); a prompt without either tag needs none.
  const mentions = tags !== null && (rendered.text.includes(tags.start) || rendered.text.includes(tags.end));
  const reasoning = tags ? { tags, start: reasoningStart(mentions ? await generationPart(generator, input, rendered) : '', tags) } : null;
  // Where the tags are special tokens of the vocabulary, special tokens stay in the text for the split (as for tool markers).
  if (reasoning && (isSpecialToken(generator.tokenizer, reasoning.tags.start) || isSpecialToken(generator.tokenizer, reasoning.tags.end))) settings.skipSpecialTokens = false;
  if (reasoning && reasoning.start !== 'answer') {
    // Structured output starts after the thinking (the gate is used only with a structure).
    settings.reasoningGate = {
      start: reasoning.start,
      startTag: reasoning.tags.start,
      endTag: reasoning.tags.end,
      vocabSize: usableVocabSize(generator),
      skipSpecialTokens: settings.skipSpecialTokens,
    };
  }
  const last = params.messages.at(-1);
  return {
    prompt,
    settings,
    n: params.n,
    format,
    parallelToolCalls: params.parallel_tool_calls,
    echo: params.echo && last?.role === 'assistant' ? (last.content ?? '') : '',
    structure: chatStructure(params, format, rendered.template),
    reasoning,
    includeReasoning: params.include_reasoning,
  };
}

const encoder = new TextEncoder();

/**
 * An entry in the chat shape. `token` is the text the token adds to `content` (so the tokens join
 * to it; '' for a token that only begins a character), `bytes` the token's own bytes (its
 * vocabulary piece as the decoder reads it, so the bytes of a split character are on its tokens).
 */
function chatLogprob(entry: LogprobEntry, tokenizer: TextTokenizer): ChatTokenLogprob {
  const bytes = (id: number | undefined, text: string) => [...((id !== undefined ? tokenizer.tokenBytes?.(id) : undefined) ?? encoder.encode(text))];
  return {
    token: entry.token,
    logprob: entry.logprob ?? 0,
    bytes: bytes(entry.id, entry.token),
    top_logprobs: (entry.alternatives ?? []).map((alt) => ({ token: alt.token, logprob: alt.logprob, bytes: bytes(alt.id, alt.token) })),
  };
}

function toolCall(call: ParsedToolCall): ChatToolCall {
  return { id: randomId('call_', 24), type: 'function', function: { name: call.name, arguments: call.arguments } };
}

/**
 * Creates a chat completion. `body` is the parsed JSON request body. Validation, the model check,
 * rendering, tokenization and the compile of a structured output happen before this resolves
 * (nothing has been queued for the GPU then), so their errors (ApiError: 400, 404) reject it; generation errors reject it too (non-stream) or are thrown by the iterable (stream).
 * With `stream: true` it resolves to an async iterable of chunks whose generation starts on the
 * first next(); ending the iteration early ends the generation. `signal` aborts it at the next token.
 */
export async function createChatCompletion(
  generator: TextGenerator,
  body: unknown,
  options: RequestOptions = {},
): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
  const params = validateChatRequest(body);
  const info = generator.info;
  if (!modelMatches(info, params.model)) throw modelNotFound(params.model);
  const plan = await planChat(generator, params);
  if (plan.structure) plan.settings.structure = await compileRequestStructure(generator, plan.structure, options.compileStructuredOutput);
  const meta = {
    id: randomId('chatcmpl-', 24),
    created: Math.floor(Date.now() / 1000),
    model: info.id,
    service_tier: (params.service_tier === 'auto' ? 'default' : params.service_tier) as ServiceTier,
    system_fingerprint: systemFingerprint(info),
  };
  const usage = (completionTokens: number, cachedTokens: number): CompletionUsage => usageOf(plan.prompt.tokens.length, cachedTokens, completionTokens);
  if (params.stream) {
    return streamChat(generator, plan, { ...meta, object: 'chat.completion.chunk' }, usage, params.stream_options?.include_usage ?? false, options.signal);
  }

  options.signal?.throwIfAborted();
  const texts = Array.from({ length: plan.n }, () => ({ text: '', entries: [] as LogprobEntry[], finish: 'length' as FinishReason, tokens: 0 }));
  let cachedTokens = 0;
  for await (const piece of runPrompt(generator, plan.prompt, plan.settings, options.signal)) {
    const choice = texts[piece.sequence]!;
    choice.text += piece.text;
    appendEntries(choice.entries, piece.entries);
    if (piece.end) [choice.finish, choice.tokens, cachedTokens] = [piece.end.finishReason, piece.end.completionTokens, piece.end.cachedTokens];
  }
  const choices = texts.map((c, index): ChatCompletionChoice => {
    // The echo is content before what the model wrote; only the latter is parsed for thinking
    // and calls (as the stream does), the calls in the answer after the thinking.
    const split = plan.reasoning ? splitReasoning(plan.reasoning, c.text) : { reasoning: null, content: c.text };
    const parsed = plan.format === null ? { content: split.content, calls: [] } : keepCalls(parseToolCalls(plan.format, split.content), plan.parallelToolCalls);
    const message: ChatCompletionMessage = { role: 'assistant', content: plan.echo + parsed.content, refusal: null };
    if (parsed.calls.length > 0) message.tool_calls = parsed.calls.map(toolCall);
    // As vLLM: no answer text after tool calls or thinking is null content.
    if (message.content === '' && (parsed.calls.length > 0 || split.reasoning !== null)) message.content = null;
    const shown = plan.includeReasoning ? split.reasoning : null;
    if (plan.reasoning) Object.assign(message, { reasoning: shown, reasoning_content: shown });
    return {
      index,
      message,
      logprobs: plan.settings.logprobs === null ? null : { content: c.entries.map((e) => chatLogprob(e, generator.tokenizer)), refusal: null },
      finish_reason: parsed.calls.length > 0 ? 'tool_calls' : c.finish,
    };
  });
  const completionTokens = texts.reduce((sum, c) => sum + c.tokens, 0);
  return { ...meta, object: 'chat.completion', choices, usage: usage(completionTokens, cachedTokens) };
}

/** parallel_tool_calls false: the first call only. */
function keepCalls(parse: ToolParse, parallel: boolean): ToolParse {
  return parallel || parse.calls.length <= 1 ? parse : { content: parse.content, calls: parse.calls.slice(0, 1) };
}

type ChunkMeta = Omit<ChatCompletionChunk, 'choices' | 'usage'>;

/** One choice's stream state: its parsers, the calls sent so far, and logprobs not yet sent. */
interface StreamedChoice {
  thinking: ReasoningStream | null;
  parser: ToolCallStream | null;
  calls: number;
  entries: LogprobEntry[];
}

async function* streamChat(
  generator: TextGenerator,
  plan: ChatPlan,
  meta: ChunkMeta,
  usage: (completionTokens: number, cachedTokens: number) => CompletionUsage,
  includeUsage: boolean,
  signal: AbortSignal | undefined,
): AsyncGenerator<ChatCompletionChunk, void, void> {
  const withLogprobs = plan.settings.logprobs !== null;
  const chunk = (index: number, delta: ChatDelta, state: StreamedChoice | null, finish: ChatFinishReason | null = null): ChatCompletionChunk => {
    const entries = state ? state.entries.splice(0) : [];
    return {
      ...meta,
      choices: [{ index, delta, logprobs: withLogprobs && entries.length > 0 ? { content: entries.map((e) => chatLogprob(e, generator.tokenizer)), refusal: null } : null, finish_reason: finish }],
      ...(includeUsage ? { usage: null } : {}),
    };
  };
  const states = new Map<number, StreamedChoice>();
  let completionTokens = 0;
  let cachedTokens = 0;
  for await (const piece of runPrompt(generator, plan.prompt, plan.settings, signal)) {
    const index = piece.sequence;
    let state = states.get(index);
    if (!state) {
      state = {
        thinking: plan.reasoning ? new ReasoningStream(plan.reasoning.tags, plan.reasoning.start) : null,
        parser: plan.format === null ? null : new ToolCallStream(plan.format),
        calls: 0,
        entries: [],
      };
      states.set(index, state);
      yield chunk(index, { role: 'assistant', content: '' }, null);
      if (plan.echo) yield chunk(index, { content: plan.echo }, null);
    }
    appendEntries(state.entries, piece.entries);
    // The thinking first, then the answer's calls.
    const split = state.thinking ? state.thinking.push(piece.text) : { reasoning: '', content: piece.text };
    if (piece.end && state.thinking) {
      const tail = state.thinking.finish();
      split.reasoning += tail.reasoning;
      split.content += tail.content;
    }
    if (split.reasoning && plan.includeReasoning) yield chunk(index, { reasoning: split.reasoning, reasoning_content: split.reasoning }, state);
    const outs = [state.parser ? state.parser.push(split.content) : { content: split.content, calls: [] }];
    if (piece.end && state.parser) outs.push(state.parser.finish());
    for (const out of outs) {
      if (out.content) yield chunk(index, { content: out.content }, state);
      for (const call of out.calls) {
        if (!plan.parallelToolCalls && state.calls > 0) continue;
        const { id, type, function: fn } = toolCall(call);
        yield chunk(index, { tool_calls: [{ index: state.calls, id, type, function: { name: fn.name, arguments: '' } }] }, null);
        yield chunk(index, { tool_calls: [{ index: state.calls, function: { arguments: fn.arguments } }] }, state);
        state.calls++;
      }
    }
    if (piece.end) {
      completionTokens += piece.end.completionTokens;
      cachedTokens = piece.end.cachedTokens;
      yield chunk(index, {}, state, state.calls > 0 ? 'tool_calls' : piece.end.finishReason);
    }
  }
  if (includeUsage) yield { ...meta, choices: [], usage: usage(completionTokens, cachedTokens) };
}
