// Timing one streamed completion, the same way in Node (engine.complete), in the page (fetch
// through the shim, server-sent events) and for wllama (its streamed completion chunks); and the
// statistics the bench reports. Browser-safe: the bench pages import it too.

/** A streamed completion chunk, as much of it as the bench reads. */
export interface CompletionChunk {
  choices?: { text?: string; finish_reason?: string | null }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
  error?: { message: string };
}

export interface RunTiming<S = never> {
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
  /** usage.prompt_tokens_details.cached_tokens: prompt tokens reused from the prefix cache; -1 when the usage had none. */
  cachedTokens?: number;
  finishReason: string | null;
  text: string;
  /** snapshot() taken when the first text chunk arrived, and at the end of the stream. */
  atFirstToken?: S;
  atEnd?: S;
}

/**
 * Consumes `chunks` (started at `start`, a performance.now() value) and times them. `snapshot`
 * (GPU counters) is read as the first text arrives and when the stream ends: between the two the
 * device did the decode steps of every token after the first, and nothing else.
 */
export async function timeChunks<S = never>(start: number, chunks: AsyncIterable<CompletionChunk>, snapshot?: () => S): Promise<RunTiming<S>> {
  const t: RunTiming<S> = {
    firstTokenMs: -1,
    lastTokenMs: -1,
    totalMs: -1,
    textChunks: 0,
    promptTokens: -1,
    completionTokens: -1,
    cachedTokens: -1,
    finishReason: null,
    text: '',
  };
  for await (const chunk of chunks) {
    if (chunk.error) throw new Error(chunk.error.message);
    const now = performance.now() - start;
    for (const choice of chunk.choices ?? []) {
      if (choice.text) {
        if (t.firstTokenMs < 0) {
          t.firstTokenMs = now;
          if (snapshot) t.atFirstToken = snapshot();
        }
        t.lastTokenMs = now;
        t.textChunks++;
        t.text += choice.text;
      }
      if (choice.finish_reason) t.finishReason = choice.finish_reason;
    }
    if (chunk.usage) {
      t.promptTokens = chunk.usage.prompt_tokens;
      t.completionTokens = chunk.usage.completion_tokens;
      t.cachedTokens = chunk.usage.prompt_tokens_details?.cached_tokens ?? -1;
    }
  }
  t.totalMs = performance.now() - start;
  if (snapshot) t.atEnd = snapshot();
  if (t.firstTokenMs < 0) t.firstTokenMs = t.lastTokenMs = t.totalMs;
  return t;
}

/** Tokens the run decoded: usage's count, else one per text chunk. */
export function decodedTokens(t: RunTiming<unknown>): number {
  return t.completionTokens >= 0 ? t.completionTokens : t.textChunks;
}

export interface Stat {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

export const round = (x: number, digits = 1): number => (Number.isFinite(x) ? Number(x.toFixed(digits)) : x);

export function stat(values: number[], digits = 1): Stat {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length === 0 ? NaN : s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median: round(median, digits), min: round(s[0] ?? NaN, digits), max: round(s.at(-1) ?? NaN, digits), runs: values.map((v) => round(v, digits)) };
}
