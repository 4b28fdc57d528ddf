// The generation loop on the GPU: a session prefills the prompt once, then decodes sequences
// (choices) from it one after another, sampling on the CPU (src/sampling).
//
// KV cache sharing: the prompt's K/V sit at positions 0..P-1 and decode steps only write
// positions >= P, so every sequence of a session reuses the prompt's K/V without copying: sequence
// j overwrites what sequence j-1 wrote past the prompt, and attention at position q reads only
// positions <= q, all written by sequence j itself. The one cache is lent to the session that
// holds the scheduler; nothing else is shared between sessions.
import type { LlamaModel } from '../model/llama.ts';
import type { KvCache } from '../model/kv-cache.ts';
import { logSumExp, scoreToken } from '../sampling/logprobs.ts';
import { createRandomStream, randomSeed } from '../sampling/random.ts';
import { SequenceSampler } from '../sampling/sampler.ts';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { Scheduler, abortError } from './scheduler.ts';
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
} from './types.ts';

export interface LlamaGeneratorOptions {
  /** Requests that may wait for the GPU before new ones are refused (QueueFullError). */
  maxQueued?: number;
  /**
   * Most prompt tokens per prefill pass; longer prompts are prefilled in chunks (the same
   * result: each chunk attends to the cache the chunks before it wrote). Default: what the
   * device's buffer limits allow (and at most 64 MiB of logits per pass when every position's
   * logits are needed, for prompt logprobs).
   */
  prefillChunkTokens?: number;
}

/** Bytes of logits one prefill pass may return when every position's logits are read back. */
const MAX_ALL_LOGITS_BYTES = 64 * 1024 * 1024;

export class LlamaGenerator implements TextGenerator {
  private readonly scheduler: Scheduler;
  private readonly prefillChunkTokens: number | undefined;

  constructor(
    readonly model: LlamaModel,
    readonly tokenizer: TextTokenizer,
    readonly info: ModelInfo,
    /** One KV cache, lent to the session that holds the GPU: each session rewrites it from position 0. */
    private readonly cache: KvCache,
    options: LlamaGeneratorOptions = {},
  ) {
    this.scheduler = new Scheduler(options.maxQueued);
    this.prefillChunkTokens = options.prefillChunkTokens;
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
    const vocabSize = this.model.config.vocabSize;
    checkSessionRequest(request, vocabSize, this.cache.capacity);
    const { signal } = request;
    const release = await this.scheduler.acquire(signal);
    try {
      if (signal?.aborted) throw abortError(signal);
      const prefill = await this.prefill(request);
      if (signal?.aborted) throw abortError(signal);
      return new LlamaSession(this.model, this.cache, request, prefill.lastLogits, prefill.promptLogprobs, release);
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

  /**
   * Runs the prompt through the model (in chunks if it is long), keeping the last position's
   * logits and, when asked, scoring every prompt token from the logits of the position before it.
   */
  private async prefill(request: SessionRequest): Promise<{ lastLogits: Float32Array; promptLogprobs: (GeneratedToken | null)[] | undefined }> {
    const { promptTokens: tokens, signal } = request;
    const P = tokens.length;
    const vocab = this.model.config.vocabSize;
    const allLogits = request.promptLogprobs === true;
    const chunk = this.prefillChunk(allLogits);
    const promptLogprobs: (GeneratedToken | null)[] | undefined = allLogits ? [null] : undefined;
    let lastLogits: Float32Array | undefined;
    for (let start = 0; start < P; start += chunk) {
      if (start > 0 && signal?.aborted) throw abortError(signal);
      const part = tokens.slice(start, start + chunk);
      const logits = await this.model.forward(part, start, this.cache, { allLogits });
      if (!allLogits) {
        if (start + part.length === P) lastLogits = logits;
        continue;
      }
      for (let r = 0; r < part.length; r++) {
        const position = start + r;
        const row = logits.subarray(r * vocab, (r + 1) * vocab);
        if (position + 1 < P) promptLogprobs!.push(scoreToken(row, tokens[position + 1], request.logprobs, logSumExp(row)));
        else lastLogits = row.slice();
      }
    }
    return { lastLogits: lastLogits!, promptLogprobs };
  }

  private prefillChunk(allLogits: boolean): number {
    if (this.prefillChunkTokens !== undefined) return Math.max(1, Math.floor(this.prefillChunkTokens));
    const c = this.model.config;
    const limits = this.model.ctx.limits;
    const maxBinding = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
    const widestRow = Math.max(c.hiddenSize, c.numHeads * c.headDim, c.intermediateSize) * 4;
    let tokens = Math.floor(maxBinding / widestRow);
    if (allLogits) tokens = Math.min(tokens, Math.floor(Math.min(maxBinding, MAX_ALL_LOGITS_BYTES) / (c.vocabSize * 4)));
    return Math.max(1, tokens);
  }

  destroy(): void {
    this.cache.destroy();
    this.model.destroy();
  }
}

/**
 * A session: the prefill's last logits (read-only; each sequence copies them), its prompt
 * logprobs, and the GPU until close(). Sequences run one at a time.
 */
class LlamaSession implements GenerationSession {
  private closed = false;
  private released = false;
  private running = false;
  /** A forward pass this session submitted and has not finished reading. */
  private inFlight = false;
  /** The base of the sequences' random streams: the request's seed, or one random seed per session. */
  private readonly seed: number;

  constructor(
    private readonly model: LlamaModel,
    private readonly cache: KvCache,
    private readonly request: SessionRequest,
    private readonly prefillLogits: Float32Array,
    readonly promptLogprobs: readonly (GeneratedToken | null)[] | undefined,
    private readonly releaseGpu: () => void,
  ) {
    this.seed = request.sampling.seed ?? randomSeed();
  }

  /**
   * Frees the GPU for the next request, once. If a forward pass of this session is still
   * running (close() from an abort handler, say), the GPU is freed when it ends; the sequence
   * then fails at its next step.
   */
  close(): void {
    this.closed = true;
    if (!this.inFlight) this.release();
  }

  private release(): void {
    if (this.released) return;
    this.released = true;
    this.releaseGpu();
  }

  /**
   * Decodes sequence `index`: random stream `index` of the session's seed (random.ts), its own
   * penalty history, starting from a copy of the prefill logits. Yields each generated token
   * with its logprob (always) and its top alternatives (when the session asked for logprobs;
   * [] for logprobs 0). Returns 'stop' when a stop id is sampled (not yielded); 'length' after
   * maxTokens tokens or when prompt + generated fills the context. Throws an AbortError at the
   * next token once the session's signal aborts. Misuse (a closed session, a second sequence
   * while one runs, bad options) throws from the first next().
   */
  async *sequence(options: SequenceOptions): AsyncGenerator<GeneratedToken, FinishReason, void> {
    if (this.closed) throw new Error('the session is closed');
    if (this.running) throw new Error('another sequence of this session is still running; finish or return() it first');
    checkSequenceOptions(options);
    this.running = true;
    try {
      const { promptTokens, sampling, signal, logprobs } = this.request;
      const vocab = this.model.config.vocabSize;
      const P = promptTokens.length;
      const capacity = this.cache.capacity;
      const { maxTokens } = options;
      const minTokens = options.minTokens ?? 0;
      const stops = new Set(options.stopTokenIds);
      const sampler = new SequenceSampler(vocab, sampling, promptTokens, createRandomStream(this.seed, options.index));
      let logits: Float32Array = this.prefillLogits.slice();
      for (let generated = 0; ; ) {
        if (generated >= maxTokens || P + generated >= capacity) return 'length';
        this.checkLive(signal);
        const id = sampler.sample(logits, generated < minTokens ? stops : null);
        if (stops.has(id)) return 'stop';
        const token = scoreToken(logits, id, logprobs);
        sampler.accept(id);
        generated++;
        yield token;
        if (generated >= maxTokens || P + generated >= capacity) return 'length'; // no pass for a token nobody reads
        this.checkLive(signal);
        logits = await this.decode(id, P + generated - 1);
      }
    } finally {
      this.running = false;
    }
  }

  private checkLive(signal: AbortSignal | undefined): void {
    if (signal?.aborted) throw abortError(signal);
    if (this.closed) throw new Error('the session was closed during a sequence');
  }

  private async decode(token: number, position: number): Promise<Float32Array> {
    this.inFlight = true;
    try {
      return await this.model.forward([token], position, this.cache);
    } finally {
      this.inFlight = false;
      if (this.closed) this.release();
    }
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
  if (!(s.topP > 0 && s.topP <= 1)) throw bad('topP', s.topP, 'in (0, 1]');
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
