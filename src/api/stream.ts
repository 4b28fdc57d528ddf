// From token ids to text: incremental detokenization, then stop strings. Both the streamed and
// the one-body response are built on generateText, so they carry the same text.
// Browser code: nothing here may import Node modules.
import type { FinishReason, GenerationRequest, TextGenerator } from '../engine/types.ts';
import { IncrementalDetokenizer } from './detokenize.ts';

/**
 * Finds stop strings in text that arrives in pieces. Text that could be the start of a stop
 * string is held back until it is known not to be one, so no part of a stop string is ever
 * emitted, however it is split across pieces. The stop string itself is never emitted.
 */
export class StopStringMatcher {
  private pending = '';
  private done = false;

  constructor(private readonly stops: readonly string[]) {}

  /** Whether a stop string was found. */
  get stopped(): boolean {
    return this.done;
  }

  /** Adds text; returns what can be emitted now, and whether a stop string was found (then the text before it). */
  push(text: string): { text: string; stopped: boolean } {
    if (this.done) return { text: '', stopped: true };
    this.pending += text;
    if (this.stops.length === 0) return { text: this.take(this.pending.length), stopped: false };
    let first = -1;
    for (const stop of this.stops) {
      const at = this.pending.indexOf(stop);
      if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    if (first >= 0) {
      const out = this.pending.slice(0, first);
      this.pending = '';
      this.done = true;
      return { text: out, stopped: true };
    }
    return { text: this.take(this.pending.length - this.partialStopLength()), stopped: false };
  }

  /** The held-back text, once no more text will come. */
  flush(): string {
    return this.done ? '' : this.take(this.pending.length);
  }

  /** Length of the longest end of `pending` that is a proper prefix of a stop string. */
  private partialStopLength(): number {
    let longest = 0;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, this.pending.length); k > longest; k--) {
        if (this.pending.endsWith(stop.slice(0, k))) {
          longest = k;
          break;
        }
      }
    }
    return longest;
  }

  private take(n: number): string {
    const out = this.pending.slice(0, n);
    this.pending = this.pending.slice(n);
    return out;
  }
}

/** A generation request with stop strings. */
export interface TextGenerationRequest extends GenerationRequest {
  /** Strings that end the text (not included in it). */
  stop: readonly string[];
}

/** How a text generation ended. */
export interface TextGenerationResult {
  /** 'stop' for a stop token or a stop string, 'length' for maxTokens. */
  finishReason: FinishReason;
  /** Tokens the generator produced (a stop token is not counted; the one completing a stop string is). */
  completionTokens: number;
  /** The last piece of text, not yielded: what was held back until the end (may be ''). */
  text: string;
}

/**
 * Runs `generator.generate` and yields the completion text piece by piece (never ''); the
 * return value carries the finish reason, the token count and the last piece. On a stop string
 * the generator is ended at once (its return() frees the GPU), as it is when the consumer stops
 * early. Errors of the generator (an abort included) propagate.
 */
export async function* generateText(
  generator: TextGenerator,
  request: TextGenerationRequest,
): AsyncGenerator<string, TextGenerationResult, void> {
  const { stop, ...generation } = request;
  if (request.maxTokens <= 0) return { finishReason: 'length', completionTokens: 0, text: '' };
  const detokenizer = new IncrementalDetokenizer(generator.tokenizer, request.promptTokens);
  const matcher = new StopStringMatcher(stop);
  const tokens = generator.generate(generation);
  let completionTokens = 0;
  let finishReason: FinishReason;
  try {
    for (;;) {
      request.signal?.throwIfAborted();
      const step = await tokens.next();
      if (step.done) {
        finishReason = step.value;
        break;
      }
      completionTokens++;
      const delta = detokenizer.push(step.value);
      if (!delta) continue;
      const { text, stopped } = matcher.push(delta);
      if (stopped) return { finishReason: 'stop', completionTokens, text };
      if (text) yield text;
    }
  } finally {
    // Ends the generation when we stop early (stop string, consumer gone, error); a no-op otherwise.
    // A failure while ending it must not hide the error that got us here.
    await tokens.return('stop').catch(() => {});
  }
  const { text, stopped } = matcher.push(detokenizer.flush());
  if (stopped) return { finishReason: 'stop', completionTokens, text };
  return { finishReason, completionTokens, text: text + matcher.flush() };
}
