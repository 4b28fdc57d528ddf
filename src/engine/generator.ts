// The generation loop on the GPU, for many requests at once (continuous batching).
//
// Slots: the working KV cache (slot 0) is where every prompt is prefilled, one request at a time
// (admission: a bounded FIFO, scheduler.ts), with the prefix cache (prefix-cache.ts) knowing which
// tokens' K/V it holds, so a prompt that begins with them is prefilled from the first token it
// does not share. Sequences decode in slots of their own (1 .. maxConcurrentSequences, each the
// K/V of the full context): the admitted request takes a slot for each sequence it runs at once
// (at least one, waiting while none is free), then the lane (the working cache), prefills, copies
// the prompt's K/V and last logits to its slots (copyBufferToBuffer) and frees both. Slots are
// always taken before the lane, and whoever holds the lane never waits for a slot, so a sequence
// holding a slot may wait for the lane. Its sequences then decode as rows
// of one batch (batch-decode.ts) beside every other request's, while the next prompt is prefilled;
// a sequence with a constraint (structured output) runs its own loop on its slot
// (constrained-decode.ts). When a sequence ends and the working cache still holds its prompt, its
// answer's K/V is copied back there, so the next turn of a chat reuses it as before.
// With maxConcurrentSequences 1 nothing is copied: the session keeps admission and the lane and
// decodes in slot 0. Embeddings (embed.ts) take admission and the lane as a prompt does and run in
// the working cache, which the prefix cache then holds nothing of.
//
// Sampling runs on the GPU (src/sampling/gpu-sampler.ts), so decode steps follow each other
// without waiting for the CPU. Sequences of one session share its prompt's K/V: positions 0..P-1
// of their slots, decode steps writing only past P. Sliding-window layers' rings (KvCache.rings)
// are the exception: a sequence that decodes past R - W tokens overwrites the ring rows of the
// prompt's last positions; a later sequence in that slot then takes the prompt through the lane
// again (the prefix cache makes that one token's prefill when slot 0 still holds it), as does a
// sequence of the session that runs in a slot taken after the others.
import type { LlamaModel } from '../model/llama.ts';
import type { KvCache } from '../model/kv-cache.ts';
import { maxBufferBytes } from '../gpu/device.ts';
import { logSumExp, scoreToken } from '../sampling/logprobs.ts';
import { MAX_BATCH_STEPS, type DecodeResources } from './decode-pipeline.ts';
import { BatchDecoder } from './batch-decode.ts';
import type { BatchDecodeStep } from '../model/batch-step.ts';
import type { DecodeStep } from '../model/decode-step.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { Scheduler, abortError } from './scheduler.ts';
import { PrefixCache } from './prefix-cache.ts';
import { makeDecodeSlots, ringsHoldPrompt, type DecodeSlots } from './decode-slots.ts';
import { checkSessionRequest } from './request-checks.ts';
import { SlotPool } from './slot-pool.ts';
import { LlamaSession, type SequenceKit, type SessionHost } from './session.ts';
import { SequenceKits } from './sequence-kits.ts';
import { checkEmbedInputs, embedInputs, EMBED_GROUP_TOKENS, type EmbedHost } from './embed.ts';
import {
  usableVocabSize,
  type FinishReason,
  type GeneratedToken,
  type GenerationRequest,
  type GenerationSession,
  type EmbeddingInfo,
  type ModelInfo,
  type SessionRequest,
  type TextGenerator,
} from './types.ts';

export interface LlamaGeneratorOptions {
  /** Requests that may wait for the GPU before new ones are refused (QueueFullError). */
  maxQueued?: number;
  /**
   * Most prompt tokens per prefill pass; longer prompts are prefilled in chunks (the same
   * result: each chunk attends to the cache the chunks before it wrote). Default:
   * DEFAULT_PREFILL_CHUNK_TOKENS, or fewer where the device's buffer limits ask for it (and at
   * most 64 MiB of logits per pass when every position's logits are needed, for prompt logprobs).
   */
  prefillChunkTokens?: number;
  /**
   * Automatic prefix caching (prefix-cache.ts): whether requests reuse K/V already on the GPU
   * (default true), and the bytes saved prefixes may take beyond the KV cache (default: the KV
   * cache's own size; 0: only what the KV cache holds from the last request is reused).
   */
  prefixCache?: { enabled?: boolean; maxBytes?: number };
  /**
   * Sequences that decode at once, as rows of one batch, each in a KV slot of its own (a cache of
   * the whole context, made the first time that many run at once). Default
   * DEFAULT_MAX_CONCURRENT_SEQUENCES; 1: one request at a time, decoding in the working cache
   * (the least memory: no slots, no copies).
   */
  maxConcurrentSequences?: number;
  /**
   * Which step runs the batch: 'auto' (LlamaModel.createBatchStep: the batched kernel the model
   * and device take, else separate steps), 'fused' (the fused kernels' batched step wherever it
   * runs), 'separate' (each row its own DecodeStep). For tests and measurements; default 'auto'.
   */
  batchStep?: 'auto' | 'fused' | 'separate';
}

/** Bytes of logits one prefill pass may return when every position's logits are read back. */
const MAX_ALL_LOGITS_BYTES = 64 * 1024 * 1024;
/**
 * Prompt tokens one prefill pass takes by default (llama.cpp's micro-batch): each dispatch's work
 * grows with them, and a GPU watchdog (Windows' 2 s TDR, mobile drivers) loses the device when a
 * single dispatch runs too long; a lost device is lost for the page. Past a few hundred tokens a
 * matmul is as efficient in one pass as in chunks.
 */
export const DEFAULT_PREFILL_CHUNK_TOKENS = 512;
/**
 * Prompt tokens a prefill pass takes at most while other sequences decode, each pass after the GPU
 * finished the one before (the streams' rounds run between): a newcomer's time to first token
 * against the streams' longest wait (docs/performance.md#many-requests-at-once).
 */
export const BUSY_PREFILL_CHUNK_TOKENS = 128;
/** Sequences decoding at once by default (LlamaGeneratorOptions.maxConcurrentSequences). */
export const DEFAULT_MAX_CONCURRENT_SEQUENCES = 8;

export class LlamaGenerator implements TextGenerator, SessionHost {
  /** New requests, one at a time (taking slots, then the lane), the others in a bounded queue. */
  private readonly admission: Scheduler;
  /** The working cache: one prefill (or copy back) at a time. Its holder never waits for a slot. */
  private readonly lane = new Scheduler(Infinity);
  private readonly prefillChunkTokens: number | undefined;
  /** BUSY_PREFILL_CHUNK_TOKENS, or less where prefillChunkTokens asks (measurements may set it). */
  private busyPrefillChunkTokens = BUSY_PREFILL_CHUNK_TOKENS;
  /** The last prompt position's logits, left on the GPU by the prefill, copied to the session's own buffer. */
  private readonly prefillLogits: GPUBuffer;
  private readonly prefixCache: PrefixCache;
  private destroyed = false;
  /** Sequences that decode at once; 1: in the working cache, the session keeping the lane. */
  readonly maxConcurrentSequences: number;
  private readonly batchStepKind: NonNullable<LlamaGeneratorOptions['batchStep']>;
  /** The decode slots and the step that runs them, made by prepare(). */
  private slots: DecodeSlots | undefined;
  /** Each decode slot's written positions, a high-water mark since the prompt was copied there (its rings' history). */
  private readonly slotWritten = new Map<number, number>();
  /** Which slots are free, who waits for one, and the slots' limit. */
  private readonly pool: SlotPool;
  /** Constrained sequences decoding now (beside the batch's rows). */
  private constrainedDecoding = 0;
  /** The sequences' samplers and read-back buffers, made by prepare(). */
  private readonly kits: SequenceKits;
  private readonly freeLogits: GPUBuffer[] = [];
  private readonly logitBuffers: GPUBuffer[] = [];
  private batchDecoder: BatchDecoder | undefined;
  private ready: Promise<void> | undefined;

  constructor(
    readonly model: LlamaModel,
    readonly tokenizer: TextTokenizer,
    readonly info: ModelInfo,
    /** The working cache (slot 0): every prompt is prefilled here. */
    private readonly cache: KvCache,
    options: LlamaGeneratorOptions = {},
  ) {
    // The sampler reads usableVocabSize(this) logits a row: no more than the model has.
    if (info.vocabSize !== model.config.vocabSize) throw new Error(`info.vocabSize ${info.vocabSize} is not the model's ${model.config.vocabSize}`);
    const concurrent = options.maxConcurrentSequences ?? DEFAULT_MAX_CONCURRENT_SEQUENCES;
    if (!(Number.isInteger(concurrent) && concurrent >= 1)) throw new RangeError(`maxConcurrentSequences must be an integer >= 1, got ${concurrent}`);
    this.maxConcurrentSequences = concurrent;
    this.batchStepKind = options.batchStep ?? 'auto';
    this.pool = new SlotPool(model.ctx.device, concurrent);
    this.admission = new Scheduler(options.maxQueued);
    this.prefillChunkTokens = options.prefillChunkTokens;
    this.prefillLogits = model.ctx.device.createBuffer({
      label: 'prefill_logits',
      size: model.config.vocabSize * 4,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
    });
    this.prefixCache = new PrefixCache(model.ctx.device, cache, {
      enabled: options.prefixCache?.enabled ?? true,
      maxBytes: options.prefixCache?.maxBytes ?? cache.byteSize,
      maxBufferBytes: maxBufferBytes(model.ctx.limits),
    });
    this.kits = new SequenceKits(model.ctx, this.sampledVocab, MAX_BATCH_STEPS);
  }

  /** The prefix cache: saved prefixes' bytes and count (for tests and stats). */
  get prefixCacheStats(): { enabled: boolean; bytes: number; saved: number } {
    return { enabled: this.prefixCache.enabled, bytes: this.prefixCache.bytes, saved: this.prefixCache.size };
  }

  /** Requests waiting for the GPU. */
  get queued(): number {
    return this.admission.queued;
  }

  /** Sequences decoding now as rows of the batch (constrained ones run beside it). */
  get decoding(): number {
    return this.batchDecoder?.active ?? 0;
  }

  /** Decode slots made so far (each a KV cache of the context), the bytes they take, and whether one batched kernel runs them. */
  get slotStats(): { made: number; free: number; bytes: number; batched: boolean } {
    const made = this.slots?.made() ?? 0;
    return { made, free: this.pool.free, bytes: this.serial ? 0 : made * this.cache.byteSize, batched: this.slots?.batched ?? false };
  }

  private get serial(): boolean {
    return this.maxConcurrentSequences === 1;
  }

  /**
   * Validates the request (before queueing: a bad request never waits), waits for admission (a
   * waiting request whose signal aborts leaves the queue with an AbortError), for slots for the
   * sequences it will run at once (as many as are free, at least one) and for the lane, prefills
   * the prompt once, copies it to those slots and returns the session. If anything fails, what it
   * took is given back before the error is thrown.
   */
  async openSession(request: SessionRequest): Promise<GenerationSession> {
    checkSessionRequest(request, this.sampledVocab, this.cache.capacity);
    const { signal } = request;
    const admitted = await this.admission.acquire(signal);
    let release: (() => void) | undefined;
    let slots: number[] = [];
    let logits: GPUBuffer | undefined;
    let keepLane = false;
    let joined: (() => void) | undefined;
    try {
      this.checkLive(signal);
      await this.prepare();
      // The session's own copy: what the prefix cache records must not change under it.
      const tokens = request.promptTokens.slice();
      const keep = request.cachePrompt !== false;
      if (!this.serial) slots = await this.pool.take(Math.min(request.sequences ?? 1, this.pool.limit), signal, () => this.checkLive(signal));
      // From here to the copies, rounds take one step: it joins at the round after its prefill.
      joined = this.batch.expectJoin();
      release = await this.lane.acquire(signal);
      this.checkLive(signal);
      // Scoring the prompt needs every position's logits: it runs the whole prompt.
      const cached = await this.prefixCache.prepare(tokens, keep && request.promptLogprobs !== true);
      const promptLogprobs = await this.prefill(request, tokens, cached, keep);
      this.checkLive(signal);
      logits = this.takeLogits();
      const encoder = this.model.ctx.device.createCommandEncoder({ label: 'session start' });
      encoder.copyBufferToBuffer(this.prefillLogits, 0, logits, 0, this.model.config.vocabSize * 4);
      for (const slot of slots) this.copyPrompt(encoder, slot, tokens.length);
      this.model.ctx.device.queue.submit([encoder.finish()]);
      const lane = release;
      const both = () => {
        lane();
        admitted();
      };
      const session: LlamaSession = new LlamaSession(this, { ...request, promptTokens: tokens }, promptLogprobs, cached, keep, logits, this.serial ? [0] : slots, this.serial ? both : undefined);
      keepLane = this.serial;
      slots = [];
      logits = undefined;
      return session;
    } finally {
      joined?.();
      for (const slot of slots) this.releaseSlot(slot);
      if (logits) this.freeLogits.push(logits);
      if (!keepLane) {
        release?.();
        admitted();
      }
    }
  }

  /**
   * One sequence (index 0) of a session: the token ids. The session is closed when the sequence
   * ends, throws, or the caller stops iterating.
   */
  async *generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void> {
    const session = await this.openSession({
      promptTokens: request.promptTokens,
      sampling: request.sampling,
      ...(request.signal ? { signal: request.signal } : {}),
    });
    const tokens = session.sequence({ index: 0, maxTokens: request.maxTokens, stopTokenIds: request.stopTokenIds });
    let done = false;
    try {
      for (;;) {
        const step = await tokens.next();
        if (step.done) {
          done = true;
          return step.value;
        }
        yield step.value.id;
      }
    } finally {
      if (!done) await tokens.return('length').catch(() => {});
      session.close();
    }
  }

  /**
   * One pooled vector per input (embed.ts): waits for admission and the lane like a prompt, runs
   * each input in the working cache without the LM head, and leaves the prefix cache holding
   * nothing of it. `info.embedding` says how (absent: the last token, normalised).
   */
  async embed(inputs: readonly (readonly number[])[], options: { signal?: AbortSignal } = {}): Promise<Float32Array[]> {
    checkEmbedInputs(inputs, this.sampledVocab, this.cache.capacity);
    const { signal } = options;
    const admitted = await this.admission.acquire(signal);
    let release: (() => void) | undefined;
    try {
      this.checkLive(signal);
      release = await this.lane.acquire(signal);
      const embedding: Pick<EmbeddingInfo, 'pooling' | 'normalize'> = this.info.embedding ?? { pooling: 'last', normalize: true };
      return await embedInputs(this.embedHost, embedding, inputs, signal);
    } finally {
      release?.();
      admitted();
    }
  }

  /** What embed.ts asks of the generator: shorter passes and groups while sequences decode, as a prefill's. */
  private get embedHost(): EmbedHost {
    const busy = () => this.decoding + this.constrainedDecoding > 0;
    return {
      model: this.model,
      workingCache: this.cache,
      prefix: this.prefixCache,
      checkLive: (signal) => this.checkLive(signal),
      passTokens: () => (busy() ? Math.min(this.prefillChunk(false), this.busyPrefillChunkTokens) : this.prefillChunk(false)),
      groupTokens: () => (busy() ? this.busyPrefillChunkTokens : EMBED_GROUP_TOKENS),
      busy,
    };
  }

  /** The ids tokens are sampled and scored among, and requests may use (usableVocabSize). */
  private get sampledVocab(): number {
    return usableVocabSize(this);
  }

  /**
   * Makes the sequences' samplers, the decode slots and their step now rather than at the
   * first request: the loader calls it inside its GPU error scopes, so that running out of memory
   * for them fails the load with a clear error.
   */
  prepare(): Promise<void> {
    this.ready ??= (async () => {
      const slots = (this.slots ??= this.makeSlots());
      await this.kits.fill(slots.limit);
      this.batchDecoder ??= new BatchDecoder(this.model.ctx.device, slots.step, MAX_BATCH_STEPS);
    })();
    // A failed creation is retried by the next request rather than remembered.
    this.ready.catch(() => (this.ready = undefined));
    return this.ready;
  }

  /** Slot 0's decode step of its own, the first sampler and its read-back buffers (tests and measurements). */
  async decodeResources(): Promise<DecodeResources> {
    await this.prepare();
    const kit = this.kits.first;
    return { device: this.model.ctx.device, decodeStep: this.stepOf(0), sampler: kit.sampler, staging: kit.staging };
  }

  /** The decode slots (makeDecodeSlots), their limit lowered to what the device's buffers hold. */
  private makeSlots(): DecodeSlots {
    const slots = makeDecodeSlots(this.model, this.cache, {
      sequences: this.maxConcurrentSequences,
      kind: this.batchStepKind,
      vocabRows: this.sampledVocab,
      free: (slot) => this.pool.add(slot),
    });
    this.pool.attach(slots);
    return slots;
  }

  /** @internal A sequence's sampler and read-back buffers (sequence-kits.ts). */
  takeKit(): Promise<SequenceKit> {
    return this.kits.take();
  }

  /** @internal */
  returnKit(kit: SequenceKit): void {
    this.kits.give(kit);
  }

  private takeLogits(): GPUBuffer {
    const reused = this.freeLogits.pop();
    if (reused) return reused;
    const buffer = this.model.ctx.device.createBuffer({
      label: 'session_logits',
      size: this.model.config.vocabSize * 4,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
    });
    this.logitBuffers.push(buffer);
    return buffer;
  }

  /** @internal */
  returnLogits(buffer: GPUBuffer): void {
    this.freeLogits.push(buffer);
  }

  /** @internal The batch every unconstrained sequence decodes in. */
  get batch(): BatchDecoder {
    if (!this.batchDecoder) throw new Error('the generator is not prepared');
    return this.batchDecoder;
  }

  /** @internal A decode step of slot `slot` alone (a constrained sequence's; made on first use, kept). */
  stepOf(slot: number): DecodeStep {
    if (!this.slots) throw new Error('the generator is not prepared');
    return this.slots.solo(slot);
  }

  /** @internal The step the batch runs (tests and measurements). */
  async batchStep(): Promise<BatchDecodeStep> {
    await this.prepare();
    return this.slots!.step;
  }

  /** @internal The working cache: its capacity and layout are every slot's. */
  get workingCache(): KvCache {
    return this.cache;
  }

  /** @internal The model's device. */
  get device(): GPUDevice {
    return this.model.ctx.device;
  }

  /** @internal The decode slots' free list and waiters. */
  get slotPool(): SlotPool {
    return this.pool;
  }

  /** @internal Gives a decode slot back (its GPU work is done or queued ahead of any later use). */
  releaseSlot(slot: number): void {
    if (!this.serial) this.pool.release(slot);
  }

  /** @internal Notes that a sequence in decode slot `slot` wrote positions up to `end` (exclusive) at most. */
  noteSlotWritten(slot: number, end: number): void {
    this.slotWritten.set(slot, Math.max(this.slotWritten.get(slot) ?? 0, end));
  }

  /** Copies the prompt's K/V (positions 0..P-1; a ring layer's whole ring) from the working cache to slot `slot`. */
  private copyPrompt(encoder: GPUCommandEncoder, slot: number, P: number): void {
    const from = this.cache;
    const step = this.slots!.step;
    for (let l = 0; l < from.keys.length; l++) {
      const bytes = from.rings[l] ? from.slotBytes(l) : P * from.rowBytes;
      const to = step.slotKv(l, slot);
      encoder.copyBufferToBuffer(from.keys[l]!, 0, to.keys, to.offset, bytes);
      encoder.copyBufferToBuffer(from.values[l]!, 0, to.values, to.offset, bytes);
    }
    this.slotWritten.set(slot, Math.max(from.written, P));
  }

  /**
   * @internal After a sequence in a decode slot: when the lane is free and the working cache still
   * holds its prompt, copies the answer's K/V (positions P .. P + answer - 1) back there, so that
   * the next request (the chat's next turn) reuses prompt and answer, as if the sequence had
   * decoded in place (with an f16 cache, settled by the prefill's kernels: settleDecoded). A ring
   * layer's whole ring is copied, with the slot's history of writes, when nothing was written past
   * the prompt in the working cache since (then it is the ring the sequence would have left there).
   */
  keepAnswer(slot: number, prompt: readonly number[], answer: readonly number[]): void {
    const P = prompt.length;
    if (this.destroyed || answer.length === 0 || !this.prefixCache.holdsPrefix(prompt)) return;
    const c = this.cache;
    if (c.ringed && c.written > P) return;
    const release = this.lane.tryAcquire();
    if (!release) return;
    const step = this.slots!.step;
    const encoder = this.model.ctx.device.createCommandEncoder({ label: 'keep answer' });
    for (let l = 0; l < c.keys.length; l++) {
      const ring = c.rings[l] !== undefined;
      const offset = ring ? 0 : P * c.rowBytes;
      const bytes = ring ? c.slotBytes(l) : answer.length * c.rowBytes;
      const from = step.slotKv(l, slot);
      encoder.copyBufferToBuffer(from.keys, from.offset + offset, c.keys[l]!, offset, bytes);
      encoder.copyBufferToBuffer(from.values, from.offset + offset, c.values[l]!, offset, bytes);
    }
    this.model.ctx.device.queue.submit([encoder.finish()]);
    c.noteWritten(Math.max(P + answer.length, this.slotWritten.get(slot) ?? 0));
    this.prefixCache.holds(prompt.concat(answer), undefined, P);
    void this.settleDecoded().catch(() => {}).finally(release);
  }

  /**
   * @internal Brings the prompt into decode slot `slot` for another sequence when the slot does not
   * hold it (`held` false: a slot the session took after its start) or its rings lost the window
   * before P (a sequence there decoded past R - W tokens): through the lane, the prefix cache
   * making it a short prefill while the working cache still holds the prompt.
   */
  async restorePrompt(slot: number, tokens: readonly number[], keep: boolean, held: boolean, signal: AbortSignal | undefined): Promise<void> {
    const P = tokens.length;
    if (held && (!this.cache.ringed || ringsHoldPrompt(this.cache, P, this.slotWritten.get(slot) ?? 0))) return;
    const release = await this.lane.acquire(signal);
    try {
      this.checkLive(signal);
      const cached = await this.prefixCache.prepare(tokens, keep);
      await this.prefill({ promptTokens: tokens, sampling: { temperature: 0, topP: 1 }, ...(signal ? { signal } : {}) }, tokens, cached, keep);
      this.checkLive(signal);
      const encoder = this.model.ctx.device.createCommandEncoder({ label: 'restore prompt' });
      this.copyPrompt(encoder, slot, P);
      this.model.ctx.device.queue.submit([encoder.finish()]);
    } finally {
      release();
    }
  }

  /** @internal Settles an in-place (slot 0) session's decoded K/V, then frees the lane. */
  releaseAfterSettling(release: () => void): void {
    void this.settleDecoded().catch(() => {}).finally(release);
  }

  /** @internal The prefix cache, told what slot 0 holds as an in-place sequence writes it. */
  get prefix(): PrefixCache {
    return this.prefixCache;
  }

  /** @internal Throws once the model is unloaded or the signal aborts. */
  checkLive(signal: AbortSignal | undefined): void {
    if (this.destroyed) throw new Error('the model was unloaded');
    if (signal?.aborted) throw abortError(signal);
  }

  /** @internal Counts a constrained sequence decoding beside the batch (prefill passes shorten while any decodes). */
  constrainedStarted(): () => void {
    this.constrainedDecoding++;
    let ended = false;
    return () => {
      if (!ended) this.constrainedDecoding--;
      ended = true;
    };
  }

  /**
   * Runs the prompt from position `from` (the tokens before it are cached) through the model, in
   * chunks if it is long, leaving the last position's logits in prefillLogits on the GPU and, when
   * asked (then `from` is 0), scoring every prompt token from the logits of the position before it
   * (read back: the only read-back of a prefill). With `keep`, the prefix cache learns of each
   * chunk once it is queued.
   */
  private async prefill(request: SessionRequest, tokens: readonly number[], from: number, keep: boolean): Promise<(GeneratedToken | null)[] | undefined> {
    const { signal } = request;
    const P = tokens.length;
    const vocab = this.model.config.vocabSize;
    const allLogits = request.promptLogprobs === true;
    const promptLogprobs: (GeneratedToken | null)[] | undefined = allLogits ? [null] : undefined;
    const chunk = this.prefillChunk(allLogits);
    for (let start = from; start < P; ) {
      // While other sequences decode, passes are shorter and each waits for the GPU to finish the
      // one before: the batch's rounds run between them, so a long prompt stalls the streams a
      // pass at a time, never for its whole length (a prompt gives the same K/V and logits however
      // it is split).
      const busy = this.decoding + this.constrainedDecoding > 0;
      if (start > from) {
        this.checkLive(signal);
        if (busy) await this.model.ctx.device.queue.onSubmittedWorkDone();
      }
      const part = tokens.slice(start, start + (busy ? Math.min(chunk, this.busyPrefillChunkTokens) : chunk));
      const last = start + part.length === P;
      const logits = await this.model.forward(part, start, this.cache, {
        allLogits,
        readBack: allLogits,
        ...(last ? { lastLogitsTo: this.prefillLogits } : {}),
      });
      if (keep) this.prefixCache.holds(tokens, start + part.length);
      if (allLogits && logits) {
        for (let r = 0; r < part.length; r++) {
          const position = start + r;
          if (position + 1 >= P) break;
          const row = logits.subarray(r * vocab, r * vocab + this.sampledVocab);
          promptLogprobs!.push(scoreToken(row, tokens[position + 1], request.logprobs, logSumExp(row)));
        }
      }
      start += part.length;
    }
    return promptLogprobs;
  }

  /**
   * @internal Readies the working cache for another in-place sequence of the session's prompt
   * (maxConcurrentSequences 1): a ring layer (window W, R rows) holds position p until p + R is
   * written, so a sequence that decoded more than R - W tokens overwrote rows of the positions
   * P - W + 1 .. P - 1 that the next one reads. Then (the prefix cache's rule, resumable, says so)
   * the prompt is prefilled again from 0; a prefill gives the same K/V however it is split. Without
   * rings, or while the rings hold the window, nothing runs.
   */
  async restoreInPlace(tokens: readonly number[], keep: boolean, signal: AbortSignal | undefined): Promise<void> {
    const P = tokens.length;
    if (!this.cache.ringed || this.prefixCache.resumable(P)) return;
    this.prefixCache.rewrites(0);
    if (keep) this.prefixCache.holds(tokens, 0);
    const chunk = this.prefillChunk(false);
    for (let start = 0; start < P; start += chunk) {
      this.checkLive(signal);
      const end = Math.min(P, start + chunk);
      await this.model.forward(tokens.slice(start, end), start, this.cache, { readBack: false });
      if (keep) this.prefixCache.holds(tokens, end);
    }
  }

  /**
   * With an f16 cache, rewrites with the prefill's kernels the K/V that decode steps wrote for the
   * tokens the cache holds (the last answer), before the next request gets the lane: the two
   * kernels' sums differ in the last bits, which rounding to f16 can turn into another half, so a
   * prompt reusing them would compute otherwise than its whole prefill. f32 keeps them as
   * written: there the difference stays in the last bits (logprobs within 1e-5 in the tests), and
   * on the CPU adapters that default to f32 a prefill of every answer would cost as much again.
   * Unloading stops it between passes.
   */
  private async settleDecoded(): Promise<void> {
    const decoded = this.prefixCache.decoded;
    if (!decoded || this.cache.kvDType !== 'f16' || this.destroyed) return;
    const { tokens, from, to } = decoded;
    const chunk = this.prefillChunk(false);
    let end = from;
    try {
      // (A ring that no longer holds the window before `end`, KvCache.rings, stops it: what it holds is then reused up to there at most.)
      while (end < to && !this.destroyed && this.prefixCache.resumable(end)) {
        const n = Math.min(chunk, to - end);
        await this.model.forward(tokens.slice(end, end + n), end, this.cache, { readBack: false });
        end += n;
      }
    } finally {
      this.prefixCache.holds(tokens, end);
    }
  }

  /** Resolves with the driver's message once the model's GPU device is lost, for whatever reason: nothing more runs on it. */
  get deviceLost(): Promise<string> {
    return this.model.ctx.device.lost.then((info) => info.message || info.reason);
  }

  private prefillChunk(allLogits: boolean): number {
    if (this.prefillChunkTokens !== undefined) return Math.max(1, Math.floor(this.prefillChunkTokens));
    const c = this.model.config;
    const limits = this.model.ctx.limits;
    const maxBinding = maxBufferBytes(limits);
    const widestRow = Math.max(c.hiddenSize, c.numHeads * c.headDim, c.intermediateSize) * 4;
    let tokens = Math.min(DEFAULT_PREFILL_CHUNK_TOKENS, Math.floor(maxBinding / widestRow));
    if (allLogits) tokens = Math.min(tokens, Math.floor(Math.min(maxBinding, MAX_ALL_LOGITS_BYTES) / (c.vocabSize * 4)));
    return Math.max(1, tokens);
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.pool.close();
    const steps = this.slots ? [...this.slots.steps.values()] : [];
    const caches = [this.cache, ...(this.slots?.caches ?? [])];
    const batchStep = this.slots?.batched ? this.slots.step : undefined;
    const kits = this.kits;
    const batch = this.batchDecoder;
    void Promise.resolve(this.ready)
      .catch(() => {})
      .then(() => {
        for (const step of steps) step.destroy();
        kits.destroy();
        batch?.destroy();
        batchStep?.destroy();
      });
    for (const b of this.logitBuffers) b.destroy();
    this.prefillLogits.destroy();
    this.prefixCache.clear();
    for (const c of caches) c.destroy();
    this.model.destroy();
  }
}
