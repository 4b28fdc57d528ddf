// One request to /v1/chat/completions as any client sends it: plain fetch, server-sent
// `chat.completion.chunk` events for a stream, the OpenAI error object for a failure. The page's
// fetch shim answers it. The shapes below are OpenAI's chat API, written out for the demo.
import { ApiRequestError } from './completion-run.ts';
import { sseJson } from './sse.ts';

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A piece of a tool call in a stream: the first piece of a call has its id, type and name. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

export interface ChatTopLogprob {
  token: string;
  logprob: number;
  /** The token's UTF-8 bytes (null where a token has no byte form). */
  bytes: number[] | null;
}

export interface ChatLogprobEntry extends ChatTopLogprob {
  top_logprobs: ChatTopLogprob[];
}

export interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** A message of the conversation, as the API takes it (and gives the assistant's). */
export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
}

interface ChatChunkChoice {
  index: number;
  delta: { role?: string; content?: string | null; tool_calls?: ToolCallDelta[]; refusal?: string | null };
  logprobs?: { content: ChatLogprobEntry[] | null } | null;
  finish_reason: string | null;
}

export interface ChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  choices: ChatChunkChoice[];
  usage?: ChatUsage | null;
  error?: { message: string; type?: string; param?: string | null; code?: string | null };
}

export interface ChatResponse {
  id: string;
  object: 'chat.completion';
  choices: { index: number; message: ChatMessage; logprobs?: { content: ChatLogprobEntry[] | null } | null; finish_reason: string }[];
  usage: ChatUsage;
}

export interface ChatListener {
  /** A piece of one choice's content, with its tokens' logprobs (null without logprobs). */
  content(index: number, text: string, logprobs: ChatLogprobEntry[] | null): void;
  /** A piece of one of a choice's tool calls (a whole call when the response is not streamed). */
  toolCall(index: number, delta: ToolCallDelta): void;
  finish(index: number, reason: string): void;
  /** Each streamed chunk, as it came. */
  chunk?(chunk: ChatChunk): void;
}

export interface ChatResult {
  /** The response object (not streamed). */
  response?: ChatResponse;
  usage?: ChatUsage;
}

export async function runChat(body: Record<string, unknown>, signal: AbortSignal, listener: ChatListener): Promise<ChatResult> {
  const response = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) throw new ApiRequestError(response.status, await response.json().catch(() => null));
  if (!body.stream) {
    const completion = (await response.json()) as ChatResponse;
    for (const choice of completion.choices) {
      const { content, tool_calls } = choice.message;
      listener.content(choice.index, content ?? '', choice.logprobs?.content ?? null);
      tool_calls?.forEach((call, index) => listener.toolCall(choice.index, { index, ...call }));
      listener.finish(choice.index, choice.finish_reason);
    }
    return { response: completion, usage: completion.usage };
  }
  let usage: ChatUsage | undefined;
  for await (const chunk of sseJson<ChatChunk>(response)) {
    listener.chunk?.(chunk);
    // An error in the middle of a stream comes as an event of its own.
    if (chunk.error) throw new ApiRequestError(response.status, { error: chunk.error }, true);
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const { content, tool_calls } = choice.delta;
      const logprobs = choice.logprobs?.content ?? null;
      if (content || logprobs?.length) listener.content(choice.index, content ?? '', logprobs);
      for (const call of tool_calls ?? []) listener.toolCall(choice.index, call);
      if (choice.finish_reason) listener.finish(choice.index, choice.finish_reason);
    }
  }
  return { usage };
}
