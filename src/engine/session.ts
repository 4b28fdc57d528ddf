// A generation session of LlamaGenerator (generator.ts): the prompt prefilled once, then its
// sequences, each in a decode slot, as rows of the batch (batch-decode.ts) or, with a constraint,
// in a loop of its own (constrained-decode.ts).
import type { KvCache } from '../model/kv-cache.ts';
import type { DecodeStep } from '../model/decode-step.ts';
import type { GpuSampler } from '../sampling/gpu-sampler.ts';
import { randomSeed } from '../sampling/random.ts';
import type { BatchDecoder } from './batch-decode.ts';
import type { DecodePlan, DecodeResources } from './decode-pipeline.ts';
import { decodeConstrained } from './constrained-decode.ts';
import type { PrefixCache } from './prefix-cache.ts';
import type { SlotPool } from './slot-pool.ts';
import type { FinishReason, GeneratedToken, GenerationSession, SequenceOptions, SessionRequest } from './types.ts';

/** What one running sequence uses besides its slot: its sampler and two read-back buffers (the constrained loop's). */
export interface SequenceKit {
  readonly sampler: GpuSampler;
  readonly staging: readonly [GPUBuffer, GPUBuffer];
}

/** What a session asks of its generator (LlamaGenerator's @internal members). */
export interface SessionHost {
  readonly device: GPUDevice;
  readonly prefix: PrefixCache;
  readonly batch: BatchDecoder;
  readonly slotPool: SlotPool;
  readonly workingCache: KvCache;
  checkLive(signal: AbortSignal | undefined): void;
  takeKit(): Promise<SequenceKit>;
  returnKit(kit: SequenceKit): void;
  returnLogits(buffer: GPUBuffer): void;
  stepOf(slot: number): DecodeStep;
  releaseSlot(slot: number): void;
  noteSlotWritten(slot: number, end: number): void;
  keepAnswer(slot: number, prompt: readonly number[], answer: readonly number[]): void;
  restorePrompt(slot: number, tokens: readonly number[], keep: boolean, held: boolean, signal: AbortSignal | undefined): Promise<void>;
  restoreInPlace(tokens: readonly number[], keep: boolean, signal: AbortSignal | undefined): Promise<void>;
  releaseAfterSettling(release: () => void): void;
  constrainedStarted(): () => void;
}

/**
 * A session: its prompt's K/V in its slots, its prefill's last logits (every sequence's first
 * step samples them) and its prompt logprobs. Sequences may run at once, as many as it has slots;
 * more wait for one of them.
 */
export class LlamaSession implements GenerationSession {
  private closed = false;
  private running = 0;
  private released = false;
  /** Its slots not decoding now (given back to the generator once another request waits for one: freeSlot). */
  private readonly idleSlots: number[];
  /** Its slots that hold its prompt's K/V (copied at its start). */
  private readonly promptSlots: Set<number>;
  private slotWaiters: (() => void)[] = [];
  /** Running sequences suspended at a yield, with what ends them: close() ends them. */
  private readonly suspended = new Map<AsyncGenerator<GeneratedToken, void, void>, () => void>();
  /** The base of the sequences' random streams: the request's seed, or one random seed per session. */
  private readonly seed: number;

  constructor(
    private readonly generator: SessionHost,
    private readonly request: SessionRequest,
    readonly promptLogprobs: readonly (GeneratedToken | null)[] | undefined,
    /** Prompt tokens whose K/V came from the prefix cache. */
    readonly cachedTokens: number,
    /** Whether the prompt (and answers) may be kept for later requests (cachePrompt). */
    private readonly keep: boolean,
    /** The prefill's last logits, this session's copy. */
    private readonly logits: GPUBuffer,
    slots: readonly number[],
    /** With maxConcurrentSequences 1: the lane, kept until close (sequences decode in slot 0). */
    private readonly lane: (() => void) | undefined,
  ) {
    this.seed = request.sampling.seed ?? randomSeed();
    this.idleSlots = [...slots];
    this.promptSlots = new Set(slots);
  }

  /**
   * Ends the session, once. Its sequences suspended at a token (their callers have not asked for
   * the next one) are ended: their work in flight is awaited, then their slots are freed, and they
   * throw if resumed. A sequence waiting for the GPU fails at its next token.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.slotWaiters.splice(0)) w();
    for (const [tokens, finish] of this.suspended) void tokens.return().catch(() => {}).finally(finish);
    this.releaseIfIdle();
  }

  private releaseIfIdle(): void {
    if (!this.closed || this.running > 0 || this.released) return;
    this.released = true;
    this.generator.slotPool.holdsIdle(this, false);
    for (const slot of this.idleSlots.splice(0)) this.generator.releaseSlot(slot);
    this.generator.returnLogits(this.logits);
    if (this.lane) this.generator.releaseAfterSettling(this.lane);
  }

  /** A slot for a sequence: one of its own that is idle, else any free one, else the first of those to free. */
  private async takeSlot(signal: AbortSignal | undefined): Promise<number> {
    for (;;) {
      this.checkLive(signal);
      const slot = this.idleSlots.shift();
      if (slot !== undefined) return slot;
      if (!this.lane) {
        const other = await this.generator.slotPool.takeFree();
        if (other !== undefined) return other;
      }
      await new Promise<void>((resolve) => {
        let woken = false;
        let cancelWait: (() => void) | undefined;
        const wake = () => {
          if (woken) return;
          woken = true;
          const i = this.slotWaiters.indexOf(wake);
          if (i >= 0) this.slotWaiters.splice(i, 1);
          cancelWait?.();
          resolve();
        };
        this.slotWaiters.push(wake);
        if (!this.lane) {
          const wait = this.generator.slotPool.freedOrAborted(signal);
          void wait.freed.then(wake);
          cancelWait = wait.cancel;
        }
      });
    }
  }

  /**
   * Keeps a slot a sequence ended in for the session's next sequence (it holds the prompt), and
   * wakes one waiting for it; with none waiting, the slot goes back to the generator as soon as
   * someone else waits for one (giveBackIdle), so an idle session never holds up another request.
   */
  private freeSlot(slot: number): void {
    this.idleSlots.push(slot);
    if (this.lane) {
      this.slotWaiters[0]?.();
      return;
    }
    if (this.slotWaiters.length > 0 && !this.closed) {
      this.slotWaiters[0]!();
      return;
    }
    this.generator.slotPool.holdsIdle(this, true);
    if (this.generator.slotPool.wanted) this.giveBackIdle();
  }

  /** @internal Gives the session's idle slots back to the generator. */
  giveBackIdle(): void {
    this.generator.slotPool.holdsIdle(this, false);
    if (this.lane) return;
    for (const slot of this.idleSlots.splice(0)) {
      this.promptSlots.delete(slot);
      this.generator.releaseSlot(slot);
    }
  }

  /**
   * Decodes sequence `index`: random stream `index` of the session's seed (Philox counters
   * (index, step), the same on every adapter), its own penalty history, starting from the
   * prefill's logits. Yields each generated token with its logprob (always) and its top
   * alternatives (when the session asked for logprobs; [] for logprobs 0). Returns 'stop' when a
   * stop id is sampled (not yielded) or the constraint allows nothing but stop ids; 'length' after
   * maxTokens tokens or when prompt + generated fills the context. A constraint's forced tokens are
   * yielded with `forced: true` and count as generated tokens. Throws an AbortError at the next
   * token once the session's signal aborts. Sequences may run at once (as many as the session
   * has slots; more wait); misuse (a closed session, bad options) throws from the first next().
   */
  async *sequence(options: SequenceOptions): AsyncGenerator<GeneratedToken, FinishReason, void> {
    if (this.closed) throw new Error('the session is closed');
    checkSequenceOptions(options);
    this.running++;
    const { promptTokens, sampling, signal, logprobs } = this.request;
    const P = promptTokens.length;
    const generator = this.generator;
    const inPlace = this.lane !== undefined;
    const yielded: number[] = [];
    let stopSampled = false;
    let slot: number | undefined;
    let kit: SequenceKit | undefined;
    // In place: false while the prompt's K/V is being rewritten (the prefix cache then knows what is held).
    let promptHeld = true;
    let finished = false;
    /** Positions its steps wrote up to (exclusive), at most. */
    let writtenEnd = 0;
    let constrainedEnded: (() => void) | undefined;
    // Gives back what the sequence took, once: from its own end, or from close() while it is suspended at a token.
    const finish = () => {
      if (finished) return;
      finished = true;
      // Token i's K/V is written by the step that samples token i + 1: every yielded token's when
      // a stop id was sampled after them, all but the last one's otherwise.
      const written = stopSampled ? yielded.length : Math.max(0, yielded.length - 1);
      constrainedEnded?.();
      if (slot !== undefined && !inPlace && writtenEnd > 0) generator.noteSlotWritten(slot, writtenEnd);
      if (slot !== undefined && this.keep) {
        if (inPlace) {
          if (promptHeld) generator.prefix.holds(promptTokens.concat(yielded.slice(0, written)), undefined, P);
        } else {
          generator.keepAnswer(slot, promptTokens, yielded.slice(0, written));
        }
      }
      if (kit) generator.returnKit(kit);
      if (slot !== undefined) this.freeSlot(slot);
      this.running--;
      this.releaseIfIdle();
    };
    try {
      const cache = generator.workingCache;
      // Token s needs the model run at position P + s - 1 < capacity (s >= 1).
      const maxSteps = Math.min(options.maxTokens, cache.capacity - P);
      if (maxSteps <= 0) return 'length';
      slot = await this.takeSlot(signal);
      // Its steps run at positions P .. P + maxSteps - 2 at most (the last token is not run); a batch row reports what it ran.
      writtenEnd = P + maxSteps - 1;
      if (inPlace) {
        // The sequence overwrites the positions past the prompt; it holds its tokens' K/V as it goes.
        if (this.keep) generator.prefix.holds(promptTokens);
        promptHeld = false;
        await generator.restoreInPlace(promptTokens, this.keep, signal);
        promptHeld = true;
        // Its steps write positions up to P + maxSteps - 2 (the rings' history: a batched step keeps no count).
        cache.noteWritten(P + maxSteps - 1);
      } else {
        // A slot taken after the start holds another prompt; a sequence before this one in the slot
        // may have overwritten ring rows of the prompt.
        await generator.restorePrompt(slot, promptTokens, this.keep, this.promptSlots.has(slot), signal);
        this.promptSlots.add(slot);
      }
      this.checkLive(signal);
      kit = await generator.takeKit();
      const { sampler } = kit;
      const stops = new Set(options.stopTokenIds);
      const { constraint } = options;
      sampler.beginSequence({
        params: sampling,
        promptTokens,
        seed: this.seed,
        stream: options.index,
        banned: options.stopTokenIds,
        minTokens: options.minTokens ?? 0,
        ...(logprobs !== undefined ? { logprobs } : {}),
        ...(constraint ? { constrained: true } : {}),
      });
      const check = () => this.checkLive(signal);
      let tokens: AsyncGenerator<GeneratedToken, void, void>;
      if (constraint) {
        const plan: DecodePlan = { promptLength: P, maxSteps, prefillLogits: this.logits, logprobs };
        const resources: DecodeResources = { device: generator.device, decodeStep: generator.stepOf(slot), sampler, staging: kit.staging };
        constrainedEnded = generator.constrainedStarted();
        tokens = decodeConstrained(resources, { ...plan, constraint, stopTokenIds: options.stopTokenIds }, check);
      } else {
        writtenEnd = P;
        const submitted = (count: number) => (writtenEnd = P + Math.max(0, count - 1));
        tokens = generator.batch.run({ slot, promptLength: P, maxSteps, firstLogits: this.logits, sampler, logprobs, greedy: sampler.plainGreedy, check, submitted });
      }
      for await (const token of tokens) {
        this.checkLive(signal);
        if (stops.has(token.id)) {
          stopSampled = true;
          return 'stop';
        }
        yielded.push(token.id);
        this.suspended.set(tokens, finish);
        try {
          yield token;
        } finally {
          this.suspended.delete(tokens);
        }
        this.checkLive(signal);
      }
      this.checkLive(signal);
      if (yielded.length < maxSteps) {
        // The constraint allows nothing more but stop ids: a whole structure stops; a dead end did
        // not finish it, so it ends as cut short.
        if (constraint) return constraint.isComplete() ? 'stop' : 'length';
        throw new Error('the decode loop ended early'); // never: it runs maxSteps steps
      }
      return 'length';
    } finally {
      finish();
    }
  }

  private checkLive(signal: AbortSignal | undefined): void {
    this.generator.checkLive(signal);
    if (this.closed) throw new Error('the session was closed during a sequence');
  }
}

function checkSequenceOptions(o: SequenceOptions): void {
  if (!(Number.isInteger(o.index) && o.index >= 0)) throw new RangeError(`sequence index must be an integer >= 0, got ${o.index}`);
  if (!(o.maxTokens >= 0) || (!Number.isInteger(o.maxTokens) && o.maxTokens !== Infinity)) {
    throw new RangeError(`maxTokens must be an integer >= 0 (or Infinity), got ${o.maxTokens}`);
  }
  if (o.minTokens !== undefined && !(Number.isInteger(o.minTokens) && o.minTokens >= 0)) {
    throw new RangeError(`minTokens must be an integer >= 0, got ${o.minTokens}`);
  }
}
