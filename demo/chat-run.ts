// One request to /v1/chat/completions as any client sends it: plain fetch, server-sent
// `chat.completion.chunk` events for a stream, the OpenAI error object for a failure. The page's
// fetch shim answers it.
import type { ChatCompletion, ChatCompletionChunk, ChatTokenLogprob, ChatToolCall, ChatToolCallDelta, CompletionUsage } from '../src/index.ts';
import { ApiRequestError, postApi } from './completion-run.ts';
import { sseJson } from './sse.ts';

/** A message of the conversation as the demo keeps it (the API takes more forms). */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
  /** The assistant's thinking (a model that thinks), sent back with its reply. */
  reasoning?: string;
}

/** The OpenAI error object, as the API sends it (in a stream: an event of its own). */
interface ApiErrorBody {
  error: { message: string; type?: string; param?: string | null; code?: string | null };
}

export interface ChatListener {
  /** A piece of one choice's content, with its tokens' logprobs (null without logprobs). */
  content(index: number, text: string, logprobs: ChatTokenLogprob[] | null): void;
  /** A piece of one of a choice's tool calls (a whole call when the response is not streamed). */
  toolCall(index: number, delta: ChatToolCallDelta): void;
  /** A piece of one choice's thinking (a model that thinks: `reasoning`, apart from the content). */
  reasoning?(index: number, text: string): void;
  finish(index: number, reason: string): void;
  /** Each streamed chunk, as it came. */
  chunk?(chunk: ChatCompletionChunk): void;
}

export interface ChatResult {
  /** The response object (not streamed). */
  response?: ChatCompletion;
  usage?: CompletionUsage;
}

export async function runChat(body: Record<string, unknown>, signal: AbortSignal, listener: ChatListener): Promise<ChatResult> {
  const response = await postApi('/v1/chat/completions', body, signal);
  if (!body.stream) {
    const completion = (await response.json()) as ChatCompletion;
    for (const choice of completion.choices) {
      const { content, tool_calls, reasoning } = choice.message;
      if (reasoning != null) listener.reasoning?.(choice.index, reasoning);
      // The logprobs cover the thinking's tokens too: the content's token view shows them only without thinking.
      listener.content(choice.index, content ?? '', reasoning == null ? (choice.logprobs?.content ?? null) : null);
      tool_calls?.forEach((call, index) => listener.toolCall(choice.index, { index, ...call }));
      listener.finish(choice.index, choice.finish_reason);
    }
    return { response: completion, usage: completion.usage };
  }
  let usage: CompletionUsage | undefined;
  for await (const chunk of sseJson<ChatCompletionChunk & Partial<ApiErrorBody>>(response)) {
    listener.chunk?.(chunk);
    // An error in the middle of a stream comes as an event of its own.
    if (chunk.error) throw new ApiRequestError(response.status, { error: chunk.error }, true);
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const { content, tool_calls, reasoning } = choice.delta;
      if (reasoning) listener.reasoning?.(choice.index, reasoning);
      // A thinking delta's logprobs are the thinking's tokens', not the content's.
      const logprobs = reasoning ? null : (choice.logprobs?.content ?? null);
      if (content || logprobs?.length) listener.content(choice.index, content ?? '', logprobs);
      for (const call of tool_calls ?? []) listener.toolCall(choice.index, call);
      if (choice.finish_reason) listener.finish(choice.index, choice.finish_reason);
    }
  }
  return { usage };
}
