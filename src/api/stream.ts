// From generated tokens to the text of choices: incremental detokenization, stop strings,
// logprobs, echo, one session per prompt with its sequences one after another. Both the streamed
// and the one-body response are built on runPrompt's pieces, so they carry the same text and
// the same logprobs.
// Browser code: nothing here may import Node modules.
import type {
  FinishReason,
  GeneratedToken,
  GenerationSession,
  SamplingParams,
  TextGenerator,
  TokenConstraint,
} from '../engine/types.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { IncrementalDetokenizer, PROMPT_CONTEXT_TOKENS } from './detokenize.ts';
import { finiteLogprob, topLogprobsObject, type LogprobEntry } from './logprobs.ts';
import { ReasoningGate, type ReasoningGateOptions } from '../engine/reasoning-constraint.ts';
import { sequenceConstraint, type CompiledRequestStructure } from './structured-output.ts';

/**
 * Finds stop strings in text that arrives in pieces. Text that could be the start of a stop
 * string is held back until it is known not to be one, so no part of a stop string is ever
 * emitted, however it is split across pieces. The stop string itself is emitted only with
 * `includeStop`. While not `armed` (min_tokens not reached yet), stop strings are not looked
 * for, but possible starts of one are still held back: a stop string completed once armed
 * counts, even if it began earlier. Of the stop strings whole in the held-back text, the one
 * that starts first wins (the longer one on a tie).
 *
 * Each stop string runs a Knuth-Morris-Pratt automaton over the text as it comes, so a piece
 * costs its length times the number of stop strings, however long the stop strings and the
 * held-back text grow (rescanning the held-back text with indexOf / endsWith at every piece was
 * quadratic to cubic in it: a long stop string that keeps all text back could stall the engine).
 */
export class StopStringMatcher {
  private pending = '';
  /** Characters (UTF-16 units) pushed so far: pending starts at consumed - pending.length. */
  private consumed = 0;
  private done = false;
  private readonly automata: StopAutomaton[];
  /** Whether stop strings end the text now (false before min_tokens). */
  armed = true;

  constructor(
    stops: readonly string[],
    private readonly options: { includeStop?: boolean } = {},
  ) {
    this.automata = stops.filter((stop) => stop.length > 0).map((stop) => new StopAutomaton(stop));
  }

  /** Whether a stop string was found. */
  get stopped(): boolean {
    return this.done;
  }

  /** Adds text; returns what can be emitted now, and whether a stop string was found (then the text before it, or through it with includeStop). */
  push(text: string): { text: string; stopped: boolean } {
    if (this.done) return { text: '', stopped: true };
    this.pending += text;
    if (this.automata.length === 0) return { text: this.take(this.pending.length), stopped: false };
    for (const automaton of this.automata) automaton.feed(text, this.consumed);
    this.consumed += text.length;
    const pendingStart = this.consumed - this.pending.length;
    if (this.armed) {
      let first: StopAutomaton | undefined;
      let firstAt = -1;
      for (const automaton of this.automata) {
        const at = automaton.firstOccurrence(pendingStart);
        if (at < 0) continue;
        if (!first || at < firstAt || (at === firstAt && automaton.stop.length > first.stop.length)) [first, firstAt] = [automaton, at];
      }
      if (first) {
        const at = firstAt - pendingStart;
        const out = this.pending.slice(0, this.options.includeStop ? at + first.stop.length : at);
        this.pending = '';
        this.done = true;
        return { text: out, stopped: true };
      }
    }
    // Hold back the longest end of the text that is a proper prefix of a stop string.
    let partial = 0;
    for (const automaton of this.automata) partial = Math.max(partial, automaton.state);
    const out = this.take(this.pending.length - Math.min(partial, this.pending.length));
    for (const automaton of this.automata) automaton.firstOccurrence(this.consumed - this.pending.length); // forget the emitted ones
    return { text: out, stopped: false };
  }

  /** The held-back text, once no more text will come. */
  flush(): string {
    return this.done ? '' : this.take(this.pending.length);
  }

  private take(n: number): string {
    const out = this.pending.slice(0, n);
    this.pending = this.pending.slice(n);
    return out;
  }
}

/** One stop string's matcher over a stream of text (Knuth-Morris-Pratt). */
class StopAutomaton {
  /** fail[i]: the longest proper border of stop[0 .. i] (a prefix that is also a suffix). */
  private readonly fail: Int32Array;
  /** Length of the longest end of the text fed so far that is a proper prefix of the stop string. */
  state = 0;
  /**
   * Where whole occurrences start (indices into all the text fed), in order, from `head` on. While
   * the matcher is armed the first one ends it; unarmed, the text may go on past several.
   */
  private occurrences: number[] = [];
  private head = 0;

  constructor(readonly stop: string) {
    const fail = new Int32Array(stop.length);
    for (let i = 1, k = 0; i < stop.length; i++) {
      while (k > 0 && stop.charCodeAt(i) !== stop.charCodeAt(k)) k = fail[k - 1];
      if (stop.charCodeAt(i) === stop.charCodeAt(k)) k++;
      fail[i] = k;
    }
    this.fail = fail;
  }

  /** Feeds `text`, which starts at index `offset` of all the text fed. */
  feed(text: string, offset: number): void {
    const { stop, fail } = this;
    let k = this.state;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      while (k > 0 && c !== stop.charCodeAt(k)) k = fail[k - 1];
      if (c === stop.charCodeAt(k)) k++;
      if (k === stop.length) {
        this.occurrences.push(offset + i + 1 - stop.length);
        k = fail[k - 1];
      }
    }
    this.state = k;
  }

  /** The first occurrence that starts at `from` or later (-1: none); those before it are forgotten. */
  firstOccurrence(from: number): number {
    const list = this.occurrences;
    while (this.head < list.length && list[this.head] < from) this.head++;
    if (this.head > 1024 && this.head * 2 > list.length) {
      this.occurrences = list.slice(this.head);
      this.head = 0;
    }
    return this.head < this.occurrences.length ? this.occurrences[this.head] : -1;
  }
}

/** A piece of a choice: text to append, and the logprob entries of the tokens that text completes. */
export interface ChoicePiece {
  text: string;
  entries: LogprobEntry[];
}

export interface ChoiceTextOptions {
  stop: readonly string[];
  includeStop: boolean;
  skipSpecialTokens: boolean;
  /** Stop strings count only once this many tokens were generated. */
  minTokens: number;
  /** Alternatives per token in logprobs; null = no logprobs. */
  logprobs: number | null;
  /** Length of the echoed prompt before the completion (offsets start there). */
  textOffset: number;
}

/**
 * The text and logprobs of one choice, token by token. Each token's entry is released with the
 * piece whose text reaches its end, so streamed chunks carry the logprobs of their own text;
 * the rest (held back by a stop string or an incomplete character) comes with the last piece.
 * Logprobs cover every generated token (as many as the usage counts), also those of a stop
 * string cut from the text: their offsets continue past the end of `text`.
 */
export class ChoiceText {
  private readonly detokenizer: IncrementalDetokenizer;
  private readonly matcher: StopStringMatcher;
  /** Length of the detokenized completion so far (before stop strings cut it), from textOffset. */
  private produced: number;
  /** Length of the text emitted so far, from 0 (echo included). */
  private emitted: number;
  private pending: LogprobEntry[] = [];
  private count = 0;
  private finished = false;

  constructor(
    private readonly tokenizer: TextTokenizer,
    promptTokens: readonly number[],
    private readonly options: ChoiceTextOptions,
  ) {
    this.detokenizer = new IncrementalDetokenizer(tokenizer, promptTokens, PROMPT_CONTEXT_TOKENS, {
      skipSpecialTokens: options.skipSpecialTokens,
    });
    this.matcher = new StopStringMatcher(options.stop, { includeStop: options.includeStop });
    this.matcher.armed = options.minTokens <= 0;
    this.produced = options.textOffset;
    this.emitted = options.textOffset;
  }

  /** Tokens pushed. */
  get tokens(): number {
    return this.count;
  }

  /** Adds a generated token. `stopped`: a stop string ended the choice; `piece` is then its last piece. */
  push(token: GeneratedToken): { piece: ChoicePiece; stopped: boolean } {
    if (this.finished) throw new Error('the choice is finished');
    const k = this.options.logprobs;
    let entry: LogprobEntry | null = null;
    // Alternatives are read before the token joins the text: the text each would have added here.
    const texts = new Map<number, string>();
    if (k !== null) {
      const textOf = (id: number) => this.detokenizer.peek(id, this.tokenizer.isSpecial(id) ? { skipSpecialTokens: false } : {});
      for (const alt of (token.topLogprobs ?? []).slice(0, k)) if (alt.id !== token.id) texts.set(alt.id, textOf(alt.id));
    }
    const text = this.detokenizer.push(token.id);
    if (k !== null) {
      entry = {
        token: text,
        logprob: finiteLogprob(token.logprob),
        top: topLogprobsObject(token, text, token.topLogprobs, k, (id) => texts.get(id) ?? ''),
        offset: this.produced,
        id: token.id,
        alternatives: (token.topLogprobs ?? []).slice(0, k).map((alt) => ({
          id: alt.id,
          token: alt.id === token.id ? text : (texts.get(alt.id) ?? ''),
          logprob: finiteLogprob(alt.logprob),
        })),
      };
      this.pending.push(entry);
    }
    this.produced += text.length;
    this.count++;
    if (this.count >= this.options.minTokens) this.matcher.armed = true;
    const out = this.matcher.push(text);
    this.emitted += out.text.length;
    if (out.stopped) {
      this.finished = true;
      return { piece: { text: out.text, entries: this.release(true) }, stopped: true };
    }
    return { piece: { text: out.text, entries: out.text ? this.release(false) : [] }, stopped: false };
  }

  /** The last piece, once the sequence ended without a stop string: what was held back. */
  finish(): ChoicePiece {
    if (this.finished) return { text: '', entries: this.release(true) };
    this.finished = true;
    const tail = this.detokenizer.flush();
    if (tail) {
      const last = this.pending.at(-1);
      if (last) last.token += tail;
      this.produced += tail.length;
    }
    const out = this.matcher.push(tail);
    const text = out.stopped ? out.text : out.text + this.matcher.flush();
    this.emitted += text.length;
    return { text, entries: this.release(true) };
  }

  private release(all: boolean): LogprobEntry[] {
    let n = 0;
    if (all) n = this.pending.length;
    else while (n < this.pending.length && this.pending[n]!.offset + this.pending[n]!.token.length <= this.emitted) n++;
    return this.pending.splice(0, n);
  }
}

/** What the prompt contributes to each choice with echo: its text and (with logprobs) its entries. */
export interface EchoPart {
  text: string;
  /** null without logprobs. */
  entries: LogprobEntry[] | null;
}

/**
 * The echo of a prompt. Without logprobs: the prompt text as given (token-id prompts: decoded).
 * With logprobs: the prompt decoded token by token, each token with its logprob from the session
 * (the first one null); that decoded text is what `text` starts with, so that text_offset is
 * consistent (it is the prompt as given for every prompt that decodes back to itself).
 */
export function echoPrompt(
  tokenizer: TextTokenizer,
  prompt: { tokens: readonly number[]; text: string | null },
  promptLogprobs: readonly (GeneratedToken | null)[] | undefined,
  logprobs: number | null,
  skipSpecialTokens: boolean,
): EchoPart {
  if (logprobs === null) {
    return { text: prompt.text ?? tokenizer.decode(prompt.tokens, { skipSpecialTokens }), entries: null };
  }
  const detokenizer = new IncrementalDetokenizer(tokenizer, [], 0, { skipSpecialTokens });
  const entries: LogprobEntry[] = [];
  let offset = 0;
  prompt.tokens.forEach((id, i) => {
    const scored = i === 0 ? null : (promptLogprobs?.[i] ?? null);
    let top: Record<string, number> | null = null;
    if (scored) {
      const textOf = (alt: number) => detokenizer.peek(alt, tokenizer.isSpecial(alt) ? { skipSpecialTokens: false } : {});
      const texts = new Map<number, string>();
      for (const alt of (scored.topLogprobs ?? []).slice(0, logprobs)) if (alt.id !== id) texts.set(alt.id, textOf(alt.id));
      const text = detokenizer.push(id);
      top = topLogprobsObject({ id, logprob: scored.logprob }, text, scored.topLogprobs, logprobs, (alt) => texts.get(alt) ?? '');
      entries.push({ token: text, logprob: finiteLogprob(scored.logprob), top, offset });
      offset += text.length;
    } else {
      const text = detokenizer.push(id);
      entries.push({ token: text, logprob: null, top: null, offset });
      offset += text.length;
    }
  });
  const tail = detokenizer.flush();
  if (tail && entries.length > 0) entries[entries.length - 1]!.token += tail;
  return { text: entries.map((e) => e.token).join(''), entries };
}

/** One prompt of a request, ready to run. */
export interface PromptPlan {
  tokens: number[];
  /** The prompt as given when it was text (for echo); null for token ids. */
  text: string | null;
  /** Most tokens per choice. */
  maxTokens: number;
}

/** The settings every prompt of a request shares. */
export interface ChoiceSettings {
  sampling: SamplingParams;
  /** Sequences per prompt (best_of, or n). */
  sequences: number;
  stopTokenIds: readonly number[];
  minTokens: number;
  stop: readonly string[];
  includeStop: boolean;
  skipSpecialTokens: boolean;
  logprobs: number | null;
  echo: boolean;
  /** Whether the prompt may reuse cached K/V and leave its own (SessionRequest.cachePrompt). */
  cachePrompt: boolean;
  /** Structured output: each sequence gets its own constraint from it. */
  structure?: CompiledRequestStructure;
  /** A reply that may think: the structure applies from the first token after the thinking (ReasoningGate). */
  reasoningGate?: ReasoningGateOptions;
}

/** A piece of sequence `sequence` of a prompt; `end` on its last piece. */
export interface SequencePiece extends ChoicePiece {
  sequence: number;
  end?: SequenceEnd;
}

export interface SequenceEnd {
  finishReason: FinishReason;
  /** Tokens generated (a stop token is not one; every token of a stop string is). */
  completionTokens: number;
  /** Sum of the generated tokens' logprobs (for best_of). */
  logprobSum: number;
  /** The prompt's tokens whose K/V was reused (the same for every sequence of the prompt). */
  cachedTokens: number;
}

/**
 * Runs one prompt: opens ONE session (one prefill, shared), then decodes sequences 0..sequences-1
 * at once (`session.sequence({index: j})`, which seeds sequence j by (seed, j)), and yields each
 * sequence's pieces in order (those of different sequences interleaved as they come): the echo first, then text as it becomes final, and a
 * last piece carrying `end` (never an empty piece otherwise). The session is closed when done,
 * on errors and when the consumer stops early; `signal` aborts at the next token.
 */
export async function* runPrompt(
  generator: TextGenerator,
  prompt: PromptPlan,
  settings: ChoiceSettings,
  signal?: AbortSignal,
): AsyncGenerator<SequencePiece, void, void> {
  const needPromptLogprobs = settings.echo && settings.logprobs !== null;
  const generates = prompt.maxTokens > 0;
  let session: GenerationSession | null = null;
  if (generates || needPromptLogprobs) {
    signal?.throwIfAborted();
    session = await generator.openSession({
      promptTokens: prompt.tokens,
      sampling: settings.sampling,
      ...(settings.logprobs !== null ? { logprobs: settings.logprobs } : {}),
      ...(needPromptLogprobs ? { promptLogprobs: true } : {}),
      ...(settings.cachePrompt ? {} : { cachePrompt: false }),
      ...(settings.sequences > 1 ? { sequences: settings.sequences } : {}),
      ...(signal ? { signal } : {}),
    });
  }
  try {
    const echo = settings.echo
      ? echoPrompt(generator.tokenizer, prompt, session?.promptLogprobs, settings.logprobs, settings.skipSpecialTokens)
      : null;
    const sequences = Array.from({ length: settings.sequences }, (_, j) => runSequence(generator.tokenizer, session, j, prompt, settings, echo, signal));
    if (sequences.length === 1) {
      yield* sequences[0]!;
      return;
    }
    // The sequences decode at once (rows of the engine's batch): their pieces come as they are made.
    try {
      yield* interleave(sequences);
    } finally {
      session?.close();
      await Promise.all(sequences.map((s) => s.return().catch(() => {})));
    }
  } finally {
    session?.close();
  }
}

/** The items of several generators as each comes, each generator's in order; the first error ends it. */
async function* interleave<T>(generators: AsyncGenerator<T, void, void>[]): AsyncGenerator<T, void, void> {
  // A pull never rejects: one that fails while the caller is paused at a yield is not left unhandled.
  const pull = (i: number) =>
    generators[i]!.next().then(
      (result) => ({ result, i, error: undefined }),
      (error: unknown) => ({ result: undefined, i, error: error ?? new Error('a sequence failed') }),
    );
  const pending = new Map(generators.map((_, i) => [i, pull(i)]));
  try {
    while (pending.size > 0) {
      const { result, i, error } = await Promise.race(pending.values());
      if (!result) {
        pending.delete(i);
        throw error;
      }
      if (result.done) {
        pending.delete(i);
        continue;
      }
      pending.set(i, pull(i));
      yield result.value;
    }
  } finally {
    // Stopped early (the caller returned, or one sequence threw): the others' next tokens are
    // awaited by no one, and they end once those come (or fail, as the closed session makes them).
    for (const i of pending.keys()) generators[i]!.return(undefined).catch(() => {});
  }
}

async function* runSequence(
  tokenizer: TextTokenizer,
  session: GenerationSession | null,
  index: number,
  prompt: PromptPlan,
  settings: ChoiceSettings,
  echo: EchoPart | null,
  signal: AbortSignal | undefined,
): AsyncGenerator<SequencePiece, void, void> {
  const head: ChoicePiece = { text: echo?.text ?? '', entries: echo?.entries ? echo.entries.map((e) => ({ ...e })) : [] };
  const choice = new ChoiceText(tokenizer, prompt.tokens, {
    stop: settings.stop,
    includeStop: settings.includeStop,
    skipSpecialTokens: settings.skipSpecialTokens,
    minTokens: settings.minTokens,
    logprobs: settings.logprobs,
    textOffset: head.text.length,
  });
  if (!session || prompt.maxTokens <= 0) {
    yield { sequence: index, ...head, end: { finishReason: 'length', completionTokens: 0, logprobSum: 0, cachedTokens: session?.cachedTokens ?? 0 } };
    return;
  }
  // The sequence's own constraint, disposed of however the sequence ends (after the engine's generator has).
  const structure = settings.structure ? await sequenceConstraint(settings.structure, settings.stopTokenIds) : undefined;
  const constraint = structure && settings.reasoningGate ? new ReasoningGate(structure, tokenizer, settings.reasoningGate) : structure;
  try {
    if (head.text || head.entries.length > 0) yield { sequence: index, ...head };
    signal?.throwIfAborted();
    yield* decodeSequence(session, index, prompt, settings, choice, constraint, signal);
  } finally {
    constraint?.dispose();
  }
}

/** Decodes one sequence of the session into the choice's pieces, the last one with `end`. */
async function* decodeSequence(
  session: GenerationSession,
  index: number,
  prompt: PromptPlan,
  settings: ChoiceSettings,
  choice: ChoiceText,
  constraint: TokenConstraint | undefined,
  signal: AbortSignal | undefined,
): AsyncGenerator<SequencePiece, void, void> {
  const tokens = session.sequence({
    index,
    maxTokens: prompt.maxTokens,
    stopTokenIds: settings.stopTokenIds,
    ...(settings.minTokens > 0 ? { minTokens: settings.minTokens } : {}),
    ...(constraint ? { constraint } : {}),
  });
  let logprobSum = 0;
  try {
    for (;;) {
      signal?.throwIfAborted();
      const step = await tokens.next();
      if (step.done) {
        const last = choice.finish();
        yield { sequence: index, ...last, end: { finishReason: step.value, completionTokens: choice.tokens, logprobSum, cachedTokens: session.cachedTokens } };
        return;
      }
      logprobSum += step.value.logprob;
      const { piece, stopped } = choice.push(step.value);
      if (stopped) {
        yield { sequence: index, ...piece, end: { finishReason: 'stop', completionTokens: choice.tokens, logprobSum, cachedTokens: session.cachedTokens } };
        return;
      }
      if (piece.text || piece.entries.length > 0) yield { sequence: index, ...piece };
    }
  } finally {
    // Ends the sequence when we stop early (stop string, consumer gone, error); a no-op otherwise.
    // A failure while ending it must not hide the error that got us here.
    await tokens.return('stop').catch(() => {});
  }
}
