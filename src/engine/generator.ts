// The generation loop on the GPU: a session prefills the prompt once, then decodes sequences
// (choices) from it one after another. Sampling runs on the GPU too (src/sampling/gpu-sampler.ts),
// so decode steps follow each other without waiting for the CPU (decode-pipeline.ts); a sequence
// with a constraint (structured output) waits for each sampled token (constrained-decode.ts).
//
// KV cache sharing: the prompt's K/V sit at positions 0..P-1 and decode steps only write
// positions >= P, so every sequence of a session reuses the prompt's K/V without copying: sequence
// j overwrites what sequence j-1 wrote past the prompt, and attention at position q reads only
// positions <= q, all written by sequence j itself. The one cache is lent to the session that
// holds the scheduler. Across sessions, the prefix cache (prefix-cache.ts) knows which tokens'
// K/V the cache holds: a prompt that begins with them is prefilled from the first token it does
// not share, which computes what a whole prefill computes (as the chunks of a long prompt do).
// Sliding-window layers' rings (KvCache.rings) are the exception: a sequence that decodes past
// R - W tokens overwrites the ring rows of the prompt's last positions, which the next sequence
// reads; the prompt is then prefilled again before it (restorePrompt).
import type { LlamaModel } from '../model/llama.ts';
import type { KvCache } from '../model/kv-cache.ts';
import { maxBufferBytes } from '../gpu/device.ts';
import { logSumExp, scoreToken } from '../sampling/logprobs.ts';
import { randomSeed } from '../sampling/random.ts';
import { GpuSampler, RECORD_BYTES } from '../sampling/gpu-sampler.ts';
import { decodeTokens, MAX_BATCH_STEPS, type DecodePlan, type DecodeResources } from './decode-pipeline.ts';
import { decodeConstrained } from './constrained-decode.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { Scheduler, abortError } from './scheduler.ts';
import { PrefixCache } from './prefix-cache.ts';
import {
  usableVocabSize,
  type FinishReason,
  type GeneratedToken,
  type GenerationRequest,
  type GenerationSession,
  type ModelInfo,
  type SamplingParams,
  type SequenceOptions,
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

export class LlamaGenerator implements TextGenerator {
  private readonly scheduler: Scheduler;
  private readonly prefillChunkTokens: number | undefined;
  /** The decode step, sampler and staging buffers, made by prepare() (the loader) or on first use, and kept (one session at a time uses them). */
  private decode: Promise<DecodeResources> | undefined;
  /** The last prompt position's logits, left on the GPU by the prefill for the sequences' first step. */
  private readonly prefillLogits: GPUBuffer;
  private readonly prefixCache: PrefixCache;
  private destroyed = false;

  constructor(
    readonly model: LlamaModel,
    readonly tokenizer: TextTokenizer,
    readonly info: ModelInfo,
    /** One KV cache, lent to the session that holds the GPU: each session rewrites it from position 0. */
    private readonly cache: KvCache,
    options: LlamaGeneratorOptions = {},
  ) {
    // The sampler reads usableVocabSize(this) logits a row: no more than the model has.
    if (info.vocabSize !== model.config.vocabSize) throw new Error(`info.vocabSize ${info.vocabSize} is not the model's ${model.config.vocabSize}`);
    this.scheduler = new Scheduler(options.maxQueued);
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
  }

  /** The prefix cache: saved prefixes' bytes and count (for tests and stats). */
  get prefixCacheStats(): { enabled: boolean; bytes: number; saved: number } {
    return { enabled: this.prefixCache.enabled, bytes: this.prefixCache.bytes, saved: this.prefixCache.size };
  }

  /** Requests waiting for the GPU. */
  get queued(): number {
    return this.scheduler.queued;
  }

  /**
   * Validates the request (before queueing: a bad request never waits), waits for the GPU
   * (a waiting request whose signal aborts leaves the queue with an AbortError), prefills the
   * prompt once and returns the session. If anything fails after the GPU was granted, it is
   * released before the error is thrown.
   */
  async openSession(request: SessionRequest): Promise<GenerationSession> {
    checkSessionRequest(request, this.sampledVocab, this.cache.capacity);
    const { signal } = request;
    const release = await this.scheduler.acquire(signal);
    try {
      if (this.destroyed) throw new Error('the model was unloaded');
      if (signal?.aborted) throw abortError(signal);
      const resources = await this.decodeResources();
      // The session's own copy: what the prefix cache records must not change under it.
      const tokens = request.promptTokens.slice();
      // Scoring the prompt needs every position's logits: it runs the whole prompt.
      const keep = request.cachePrompt !== false;
      const cached = await this.prefixCache.prepare(tokens, keep && request.promptLogprobs !== true);
      const promptLogprobs = await this.prefill(request, tokens, cached, keep);
      if (signal?.aborted) throw abortError(signal);
      const prefix = keep ? this.prefixCache : undefined;
      const releaseAfterSettling = () => void this.settleDecoded().catch(() => {}).finally(release);
      const readyPrompt = () => this.restorePrompt(tokens, keep, signal);
      return new LlamaSession(this.cache, resources, { ...request, promptTokens: tokens }, this.prefillLogits, promptLogprobs, cached, prefix, releaseAfterSettling, readyPrompt);
    } catch (err) {
      release();
      throw err;
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

  /** The ids tokens are sampled and scored among, and requests may use (usableVocabSize). */
  private get sampledVocab(): number {
    return usableVocabSize(this);
  }

  /**
   * Makes the decode step, sampler and staging buffers now rather than at the first request: the
   * loader calls it inside its GPU error scopes, so that running out of memory for them fails the
   * load with a clear error (a buffer WebGPU could not allocate is reported only there).
   */
  async prepare(): Promise<void> {
    await this.decodeResources();
  }

  private decodeResources(): Promise<DecodeResources> {
    this.decode ??= (async () => {
      const { device } = this.model.ctx;
      const sampler = await GpuSampler.create(this.model.ctx, this.sampledVocab, { recordSlots: MAX_BATCH_STEPS });
      const staging = () =>
        device.createBuffer({ label: 'decode_records_readback', size: MAX_BATCH_STEPS * RECORD_BYTES, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      const decodeStep = this.model.createDecodeStep(this.cache, { vocabRows: this.sampledVocab });
      return { device, decodeStep, sampler, staging: [staging(), staging()] as const };
    })();
    // A failed creation is retried by the next request rather than remembered.
    this.decode.catch(() => (this.decode = undefined));
    return this.decode;
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
    const chunk = this.prefillChunk(allLogits);
    const promptLogprobs: (GeneratedToken | null)[] | undefined = allLogits ? [null] : undefined;
    for (let start = from; start < P; start += chunk) {
      if (start > from && signal?.aborted) throw abortError(signal);
      const part = tokens.slice(start, start + chunk);
      const last = start + part.length === P;
      const logits = await this.model.forward(part, start, this.cache, {
        allLogits,
        readBack: allLogits,
        ...(last ? { lastLogitsTo: this.prefillLogits } : {}),
      });
      if (keep) this.prefixCache.holds(tokens, start + part.length);
      if (!allLogits || !logits) continue;
      for (let r = 0; r < part.length; r++) {
        const position = start + r;
        if (position + 1 >= P) break;
        const row = logits.subarray(r * vocab, r * vocab + this.sampledVocab);
        promptLogprobs!.push(scoreToken(row, tokens[position + 1], request.logprobs, logSumExp(row)));
      }
    }
    return promptLogprobs;
  }

  /**
   * Readies the cache for another sequence of the session's prompt: a ring layer (window W, R
   * rows) holds position p until p + R is written, so a sequence that decoded more than R - W
   * tokens overwrote rows of the positions P - W + 1 .. P - 1 that the next one reads. Then (the
   * prefix cache's rule, resumable, says so) the prompt is prefilled again from 0: no later point
   * has its window held (it lies before the lost positions), and a prefill gives the same K/V
   * however it is split, so the sequence computes what it would after the first prefill. The
   * last logits of the session's prefill stay as they are. Without rings, or while the rings hold
   * the window, nothing runs. With `keep`, the prefix cache learns of each rewritten chunk.
   */
  private async restorePrompt(tokens: readonly number[], keep: boolean, signal: AbortSignal | undefined): Promise<void> {
    const P = tokens.length;
    if (!this.cache.ringed || this.prefixCache.resumable(P)) return;
    this.prefixCache.rewrites(0);
    if (keep) this.prefixCache.holds(tokens, 0);
    const chunk = this.prefillChunk(false);
    for (let start = 0; start < P; start += chunk) {
      if (this.destroyed) throw new Error('the model was unloaded');
      if (signal?.aborted) throw abortError(signal);
      const end = Math.min(P, start + chunk);
      await this.model.forward(tokens.slice(start, end), start, this.cache, { readBack: false });
      if (keep) this.prefixCache.holds(tokens, end);
    }
  }

  /**
   * With an f16 cache, rewrites with the prefill's kernels the K/V that decode steps wrote for the
   * tokens the cache holds (the last answer), before the next request gets the GPU: the two
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
    void this.decode?.then(
      (r) => {
        r.decodeStep.destroy();
        r.sampler.destroy();
        for (const b of r.staging) b.destroy();
      },
      () => {},
    );
    this.prefillLogits.destroy();
    this.prefixCache.clear();
    this.cache.destroy();
    this.model.destroy();
  }
}

/**
 * A session: the prefill's last logits on the GPU (read-only; every sequence's first step samples
 * them), its prompt logprobs, and the GPU until close(). Sequences run one at a time.
 */
class LlamaSession implements GenerationSession {
  private closed = false;
  private released = false;
  private running = false;
  /** The running sequence's token pipeline while the sequence is suspended at a yield. */
  private suspendedTokens: AsyncGenerator<GeneratedToken, void, void> | undefined;
  /** The base of the sequences' random streams: the request's seed, or one random seed per session. */
  private readonly seed: number;

  constructor(
    private readonly cache: KvCache,
    private readonly resources: DecodeResources,
    private readonly request: SessionRequest,
    private readonly prefillLogits: GPUBuffer,
    readonly promptLogprobs: readonly (GeneratedToken | null)[] | undefined,
    /** Prompt tokens whose K/V came from the prefix cache. */
    readonly cachedTokens: number,
    /** Told which tokens' K/V the cache holds as sequences write it; absent when the request keeps nothing. */
    private readonly prefixCache: PrefixCache | undefined,
    private readonly releaseGpu: () => void,
    /** Readies the prompt's K/V for the next sequence (LlamaGenerator.restorePrompt). */
    private readonly readyPrompt: () => Promise<void>,
  ) {
    this.seed = request.sampling.seed ?? randomSeed();
  }

  /**
   * Frees the GPU for the next request, once. A sequence suspended at a token (its caller has not
   * asked for the next one) is ended here: the batches it has in flight are awaited, then the GPU
   * is freed, and the sequence throws if it is resumed. A sequence waiting for the GPU (close()
   * from an abort handler, say) fails at its next token and frees the GPU when its work in flight
   * is done.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (!this.running) this.release();
    else if (this.suspendedTokens) void this.suspendedTokens.return().finally(() => this.release());
  }

  private release(): void {
    if (this.released) return;
    this.released = true;
    this.releaseGpu();
  }

  /**
   * Decodes sequence `index`: random stream `index` of the session's seed (Philox counters
   * (index, step), the same on every adapter), its own penalty history, starting from the
   * prefill's logits. Yields each generated token with its logprob (always) and its top
   * alternatives (when the session asked for logprobs; [] for logprobs 0). Returns 'stop' when a
   * stop id is sampled (not yielded) or the constraint allows nothing but stop ids; 'length' after
   * maxTokens tokens or when prompt + generated fills the context. A constraint's forced tokens are
   * yielded with `forced: true` and count as generated tokens. Throws an AbortError at the next
   * token once the session's signal aborts. Misuse (a closed session, a second sequence while one
   * runs, bad options) throws from the first next().
   */
  async *sequence(options: SequenceOptions): AsyncGenerator<GeneratedToken, FinishReason, void> {
    if (this.closed) throw new Error('the session is closed');
    if (this.running) throw new Error('another sequence of this session is still running; finish or return() it first');
    checkSequenceOptions(options);
    this.running = true;
    const { promptTokens } = this.request;
    // The sequence overwrites the positions past the prompt; it holds its tokens' K/V as it goes.
    this.prefixCache?.holds(promptTokens);
    const yielded: number[] = [];
    let stopSampled = false;
    // False while the prompt's K/V is being rewritten: the prefix cache then knows what is held.
    let promptHeld = true;
    try {
      const { sampling, signal, logprobs } = this.request;
      const P = promptTokens.length;
      // Token s needs the model run at position P + s - 1 < capacity (s >= 1).
      const maxSteps = Math.min(options.maxTokens, this.cache.capacity - P);
      if (maxSteps <= 0) return 'length';
      // A sequence before this one may have overwritten ring rows of the prompt this one reads.
      this.checkLive(signal);
      promptHeld = false;
      await this.readyPrompt();
      promptHeld = true;
      const stops = new Set(options.stopTokenIds);
      const { constraint } = options;
      this.resources.sampler.beginSequence({
        params: sampling,
        promptTokens,
        seed: this.seed,
        stream: options.index,
        banned: options.stopTokenIds,
        minTokens: options.minTokens ?? 0,
        ...(logprobs !== undefined ? { logprobs } : {}),
        ...(constraint ? { constrained: true } : {}),
      });
      const plan: DecodePlan = { promptLength: P, maxSteps, prefillLogits: this.prefillLogits, logprobs };
      const beforeSubmit = () => this.checkLive(signal);
      const tokens = constraint
        ? decodeConstrained(this.resources, { ...plan, constraint, stopTokenIds: options.stopTokenIds }, beforeSubmit)
        : decodeTokens(this.resources, plan, beforeSubmit);
      for await (const token of tokens) {
        this.checkLive(signal);
        if (stops.has(token.id)) {
          stopSampled = true;
          return 'stop';
        }
        yielded.push(token.id);
        this.suspendedTokens = tokens;
        try {
          yield token;
        } finally {
          this.suspendedTokens = undefined;
        }
        this.checkLive(signal);
      }
      this.checkLive(signal);
      if (yielded.length < maxSteps) {
        // The constraint allows nothing more but stop ids: a whole structure stops; a dead end did
        // not finish it, so it ends as cut short.
        if (constraint) return constraint.isComplete() ? 'stop' : 'length';
        throw new Error('the decode pipeline ended early'); // never: it runs maxSteps steps
      }
      return 'length';
    } finally {
      // Token i's K/V is written by the step that samples token i + 1: every yielded token's when
      // a stop id was sampled after them, all but the last one's otherwise. Once the GPU is
      // released (a session closed at a yield, this generator resumed later) the cache is another
      // request's: what it holds is then the prompt, as recorded when the sequence began.
      const written = stopSampled ? yielded.length : Math.max(0, yielded.length - 1);
      if (!this.released && promptHeld) this.prefixCache?.holds(promptTokens.concat(yielded.slice(0, written)), undefined, promptTokens.length);
      this.running = false;
      if (this.closed) this.release();
    }
  }

  private checkLive(signal: AbortSignal | undefined): void {
    if (signal?.aborted) throw abortError(signal);
    if (this.closed) throw new Error('the session was closed during a sequence');
  }
}

function checkSessionRequest(request: SessionRequest, vocabSize: number, capacity: number): void {
  const { promptTokens, sampling, logprobs } = request;
  if (promptTokens.length === 0) throw new RangeError('the prompt has no tokens');
  if (promptTokens.length > capacity) {
    throw new RangeError(`the prompt has ${promptTokens.length} tokens; the context holds ${capacity}`);
  }
  for (const id of promptTokens) {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new RangeError(`prompt token id ${id} is outside the vocabulary (0..${vocabSize - 1})`);
    }
  }
  if (logprobs !== undefined && !(Number.isInteger(logprobs) && logprobs >= 0)) {
    throw new RangeError(`logprobs must be a non-negative integer, got ${logprobs}`);
  }
  checkSampling(sampling, vocabSize);
}

function checkSampling(s: SamplingParams, vocabSize: number): void {
  const bad = (name: string, value: unknown, want: string) => new RangeError(`sampling ${name} must be ${want}, got ${value}`);
  if (!(Number.isFinite(s.temperature) && s.temperature >= 0)) throw bad('temperature', s.temperature, 'a finite number >= 0');
  if (!(s.topP >= 0 && s.topP <= 1)) throw bad('topP', s.topP, 'in [0, 1]');
  if (s.seed !== undefined && !Number.isFinite(s.seed)) throw bad('seed', s.seed, 'a finite number');
  if (s.topK !== undefined && !(Number.isInteger(s.topK) && s.topK >= 0)) throw bad('topK', s.topK, 'an integer >= 0');
  if (s.minP !== undefined && !(s.minP >= 0 && s.minP <= 1)) throw bad('minP', s.minP, 'in [0, 1]');
  if (s.repetitionPenalty !== undefined && !(Number.isFinite(s.repetitionPenalty) && s.repetitionPenalty > 0)) {
    throw bad('repetitionPenalty', s.repetitionPenalty, 'a finite number > 0');
  }
  if (s.presencePenalty !== undefined && !Number.isFinite(s.presencePenalty)) throw bad('presencePenalty', s.presencePenalty, 'finite');
  if (s.frequencyPenalty !== undefined && !Number.isFinite(s.frequencyPenalty)) throw bad('frequencyPenalty', s.frequencyPenalty, 'finite');
  for (const [id, bias] of s.logitBias ?? []) {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw bad('logitBias id', id, `a token id in 0..${vocabSize - 1}`);
    if (!Number.isFinite(bias)) throw bad(`logitBias[${id}]`, bias, 'finite');
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
