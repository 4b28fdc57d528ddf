// Timing one streamed completion, the same way in Node (engine.complete) and in the page (fetch
// through the shim, server-sent events). Browser-safe: demo/bench.ts imports it too.

/** A streamed completion chunk, as much of it as the bench reads. */
export interface CompletionChunk {
  choices?: { text?: string; finish_reason?: string | null }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
  error?: { message: string };
}

export interface RunTiming {
  /** From sending the request to the first chunk carrying text. */
  firstTokenMs: number;
  /** From sending the request to the last chunk carrying text. */
  lastTokenMs: number;
  /** From sending the request to the end of the stream. */
  totalMs: number;
  textChunks: number;
  /** From usage (stream_options.include_usage); -1 when the stream carried none. */
  promptTokens: number;
  completionTokens: number;
  finishReason: string | null;
  text: string;
}

/** Consumes `chunks` (started at `start`, a performance.now() value) and times them. */
export async function timeChunks(start: number, chunks: AsyncIterable<CompletionChunk>): Promise<RunTiming> {
  const t: RunTiming = {
    firstTokenMs: -1,
    lastTokenMs: -1,
    totalMs: -1,
    textChunks: 0,
    promptTokens: -1,
    completionTokens: -1,
    finishReason: null,
    text: '',
  };
  for await (const chunk of chunks) {
    if (chunk.error) throw new Error(chunk.error.message);
    const now = performance.now() - start;
    for (const choice of chunk.choices ?? []) {
      if (choice.text) {
        if (t.firstTokenMs < 0) t.firstTokenMs = now;
        t.lastTokenMs = now;
        t.textChunks++;
        t.text += choice.text;
      }
      if (choice.finish_reason) t.finishReason = choice.finish_reason;
    }
    if (chunk.usage) {
      t.promptTokens = chunk.usage.prompt_tokens;
      t.completionTokens = chunk.usage.completion_tokens;
    }
  }
  t.totalMs = performance.now() - start;
  if (t.firstTokenMs < 0) t.firstTokenMs = t.lastTokenMs = t.totalMs;
  return t;
}

