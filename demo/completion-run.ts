// One request to /v1/completions as any client sends it: plain fetch, server-sent events for a
// stream, the OpenAI error object for a failure. The page's fetch shim answers it.
import type { CompletionChunk, CompletionLogprobs, CompletionResponse, CompletionUsage } from '../src/index.ts';
import { sseJson } from './sse.ts';

/** The OpenAI error object, as the API sends it. */
interface ApiErrorBody {
  error: { message: string; type?: string; param?: string | null; code?: string | null };
}

/**
 * An error answer of the API: its status and error object. `inStream`: an error event in the
 * middle of a stream, whose HTTP status (200) was sent before anything went wrong.
 */
export class ApiRequestError extends Error {
  constructor(
    readonly status: number,
    readonly body: ApiErrorBody | null,
    readonly inStream = false,
  ) {
    const e = body?.error;
    const where = e?.param ? ` (param: ${e.param})` : '';
    const kind = [e?.type, e?.code].filter(Boolean).join(', ');
    const head = inStream ? `Error event in the stream${kind ? ` (${kind})` : ''}` : `${status}${kind ? ` ${kind}` : ''}`;
    super(e ? `${head}${where}: ${e.message}` : `HTTP ${status}`);
    this.name = 'ApiRequestError';
  }
}

export interface CompletionListener {
  /** A piece of one choice's text, with its tokens' logprobs (null without logprobs). */
  text(index: number, text: string, logprobs: CompletionLogprobs | null): void;
  finish(index: number, reason: string): void;
  /** Each streamed chunk, as it came. */
  chunk?(chunk: CompletionChunk): void;
}

export interface CompletionResult {
  /** The response object (not streamed). */
  response?: CompletionResponse;
  /** The usage, when the response (or the stream's last chunk) gave it. */
  usage?: CompletionUsage;
}

/** POSTs `body` as JSON to `path`; an error status throws an ApiRequestError with the error body. */
export async function postApi(path: string, body: Record<string, unknown>, signal: AbortSignal): Promise<Response> {
  const response = await fetch(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) throw new ApiRequestError(response.status, await response.json().catch(() => null));
  return response;
}

export async function runCompletion(body: Record<string, unknown>, signal: AbortSignal, listener: CompletionListener): Promise<CompletionResult> {
  const response = await postApi('/v1/completions', body, signal);
  if (!body.stream) {
    const completion = (await response.json()) as CompletionResponse;
    for (const choice of completion.choices) {
      listener.text(choice.index, choice.text, choice.logprobs);
      listener.finish(choice.index, choice.finish_reason);
    }
    return { response: completion, usage: completion.usage };
  }
  let usage: CompletionUsage | undefined;
  for await (const chunk of sseJson<CompletionChunk & Partial<ApiErrorBody>>(response)) {
    listener.chunk?.(chunk);
    // An error in the middle of a stream comes as an event of its own.
    if (chunk.error) throw new ApiRequestError(response.status, { error: chunk.error }, true);
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      listener.text(choice.index, choice.text, choice.logprobs);
      if (choice.finish_reason) listener.finish(choice.index, choice.finish_reason);
    }
  }
  return { usage };
}

/** Time to first token and decode speed of a request, live. */
export class LiveStats {
  private readonly started = performance.now();
  private firstTokenAt: number | null = null;
  private lastTokenAt = 0;
  tokens = 0;
  /** The prompt's tokens and how many of them the prefix cache held (from the usage, when given). */
  prompt: { tokens: number; cached: number } | null = null;

  /** Takes the counts of a response's (or the stream's last chunk's) usage. */
  setUsage(usage: CompletionUsage): void {
    this.tokens = usage.completion_tokens;
    this.prompt = { tokens: usage.prompt_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0 };
  }

  /** `count` more generated tokens arrived. */
  add(count: number): void {
    if (count <= 0) return;
    const now = performance.now();
    this.firstTokenAt ??= now;
    this.lastTokenAt = now;
    this.tokens += count;
  }

  get ttftMs(): number | null {
    return this.firstTokenAt === null ? null : this.firstTokenAt - this.started;
  }

  /** Tokens after the first, per second since the first: the decode speed. */
  get tokensPerSecond(): number | null {
    if (this.firstTokenAt === null || this.tokens < 2 || this.lastTokenAt <= this.firstTokenAt) return null;
    return (this.tokens - 1) / ((this.lastTokenAt - this.firstTokenAt) / 1000);
  }

  get elapsedSeconds(): number {
    return (performance.now() - this.started) / 1000;
  }

  describe(): string {
    const ttft = this.ttftMs;
    const speed = this.tokensPerSecond;
    return [
      `time to first token ${ttft === null ? '…' : `${Math.round(ttft)} ms`}`,
      `${this.tokens} tokens`,
      `${speed === null ? '…' : speed.toFixed(1)} tokens/s`,
      ...(this.prompt ? [`prompt ${this.prompt.tokens} tokens, ${this.prompt.cached} cached`] : []),
    ].join(' · ');
  }
}
