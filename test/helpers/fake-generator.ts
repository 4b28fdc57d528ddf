// A TextGenerator without a model, for testing the request layer: a tiny SentencePiece-like
// tokenizer (▁ for spaces, leading-space stripping, byte-fallback tokens for everything else)
// and a "model" whose logits are a pure function of the token context, sampled exactly as the
// engine contract says (logit_bias -> repetition/presence/frequency penalties -> temperature ->
// top_k -> top_p -> min_p -> draw; greedy = argmax), with real log-softmax logprobs of the raw
// logits, one prefill per session and one seeded random stream per sequence (seed, index). A
// sequence's constraint (structured output) is honoured as the engine does: its jump-forward
// tokens are yielded unsampled (forced: true), its mask applies before the draw, and a mask that
// allows nothing but stop ids ends the sequence with 'stop'.
import { mulberry32 } from './prng.ts';
import { Scheduler, abortError } from '../../src/engine/scheduler.ts';
import type {
  FinishReason,
  GeneratedToken,
  GenerationRequest,
  GenerationSession,
  ModelInfo,
  SamplingParams,
  SequenceOptions,
  SessionRequest,
  TextGenerator,
  TokenLogprob,
} from '../../src/engine/types.ts';
import type { TextTokenizer } from '../../src/tokenizer/types.ts';

export const UNK = 0;
export const BOS = 1;
export const EOS = 2;
const BYTE_BASE = 3; // ids 3..258 are the byte tokens <0x00>..<0xFF>

/** Word pieces after the byte tokens. Chosen so that stop strings split across tokens ('ST' 'OP'),
 * leading spaces ('▁there') and multi-byte characters (byte tokens) can be tested. */
const PIECES = [
  '▁', '▁Once', '▁upon', '▁a', '▁time', '▁there', '▁was', '▁little', '▁robot', '▁named', '▁Bob',
  '▁The', '▁the', '▁end', '▁Hello', '▁world', '▁and', '▁cat', '▁dog', '▁sat', '▁on', '▁mat',
  '.', ',', '!', '?', 'ST', 'OP', 'S', 'T', 'O', 'P', 'END', 'E', 'N', 'D', 'a', 'b', 'c', 'x', 'y', 'z',
  '<|special|>',
] as const;

const SPECIAL_TEXT: Record<number, string> = { [UNK]: '<unk>', [BOS]: '<s>', [EOS]: '</s>' };

export class FakeTokenizer implements TextTokenizer {
  readonly vocab: string[];
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  readonly addBos: boolean;
  private readonly pieceIds = new Map<string, number>();
  private readonly maxPieceLength: number;
  readonly specialId: number;

  constructor(options: { addBos?: boolean } = {}) {
    this.vocab = ['<unk>', '<s>', '</s>'];
    for (let b = 0; b < 256; b++) this.vocab.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    for (const piece of PIECES) {
      this.pieceIds.set(piece, this.vocab.length);
      this.vocab.push(piece);
    }
    this.vocabSize = this.vocab.length;
    this.addBos = options.addBos ?? true;
    this.bosId = this.addBos ? BOS : null;
    this.eosIds = [EOS];
    this.specialId = this.pieceIds.get('<|special|>')!;
    this.maxPieceLength = Math.max(...PIECES.map((p) => p.length));
  }

  /** Id of a word piece ('▁there') or of a byte token (a number 0..255). */
  id(piece: string | number): number {
    if (typeof piece === 'number') return BYTE_BASE + piece;
    const id = this.pieceIds.get(piece);
    if (id === undefined) throw new Error(`no piece ${piece}`);
    return id;
  }

  /** Whether an id is a byte-fallback token. */
  isByte(id: number): boolean {
    return id >= BYTE_BASE && id < BYTE_BASE + 256;
  }

  isSpecial(id: number): boolean {
    return id === UNK || id === BOS || id === EOS || id === this.specialId;
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const ids: number[] = [];
    if (options.addBos ?? this.addBos) ids.push(BOS);
    // SentencePiece: a dummy prefix space, spaces become ▁. Special token text is parsed.
    const parts = text.split(/(<s>|<\/s>)/);
    let first = true;
    for (const part of parts) {
      if (part === '<s>') ids.push(BOS);
      else if (part === '</s>') ids.push(EOS);
      else if (part) {
        // One at a time: spreading a long text's ids as arguments overflows the stack.
        for (const id of this.encodePieces((first ? ' ' : '') + part)) ids.push(id);
      }
      first = false;
    }
    return ids;
  }

  /** Text → ids without BOS or the dummy prefix: what a model would write for `text`. */
  encodePieces(text: string): number[] {
    const s = text.replaceAll(' ', '▁');
    const ids: number[] = [];
    let i = 0;
    while (i < s.length) {
      let matched = 0;
      for (let len = Math.min(this.maxPieceLength, s.length - i); len > 0; len--) {
        const piece = s.slice(i, i + len);
        if (piece !== '<|special|>' && this.pieceIds.has(piece)) {
          ids.push(this.pieceIds.get(piece)!);
          matched = len;
          break;
        }
      }
      if (matched) {
        i += matched;
        continue;
      }
      const cp = s.codePointAt(i)!;
      const ch = String.fromCodePoint(cp);
      for (const byte of new TextEncoder().encode(ch.replaceAll('▁', ' '))) ids.push(BYTE_BASE + byte);
      i += ch.length;
    }
    return ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    let out = '';
    let bytes: number[] = [];
    let atStart = true;
    const flushBytes = () => {
      if (bytes.length) out += new TextDecoder('utf-8', { fatal: false }).decode(new Uint8Array(bytes));
      bytes = [];
    };
    for (const id of ids) {
      if (id < 0 || id >= this.vocabSize) throw new Error(`token id ${id} out of range`);
      if (id >= BYTE_BASE && id < BYTE_BASE + 256) {
        bytes.push(id - BYTE_BASE);
        atStart = false;
        continue;
      }
      flushBytes();
      if (this.isSpecial(id)) {
        if (!options.skipSpecialTokens) out += SPECIAL_TEXT[id] ?? this.vocab[id];
        continue;
      }
      let text = this.vocab[id]!.replaceAll('▁', ' ');
      // Like Llama's decoder: the leading space of the first token is dropped.
      if (atStart && out === '' && text.startsWith(' ')) text = text.slice(1);
      atStart = false;
      out += text;
    }
    flushBytes();
    return out;
  }
}

// ---- the fake model -------------------------------------------------------------------------------

export const DEFAULT_STORY = ' there was a little robot named Bob. The end.';

/** What the script of a sequence may depend on. */
export interface FakeScriptContext {
  session: SessionRequest;
  sequence: SequenceOptions;
}

export interface FakeGeneratorOptions {
  id?: string;
  aliases?: string[];
  contextLength?: number;
  created?: number;
  addBos?: boolean;
  /**
   * What the model writes: text (written as pieces, then EOS), explicit ids (then EOS), or a
   * function of the session and sequence. A script is followed with an overwhelming logit
   * (+30), so any sampling settings reproduce it unless logit_bias or penalties push it aside.
   * Without a script the model is "soft": DEFAULT_STORY then EOS gets a moderate lead (greedy
   * writes it exactly; sampling wanders off it, differently for each seed).
   */
  script?: string | readonly number[] | ((context: FakeScriptContext) => readonly number[]);
  /** Milliseconds before each token. */
  delayMs?: number;
  /** Milliseconds the prefill of a session takes (after it got the GPU). */
  prefillDelayMs?: number;
  /** Throw `new Error('fake GPU failure')` after yielding this many tokens (in each sequence). */
  failAfter?: number;
  /** With failAfter: throw an AbortError instead, as a lost GPU device rejects pending read-backs. */
  failAsAbort?: boolean;
  /** Requests that may wait for the (one) GPU; past it openSession throws QueueFullError. Default 64. */
  maxQueued?: number;
}

export type FakeEndHow = FinishReason | 'aborted' | 'returned' | 'failed';

export type FakeEvent =
  | { kind: 'open'; request: SessionRequest }
  | { kind: 'start'; request: SessionRequest; options: SequenceOptions }
  | { kind: 'end'; how: FakeEndHow; tokens: number; ids: number[] }
  | { kind: 'close' };

/** Lead of the scripted next token over the rest. */
export const SCRIPT_LEAD = 30;
/** Lead of the story's next token in the soft (scriptless) model. */
export const STORY_LEAD = 4.5;


/** A hash of small integers to [-1, 1). */
function hashUnit(a: number, b: number): number {
  let h = Math.imul(a + 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x7f4a7c15, 0xc2b2ae35);
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b);
  h = Math.imul(h ^ (h >>> 13), 0x45d9f3b);
  h ^= h >>> 16;
  return (h >>> 0) / 2147483648 - 1;
}

/** The seed of sequence `index` of a session whose seed is `seed`. */
export function sequenceSeed(seed: number, index: number): number {
  return (Math.imul(Math.floor(seed) | 0, 0x2c1b3c6d) ^ Math.imul(index + 1, 0x297a2d39) ^ Math.floor(seed / 0x100000000)) >>> 0;
}

/**
 * The fake model: logits for the next token after `context`, a pure function of it (prefill and
 * decode agree, as in a real model). Every non-special token gets a context-dependent value
 * (pieces in [-2, 2), bytes around -6, EOS -3, other specials -8); the target — the script (or
 * story) token that continues the longest end of `context` matching a script prefix, EOS once
 * the whole script is matched — gets `lead` on top of the best.
 */
export function fakeLogits(tokenizer: FakeTokenizer, context: readonly number[], script: readonly number[], lead: number): Float64Array {
  const vocab = tokenizer.vocabSize;
  const prev = context.length > 0 ? context[context.length - 1]! : -1;
  const logits = new Float64Array(vocab);
  for (let id = 0; id < vocab; id++) {
    const h = hashUnit(prev, id);
    if (id === EOS) logits[id] = -3 + 0.5 * h;
    else if (tokenizer.isSpecial(id)) logits[id] = -8 + 0.5 * h;
    else if (tokenizer.isByte(id)) logits[id] = -6 + 0.5 * h;
    else logits[id] = 2 * h;
  }
  const target = scriptTarget(context, script);
  logits[target] = lead + 0.5 * hashUnit(prev, target + 7919);
  return logits;
}

/** The script token that continues `context`: script[k] for the longest k whose prefix ends the context; EOS after all of it. */
export function scriptTarget(context: readonly number[], script: readonly number[]): number {
  for (let k = Math.min(script.length, context.length); k > 0; k--) {
    let match = true;
    for (let i = 0; i < k; i++) {
      if (context[context.length - k + i] !== script[i]) {
        match = false;
        break;
      }
    }
    if (match) return k < script.length ? script[k]! : EOS;
  }
  return script.length > 0 ? script[0]! : EOS;
}

/** log-softmax, in float64. */
export function logSoftmax(logits: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - lse;
  return out;
}

/** The `k` most likely tokens, most likely first (the lower id on ties). */
export function topTokens(logprobs: Float64Array, k: number): TokenLogprob[] {
  const order = Array.from(logprobs.keys()).sort((a, b) => logprobs[b]! - logprobs[a]! || a - b);
  return order.slice(0, k).map((id) => ({ id, logprob: logprobs[id]! }));
}

/**
 * The logits the draw sees, from the raw ones, in the contract's order: logit_bias, then the
 * repetition penalty (over prompt and generated tokens), then presence/frequency (generated
 * tokens). `banned` ids (stop ids before min_tokens) get -Infinity.
 */
export function adjustLogits(
  raw: Float64Array,
  sampling: SamplingParams,
  promptTokens: readonly number[],
  generated: readonly number[],
  banned: readonly number[] = [],
): Float64Array {
  const logits = Float64Array.from(raw);
  for (const [id, bias] of sampling.logitBias ?? []) logits[id] = logits[id]! + bias;
  const r = sampling.repetitionPenalty ?? 1;
  if (r !== 1) {
    for (const id of new Set([...promptTokens, ...generated])) logits[id] = logits[id]! > 0 ? logits[id]! / r : logits[id]! * r;
  }
  const counts = new Map<number, number>();
  for (const id of generated) counts.set(id, (counts.get(id) ?? 0) + 1);
  for (const [id, c] of counts) {
    logits[id] = logits[id]! - c * (sampling.frequencyPenalty ?? 0) - (c > 0 ? 1 : 0) * (sampling.presencePenalty ?? 0);
  }
  for (const id of banned) logits[id] = -Infinity;
  return logits;
}

/** temperature -> top_k -> top_p -> min_p -> draw (greedy: argmax, the lowest id on ties). */
export function drawToken(logits: Float64Array, sampling: SamplingParams, random: () => number): number {
  if (sampling.temperature === 0) {
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
    return best;
  }
  let order = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b);
  order = order.filter((id) => logits[id] !== -Infinity);
  const topK = sampling.topK ?? 0;
  if (topK > 0) order = order.slice(0, topK);
  const max = logits[order[0]!]!;
  let probs = order.map((id) => Math.exp((logits[id]! - max) / sampling.temperature));
  const norm = (ps: number[]) => {
    const s = ps.reduce((a, b) => a + b, 0);
    return ps.map((p) => p / s);
  };
  probs = norm(probs);
  const topP = sampling.topP;
  if (topP < 1) {
    let mass = 0;
    let keep = 0;
    while (keep < order.length) {
      mass += probs[keep]!;
      keep++;
      if (mass >= topP) break;
    }
    order = order.slice(0, keep);
    probs = norm(probs.slice(0, keep));
  }
  const minP = sampling.minP ?? 0;
  if (minP > 0) {
    const threshold = minP * probs[0]!;
    const keep = probs.map((p, i) => (p >= threshold ? i : -1)).filter((i) => i >= 0);
    order = keep.map((i) => order[i]!);
    probs = norm(keep.map((i) => probs[i]!));
  }
  const u = random();
  let acc = 0;
  for (let i = 0; i < order.length; i++) {
    acc += probs[i]!;
    if (u < acc) return order[i]!;
  }
  return order[order.length - 1]!;
}

export class FakeGenerator implements TextGenerator {
  readonly info: ModelInfo;
  readonly tokenizer: FakeTokenizer;
  /** What happened, in order: sessions opened and closed, each sequence's start and how it ended. */
  readonly events: FakeEvent[] = [];
  readonly scheduler: Scheduler;
  private readonly options: FakeGeneratorOptions;
  private readonly story: number[];

  constructor(options: FakeGeneratorOptions = {}) {
    this.options = options;
    this.tokenizer = new FakeTokenizer({ addBos: options.addBos ?? true });
    this.story = this.tokenizer.encodePieces(DEFAULT_STORY);
    this.scheduler = new Scheduler(options.maxQueued ?? 64);
    this.info = {
      id: options.id ?? 'fake-llama',
      aliases: options.aliases ?? ['fake'],
      architecture: 'llama',
      contextLength: options.contextLength ?? 64,
      vocabSize: this.tokenizer.vocabSize,
      format: 'gguf',
      created: options.created ?? 1_700_000_000,
    };
  }

  /** Sessions open now (opened, not closed). */
  get active(): number {
    const opens = this.events.filter((e) => e.kind === 'open').length;
    return opens - this.events.filter((e) => e.kind === 'close').length;
  }

  /** How the sequences ended, in order. */
  get endings(): Extract<FakeEvent, { kind: 'end' }>[] {
    return this.events.filter((e): e is Extract<FakeEvent, { kind: 'end' }> => e.kind === 'end');
  }

  /** The sessions opened, in order. */
  get sessions(): SessionRequest[] {
    return this.events.filter((e): e is Extract<FakeEvent, { kind: 'open' }> => e.kind === 'open').map((e) => e.request);
  }

  /** The sequences started, in order. */
  get sequences(): Extract<FakeEvent, { kind: 'start' }>[] {
    return this.events.filter((e): e is Extract<FakeEvent, { kind: 'start' }> => e.kind === 'start');
  }

  /** The script a sequence follows, and the lead it has. */
  script(context: FakeScriptContext): { ids: readonly number[]; lead: number } {
    const script = this.options.script;
    if (typeof script === 'function') return { ids: script(context), lead: SCRIPT_LEAD };
    if (Array.isArray(script)) return { ids: script as readonly number[], lead: SCRIPT_LEAD };
    if (typeof script === 'string') return { ids: this.tokenizer.encodePieces(script), lead: SCRIPT_LEAD };
    return { ids: this.story, lead: STORY_LEAD };
  }

  /** The raw logits after `context` for a sequence following `script` (no script: the soft story model). */
  logits(context: readonly number[], script: { ids: readonly number[]; lead: number } = { ids: this.story, lead: STORY_LEAD }): Float64Array {
    return fakeLogits(this.tokenizer, context, script.ids, script.lead);
  }

  async openSession(request: SessionRequest): Promise<GenerationSession> {
    const { promptTokens, signal } = request;
    if (promptTokens.length === 0) throw new Error('the prompt has no tokens');
    for (const id of promptTokens) {
      if (!Number.isInteger(id) || id < 0 || id >= this.tokenizer.vocabSize) throw new Error(`token id ${id} is outside the vocabulary`);
    }
    if (promptTokens.length > this.info.contextLength) {
      throw new Error(`the prompt has ${promptTokens.length} tokens; the context holds ${this.info.contextLength}`);
    }
    const release = await this.scheduler.acquire(signal);
    let closed = false;
    // Sequences decode at once, as the engine's batch runs them.
    let running = 0;
    this.events.push({ kind: 'open', request });
    const close = () => {
      if (closed) return;
      closed = true;
      this.events.push({ kind: 'close' });
      release();
    };
    try {
      if (this.options.prefillDelayMs) await sleep(this.options.prefillDelayMs, signal);
      if (signal?.aborted) throw abortError(signal);
    } catch (err) {
      close();
      throw err;
    }
    const k = request.logprobs;
    const alternatives = (lp: Float64Array) => (k === undefined ? undefined : topTokens(lp, k));
    let promptLogprobs: (GeneratedToken | null)[] | undefined;
    if (request.promptLogprobs) {
      promptLogprobs = promptTokens.map((id, i) => {
        if (i === 0) return null;
        const lp = logSoftmax(this.logits(promptTokens.slice(0, i)));
        const top = alternatives(lp);
        return { id, logprob: lp[id]!, ...(top ? { topLogprobs: top } : {}) };
      });
    }
    const seed = request.sampling.seed ?? Math.floor(Math.random() * 2 ** 32);
    const generator = this;

    async function* sequence(options: SequenceOptions): AsyncGenerator<GeneratedToken, FinishReason, void> {
      if (closed) throw new Error('the session is closed');
      running++;
      generator.events.push({ kind: 'start', request, options });
      const script = generator.script({ session: request, sequence: options });
      const random = mulberry32(sequenceSeed(seed, options.index));
      const stops = new Set(options.stopTokenIds);
      const generated: number[] = [];
      /** Jump-forward tokens the constraint gave (already accepted), yielded one a step. */
      const forcedQueue: number[] = [];
      let how: FakeEndHow = 'returned';
      try {
        for (;;) {
          if (generated.length >= options.maxTokens) return (how = 'length');
          if (promptTokens.length + generated.length >= generator.info.contextLength) return (how = 'length');
          if (generator.options.delayMs) await sleep(generator.options.delayMs, signal);
          if (signal?.aborted) throw abortError(signal);
          if (closed) throw new Error('the session was closed during a sequence');
          if (generator.options.failAfter !== undefined && generated.length >= generator.options.failAfter) {
            throw generator.options.failAsAbort ? new DOMException('fake GPU failure: device is lost', 'AbortError') : new Error('fake GPU failure');
          }
          const context = [...promptTokens, ...generated];
          const raw = generator.logits(context, script);
          const lp = logSoftmax(raw);
          const top = alternatives(lp);
          const constraint = options.constraint;
          // Jump-forward: the tokens the grammar allows as the only way on, appended without sampling.
          if (constraint && forcedQueue.length === 0) for (const id of constraint.forced()) forcedQueue.push(id);
          if (forcedQueue.length > 0) {
            const id = forcedQueue.shift()!;
            if (stops.has(id)) return (how = 'stop');
            generated.push(id);
            yield { id, logprob: lp[id]!, ...(top ? { topLogprobs: top } : {}), forced: true };
            continue;
          }
          const banned = generated.length < (options.minTokens ?? 0) ? [...stops] : [];
          const adjusted = adjustLogits(raw, request.sampling, promptTokens, generated, banned);
          if (constraint) {
            // The mask applies before anything else; nothing but stop ids allowed: the structure is complete.
            const mask = new Uint32Array(constraint.maskWords);
            await constraint.fillNextMask(mask);
            const allowed = (id: number) => ((mask[id >> 5]! >>> (id & 31)) & 1) === 1;
            let open = false;
            for (let id = 0; id < adjusted.length; id++) {
              if (!allowed(id)) adjusted[id] = -Infinity;
              else if (!stops.has(id)) open = true;
            }
            if (!open) return (how = constraint.isComplete() ? 'stop' : 'length');
          }
          const id = drawToken(adjusted, request.sampling, random);
          if (stops.has(id)) return (how = 'stop');
          if (constraint && !constraint.accept(id)) throw new Error(`the constraint refused token ${id}, which its mask allowed`);
          generated.push(id);
          yield { id, logprob: lp[id]!, ...(top ? { topLogprobs: top } : {}) };
        }
      } catch (err) {
        how = signal?.aborted ? 'aborted' : 'failed';
        throw err;
      } finally {
        running--;
        generator.events.push({ kind: 'end', how, tokens: generated.length, ids: [...generated] });
      }
    }

    return {
      promptLogprobs,
      cachedTokens: 0,
      sequence,
      close,
    };
  }

  /** The single-sequence API, on top of a session. */
  async *generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void> {
    const session = await this.openSession({
      promptTokens: request.promptTokens,
      sampling: request.sampling,
      ...(request.signal ? { signal: request.signal } : {}),
    });
    try {
      const tokens = session.sequence({ index: 0, maxTokens: request.maxTokens, stopTokenIds: request.stopTokenIds });
      for (;;) {
        const step = await tokens.next();
        if (step.done) return step.value;
        yield step.value.id;
      }
    } finally {
      session.close();
    }
  }
}

/** Resolves after `ms`, or rejects with an AbortError when `signal` aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A fake generator, as the `{ generator }` engine the API handler takes. */
export function fakeEngine(options: FakeGeneratorOptions = {}): { generator: FakeGenerator } {
  return { generator: new FakeGenerator(options) };
}
