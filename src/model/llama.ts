// A loaded Llama model on the GPU: its weights, RoPE's frequencies, the activation buffers it
// keeps between calls, and the two ways to run it: forward() (a prompt or a token, through
// forward.ts's pass, logits read back) and createDecodeStep() (a step recorded once and encoded
// for every token: decode-step.ts, decode-layers.ts). Read forward.ts first.
import type { GpuContext } from '../gpu/device.ts';
import { Kernels, type DecodeArena, type KernelTuning } from '../gpu/kernels/index.ts';
import type { LlamaConfig } from './config.ts';
import { createDecodeArena } from './decode-layers.ts';
import { createLayeredBatchStep, type LayeredBatchOptions } from './batch-step-layers.ts';
import { createFusedBatchStep } from './batch-step-fused.ts';
import { isCpuAdapter } from '../gpu/device.ts';
import type { BatchDecodeStep } from './batch-step.ts';
import { createDecodeStep, type DecodeStep, type DecodeStepOptions } from './decode-step.ts';
import { Activations, activationFloatsPerToken, recordForward, type LlamaParts } from './forward.ts';
import { KvCache, type KvDType } from './kv-cache.ts';
import { runHiddenPasses, type HiddenPass } from './hidden-states.ts';
import { ropeInverseFrequencies } from './rope-frequencies.ts';
import { llamaShape, ropeTables } from './shape.ts';
import type { LlamaWeights } from './weights.ts';

export { ropeInverseFrequencies } from './rope-frequencies.ts';
export { activationFloatsPerToken } from './forward.ts';
export type { DecodeStep, DecodeStepOptions } from './decode-step.ts';
export type { HiddenPass, RowRun } from './hidden-states.ts';

/**
 * Prefill activations are kept between prefills up to this size; larger ones (long prompts on
 * large models) are made for their prefill and freed after it, as the memory they hold would
 * otherwise stay taken until the model is unloaded.
 */
const MAX_KEPT_PREFILL_BYTES = 64 * 1024 * 1024;

export interface ForwardOptions {
  /** Return logits for every input token ([T, vocab]) instead of the last one only. */
  allLogits?: boolean;
  /** Also copy the last token's logits (f32 [vocab]) into this buffer at offset 0 (usage COPY_DST). */
  lastLogitsTo?: GPUBuffer;
  /**
   * Read the logits back (default true). With false nothing is mapped: the promise resolves to
   * null once the work is submitted (the logits are then only in `lastLogitsTo`).
   */
  readBack?: boolean;
}

export class LlamaModel {
  /** What recordForward and the decode step read: the weights, their sizes and RoPE's frequencies. */
  private readonly parts: LlamaParts;
  /** forward()'s one-token activations, kept between calls. */
  private decodeActivations: Activations | undefined;
  /**
   * forward()'s activations for prompts (last-token logits), kept and reused by every prefill up to
   * their size, so that a prefill after the first creates no buffers, and its bind groups (the
   * same buffers) come from the kernels' cache. Sized to a power of two of tokens, at most the KV
   * cache's capacity (the memory estimate counts a prefill of the whole context); replaced by a
   * larger one when a longer prompt comes, up to MAX_KEPT_PREFILL_BYTES.
   */
  private prefillActivations: Activations | undefined;
  /** The decode layers' matrices in one buffer (createDecodeArena): made on first use; null where they cannot share one. */
  private arena: DecodeArena | null | undefined;
  /** @internal The most prefill activation bytes kept between prefills (tests lower it). */
  maxKeptPrefillBytes = MAX_KEPT_PREFILL_BYTES;

  private constructor(
    readonly ctx: GpuContext,
    readonly kernels: Kernels,
    readonly config: LlamaConfig,
    readonly weights: LlamaWeights,
  ) {
    // One table for each distinct RoPE of the layers, then the zero table of the layers without
    // (ropeTables); a model with neither keeps one placeholder, so that invFreq always exists.
    const { firstLayer, zeroTable } = ropeTables(config);
    const tables = firstLayer.map((layer) => ropeInverseFrequencies(config, layer));
    if (zeroTable || tables.length === 0) tables.push(new Float32Array(config.headDim / 2));
    const invFreqs = tables.map((frequencies, i) => {
      const buffer = ctx.device.createBuffer({
        label: `rope_inv_freq_${i}`,
        size: Math.max(4, frequencies.byteLength),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
      });
      ctx.device.queue.writeBuffer(buffer, 0, frequencies);
      return buffer;
    });
    this.parts = { ctx, kernels, weights, shape: llamaShape(config), invFreq: invFreqs[0], invFreqs };
  }

  /** `options.tuning` replaces the kernels' device choices (tests, measurements; see KernelTuning). */
  static async create(ctx: GpuContext, config: LlamaConfig, weights: LlamaWeights, options: { tuning?: Partial<KernelTuning> } = {}): Promise<LlamaModel> {
    return new LlamaModel(ctx, await Kernels.create(ctx, { tuning: options.tuning }), config, weights);
  }

  /** passTokens: the longest pass the sliding-window layers' rings take (KvCache; Infinity: every layer keeps every position). */
  createKvCache(capacity: number, kvDType: KvDType = 'f16', passTokens?: number, slots?: number): KvCache {
    return new KvCache(this.ctx.device, this.config, capacity, kvDType, passTokens, slots);
  }

  /**
   * Runs `tokens` at positions startPos.. through the model, appending their K/V to `cache`.
   * Returns the logits of the last token ([vocab]) or, with `allLogits`, of every token ([T, vocab]);
   * with `readBack: false`, null once the work is submitted (see ForwardOptions.lastLogitsTo).
   */
  forward(tokens: readonly number[], startPos: number, cache: KvCache, options?: ForwardOptions & { readBack?: true }): Promise<Float32Array>;
  forward(tokens: readonly number[], startPos: number, cache: KvCache, options: ForwardOptions & { readBack: false }): Promise<null>;
  forward(tokens: readonly number[], startPos: number, cache: KvCache, options?: ForwardOptions): Promise<Float32Array | null>;
  async forward(tokens: readonly number[], startPos: number, cache: KvCache, options: ForwardOptions = {}): Promise<Float32Array | null> {
    const T = tokens.length;
    if (T === 0) throw new Error('forward() needs at least one token');
    if (startPos + T > cache.capacity) {
      throw new Error(`sequence of ${startPos + T} positions exceeds the KV cache (${cache.capacity})`);
    }
    const allLogits = options.allLogits ?? false;
    const readBack = options.readBack ?? true;
    if (T > cache.maxPassTokens) return this.forwardInPasses(tokens, startPos, cache, options);
    cache.noteWritten(startPos + T);
    const vocabBytes = this.config.vocabSize * 4;
    if (options.lastLogitsTo && options.lastLogitsTo.size < vocabBytes) {
      throw new Error(`lastLogitsTo has ${options.lastLogitsTo.size} bytes, needs ${vocabBytes}`);
    }
    const act = this.activationsFor(T, allLogits, cache.capacity);
    const kept = act === this.decodeActivations || act === this.prefillActivations;
    // Kernels chosen as for any number of tokens: a prompt gives the same K/V and logits however it
    // is split into passes (in chunks, or after a cached prefix).
    const batch = this.kernels.begin({ prefill: true });
    let readback: GPUBuffer | undefined;
    let ownReadback: GPUBuffer | undefined;
    try {
      this.ctx.device.queue.writeBuffer(act.tokenIds, 0, new Uint32Array(tokens));
      recordForward(batch, this.parts, act, { T, startPos, cache });
      if (options.lastLogitsTo) batch.copy(act.logits, allLogits ? (T - 1) * vocabBytes : 0, options.lastLogitsTo, 0, vocabBytes);
      // The kept prefill activations have no readback of their own (a call still waiting on its
      // mapping would block the next call's copy into it): a read-back there gets its own buffer.
      const logitsBytes = (allLogits ? T : 1) * vocabBytes;
      readback = act.logitsReadback;
      if (readBack && !readback) {
        readback = ownReadback = this.ctx.device.createBuffer({
          label: 'logits_readback',
          size: logitsBytes,
          usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
        });
      }
      if (readBack && readback) batch.copy(act.logits, 0, readback, 0, logitsBytes);
      batch.submit();
      if (!readBack || !readback) return null;
      await readback.mapAsync(GPUMapMode.READ, 0, logitsBytes);
      const logits = new Float32Array(readback.getMappedRange(0, logitsBytes).slice(0));
      readback.unmap();
      return logits;
    } finally {
      batch.discard();
      // Legal right after submit: the buffers are freed once the submitted work is done with them.
      if (!kept) act.destroy();
      ownReadback?.destroy();
    }
  }

  /**
   * The final hidden states (after the final norm, no LM head) of the rows each pass asks for,
   * [rows, hiddenSize]: the passes run in order over `cache` (writing their K/V like a prefill), in
   * one command buffer with one read-back (hidden-states.ts). Each pass takes at most
   * cache.maxPassTokens tokens.
   */
  async hiddenStates(passes: readonly HiddenPass[], cache: KvCache): Promise<Float32Array> {
    const longest = passes.reduce((n, p) => Math.max(n, p.tokens.length), 0);
    if (longest === 0) throw new Error('hiddenStates() needs at least one token');
    // Never the one-token activations: their logits' read-back may still be mapped by forward().
    const act = this.activationsFor(Math.max(2, longest), false, cache.capacity);
    const kept = act === this.prefillActivations;
    try {
      return await runHiddenPasses(this.parts, act, passes, cache);
    } finally {
      if (!kept) act.destroy();
    }
  }

  /**
   * forward() of more tokens than the cache's rings take in one pass (KvCache.maxPassTokens): in
   * passes of at most that many, which gives the same K/V and logits (the kernels are chosen as
   * for any number of tokens); all logits, when asked, are joined.
   */
  private async forwardInPasses(tokens: readonly number[], startPos: number, cache: KvCache, options: ForwardOptions): Promise<Float32Array | null> {
    const step = cache.maxPassTokens;
    const parts: Float32Array[] = [];
    let last: Float32Array | null = null;
    for (let start = 0; start < tokens.length; start += step) {
      const end = Math.min(tokens.length, start + step);
      const final = end === tokens.length;
      last = await this.forward(tokens.slice(start, end), startPos + start, cache, {
        allLogits: options.allLogits,
        readBack: options.allLogits ? options.readBack : final && (options.readBack ?? true),
        ...(final && options.lastLogitsTo ? { lastLogitsTo: options.lastLogitsTo } : {}),
      });
      if (options.allLogits && last) parts.push(last);
    }
    if (!options.allLogits || !last) return last;
    const joined = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      joined.set(p, at);
      at += p.length;
    }
    return joined;
  }

  /** Activations for T tokens: the kept ones (see decodeActivations, prefillActivations), or new ones for all-logits passes. */
  private activationsFor(T: number, allLogits: boolean, maxTokens = T): Activations {
    const device = this.ctx.device;
    const shape = this.parts.shape;
    if (T === 1 && !allLogits) {
      this.decodeActivations ??= new Activations(device, shape, 1, false);
      return this.decodeActivations;
    }
    if (allLogits) return new Activations(device, shape, T, true);
    if (this.prefillActivations && this.prefillActivations.tokens >= T) return this.prefillActivations;
    const tokens = Math.max(T, Math.min(2 ** Math.ceil(Math.log2(T)), maxTokens));
    if (4 * tokens * activationFloatsPerToken(this.config) > this.maxKeptPrefillBytes) {
      return new Activations(device, shape, T, false, false); // freed by forward() after its submit
    }
    // Legal right after submit: the old buffers are freed once the submitted work is done with them.
    this.prefillActivations?.destroy();
    this.prefillActivations = new Activations(device, shape, tokens, false, false);
    return this.prefillActivations;
  }

  /**
   * A reusable decode step over `cache` (see DecodeStep): its activations, position buffer, uniform
   * parameters and bind groups are made here, once. Steps must be submitted in position order
   * with the tokens the cache has not yet seen; forward() and other steps may share the cache.
   */
  createDecodeStep(cache: KvCache, options: DecodeStepOptions = {}): DecodeStep {
    const parts = this.parts;
    return createDecodeStep(
      {
        ...parts,
        newActivations: () => new Activations(this.ctx.device, parts.shape, 1, false, false),
        recordForward: (rec, act, stepCache, position) => recordForward(rec, parts, act, { T: 1, startPos: 0, cache: stepCache, position }),
        decodeArena: () => this.decodeArena(),
      },
      cache,
      options,
    );
  }

  /**
   * The decode-layer path's step of many sequences at once (createLayeredBatchStep), each row in a
   * slot of `cache`; or why this model cannot take it.
   */
  createLayeredBatchStep(cache: KvCache, options: LayeredBatchOptions): BatchDecodeStep | string {
    return createLayeredBatchStep({ ...this.parts, decodeArena: () => this.decodeArena() }, cache, options);
  }

  /** The fused path's step of many sequences at once (createFusedBatchStep); or why this model cannot take it. */
  createFusedBatchStep(cache: KvCache, options: { maxRows: number; vocabRows?: number }): BatchDecodeStep | string {
    return createFusedBatchStep(this.parts, cache, options);
  }

  /**
   * The step of many sequences at once this model decodes with on this device, each row in a slot
   * of `cache` (a KvCache with slots); or why none runs it (then each sequence takes its own
   * DecodeStep: batch-step-each.ts). The decode-layer kernel where the model takes it (CPU
   * adapters, small layers); on GPUs the fused kernels, which read each weight once for every row.
   * On CPU adapters the fused path's rows cost what separate steps cost (the work there is the
   * arithmetic, not the weights' reads), so those keep separate steps.
   */
  createBatchStep(cache: KvCache, options: { maxRows: number; vocabRows?: number }): BatchDecodeStep | string {
    const layered = this.createLayeredBatchStep(cache, options);
    if (typeof layered !== 'string') return layered;
    if (isCpuAdapter(this.ctx.adapter)) return `on a CPU adapter: ${layered}`;
    return this.createFusedBatchStep(cache, options);
  }

  /** The decode layers' matrices in one buffer (createDecodeArena), made on first use and kept. */
  private decodeArena(): DecodeArena | null {
    if (this.arena === undefined) this.arena = createDecodeArena(this.parts);
    return this.arena;
  }

  destroy(): void {
    this.decodeActivations?.destroy();
    this.prefillActivations?.destroy();
    this.arena?.buffer.destroy();
    for (const b of this.parts.invFreqs) b.destroy();
    this.weights.destroy();
  }
}
