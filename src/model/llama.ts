// The Llama forward pass on the GPU, read top to bottom like llama2.c's run.c:
//
//   x = embed(tokens)
//   for each layer:
//     xb = rmsnorm(x) ; q, k, v = xb·Wqᵀ, xb·Wkᵀ, xb·Wvᵀ ; rope(q, k) ; cache k, v
//     x += attention(q, K, V)·Woᵀ
//     xb = rmsnorm(x) ; x += (silu(xb·W_gateᵀ) * xb·W_upᵀ)·W_downᵀ
//   logits = rmsnorm(x)·W_lm_headᵀ
//
// Prefill runs the whole prompt through each layer in one pass (T tokens at once); decode is the
// same code with T = 1. Every dispatch of a step is recorded into one command buffer.
// test/reference/cpu-llama.ts runs the same steps on the CPU: check recordForward against it, and
// the tensor shapes in recordForward's comments against the arrays it computes (sizes: LlamaShape).
//
// The reusable decode step (LlamaModel.createDecodeStep) is the same math with fused kernels, in
// decode-step.ts; on CPU adapters small models run it a layer a dispatch, in decode-layers.ts.
import type { GpuContext } from '../gpu/device.ts';
import { Kernels, type DecodeArena, type KernelRecorder } from '../gpu/kernels.ts';
import type { LlamaConfig } from './config.ts';
import { createDecodeArena } from './decode-layers.ts';
import { createDecodeStep, type DecodeStep, type DecodeStepOptions } from './decode-step.ts';
import { KvCache, type KvDType } from './kv-cache.ts';
import { ropeInverseFrequencies } from './rope-frequencies.ts';
import { llamaShape, type LlamaShape } from './shape.ts';
import type { LlamaWeights } from './weights.ts';

export { ropeInverseFrequencies } from './rope-frequencies.ts';
export type { DecodeStep, DecodeStepOptions } from './decode-step.ts';

/**
 * f32 elements per token of the activation buffers (Activations' [T, ...] ones: token ids, x, xb,
 * q, k, v, attention out, gate, up, FFN hidden).
 */
export function activationFloatsPerToken(c: LlamaConfig): number {
  const s = llamaShape(c);
  return 1 + 2 * s.dim + 2 * s.qDim + 2 * s.kvDim + 3 * s.ffn;
}

/** Activation buffers of one step, sized for up to `tokens` tokens (T below). */
export class Activations {
  readonly buffers: GPUBuffer[] = [];
  readonly tokenIds: GPUBuffer; // u32 [T]
  readonly x: GPUBuffer; // the residual stream [T, dim]
  readonly xb: GPUBuffer; // rmsnorm(x) [T, dim]
  readonly q: GPUBuffer; // [T, heads, headDim]
  readonly k: GPUBuffer; // [T, kvHeads, headDim]
  readonly v: GPUBuffer; // [T, kvHeads, headDim]
  readonly attnOut: GPUBuffer; // [T, heads, headDim]
  readonly gate: GPUBuffer; // [T, ffn]
  readonly up: GPUBuffer; // [T, ffn]
  readonly ffnHidden: GPUBuffer; // silu(gate) * up [T, ffn]
  readonly lastXb: GPUBuffer; // the last token's rmsnorm(x) [dim]
  readonly logits: GPUBuffer; // [T or 1, vocab]
  /** MAP_READ copy of the logits; absent when they stay on the GPU (the decode step). */
  readonly logitsReadback: GPUBuffer | undefined;

  constructor(
    device: GPUDevice,
    s: LlamaShape,
    readonly tokens: number,
    readonly allLogits: boolean,
    readable = true,
  ) {
    const f32 = (label: string, elements: number, extraUsage = 0) => {
      const buffer = device.createBuffer({
        label,
        size: Math.max(4, elements * 4),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST | extraUsage,
      });
      this.buffers.push(buffer);
      return buffer;
    };
    const T = tokens;
    this.tokenIds = f32('tokens', T);
    this.x = f32('x', T * s.dim);
    this.xb = f32('xb', T * s.dim);
    this.q = f32('q', T * s.qDim);
    this.k = f32('k', T * s.kvDim);
    this.v = f32('v', T * s.kvDim);
    this.attnOut = f32('attn_out', T * s.qDim);
    this.gate = f32('gate', T * s.ffn);
    this.up = f32('up', T * s.ffn);
    this.ffnHidden = f32('ffn_hidden', T * s.ffn);
    this.lastXb = f32('last_xb', s.dim);
    const logitRows = allLogits ? T : 1;
    this.logits = f32('logits', logitRows * s.vocab);
    if (readable) {
      this.logitsReadback = device.createBuffer({
        label: 'logits_readback',
        size: logitRows * s.vocab * 4,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
      this.buffers.push(this.logitsReadback);
    }
  }

  destroy(): void {
    for (const b of this.buffers) b.destroy();
  }
}

/** What the recorded passes read of a loaded model (LlamaModel hands it to decode-step.ts and decode-layers.ts). */
export interface LlamaParts {
  readonly ctx: GpuContext;
  readonly kernels: Kernels;
  readonly weights: LlamaWeights;
  readonly shape: LlamaShape;
  /** f32 [headDim / 2]: RoPE's inverse frequencies (ropeInverseFrequencies). */
  readonly invFreq: GPUBuffer;
}

/** The tokens one recorded pass runs. */
export interface ForwardPass {
  /** Tokens: the first T of act.tokenIds. */
  readonly T: number;
  /** The first token's position. */
  readonly startPos: number;
  /** Takes the T tokens' K and V at their positions. */
  readonly cache: KvCache;
  /** A u32 on the GPU added to every position (the reusable decode step's position). */
  readonly position?: GPUBuffer;
}

/** Records the forward pass of the tokens in act.tokenIds, at their positions, up to act.logits. */
export function recordForward(rec: KernelRecorder, model: LlamaParts, act: Activations, pass: ForwardPass): void {
  const { shape: s, weights: w, invFreq } = model;
  const a = s.attention;
  const { T, startPos, cache, position } = pass;

  rec.embedding(act.x, w.tokenEmbedding, act.tokenIds, T); // x: [T, dim]

  for (let l = 0; l < s.layers; l++) {
    const layer = w.layers[l];
    const keys = cache.keys[l]; // [capacity, kvHeads, headDim]
    const values = cache.values[l];

    // Attention block: x += attention(rope(xb·Wqᵀ), rope(xb·Wkᵀ), xb·Wvᵀ)·Woᵀ with xb = rmsnorm(x)
    // (the residual add is folded into the Wo matmul).
    rec.rmsNorm(act.xb, act.x, layer.attnNorm, T, s.dim, s.eps); // xb: [T, dim]
    rec.matmul(act.q, act.xb, layer.wq, T, layer.bq); // q: [T, heads, headDim]
    rec.matmulPair(act.k, act.v, act.xb, layer.wk, layer.wv, T, layer.bk, layer.bv); // k, v: [T, kvHeads, headDim]
    rec.rope(act.q, T, a.heads, a.headDim, startPos, invFreq, a.pairing, position);
    rec.rope(act.k, T, a.kvHeads, a.headDim, startPos, invFreq, a.pairing, position);
    // keys, values rows startPos .. startPos + T - 1 = k, v
    if (cache.kvDType === 'f32' && !position) {
      // The T new positions are contiguous in the cache: one copy each for K and V.
      rec.copy(act.k, 0, keys, startPos * cache.rowBytes, T * cache.rowBytes);
      rec.copy(act.v, 0, values, startPos * cache.rowBytes, T * cache.rowBytes);
    } else {
      rec.writeKv(keys, values, act.k, act.v, T, startPos, s.kvDim, { kvDType: cache.kvDType, position });
    }
    // attnOut: [T, heads, headDim]; each query sees the rows up to its position (the last slidingWindow of them, when set).
    rec.attention(act.attnOut, act.q, keys, values, T, startPos, a.heads, a.kvHeads, a.headDim, a.slidingWindow, cache.kvDType, position);
    rec.matmul(act.x, act.attnOut, layer.wo, T, undefined, { accumulate: true }); // x: [T, dim]

    // Feed-forward block (SwiGLU): x += (silu(xb·W_gateᵀ) * xb·W_upᵀ)·W_downᵀ with xb = rmsnorm(x)
    // (the residual add is folded into the W_down matmul).
    rec.rmsNorm(act.xb, act.x, layer.ffnNorm, T, s.dim, s.eps); // xb: [T, dim]
    rec.matmulSwiglu(act.ffnHidden, act.xb, layer.wGate, layer.wUp, T, { gate: act.gate, up: act.up }); // ffnHidden: [T, ffn]
    rec.matmul(act.x, act.ffnHidden, layer.wDown, T, undefined, { accumulate: true }); // x: [T, dim]
  }

  rec.rmsNorm(act.xb, act.x, w.outputNorm, T, s.dim, s.eps); // xb: [T, dim]
  if (act.allLogits || T === 1) {
    rec.matmul(act.logits, act.xb, w.lmHead, T); // logits: [T, vocab]
  } else {
    // Only the last token's logits are needed to pick the next token.
    rec.copy(act.xb, (T - 1) * s.dim * 4, act.lastXb, 0, s.dim * 4); // lastXb: [dim]
    rec.matmul(act.logits, act.lastXb, w.lmHead, 1); // logits: [1, vocab]
  }
}

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
    const frequencies = ropeInverseFrequencies(config);
    const invFreq = ctx.device.createBuffer({
      label: 'rope_inv_freq',
      size: frequencies.byteLength,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
    });
    ctx.device.queue.writeBuffer(invFreq, 0, frequencies);
    this.parts = { ctx, kernels, weights, shape: llamaShape(config), invFreq };
  }

  static async create(ctx: GpuContext, config: LlamaConfig, weights: LlamaWeights): Promise<LlamaModel> {
    return new LlamaModel(ctx, await Kernels.create(ctx), config, weights);
  }

  createKvCache(capacity: number, kvDType: KvDType = 'f16'): KvCache {
    return new KvCache(this.ctx.device, this.config, capacity, kvDType);
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
    const vocabBytes = this.config.vocabSize * 4;
    if (options.lastLogitsTo && options.lastLogitsTo.size < vocabBytes) {
      throw new Error(`lastLogitsTo has ${options.lastLogitsTo.size} bytes, needs ${vocabBytes}`);
    }
    const act = this.activationsFor(T, allLogits, cache.capacity);
    const kept = act === this.decodeActivations || act === this.prefillActivations;
    const batch = this.kernels.begin();
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
        decodeArena: () => {
          if (this.arena === undefined) this.arena = createDecodeArena(parts);
          return this.arena;
        },
      },
      cache,
      options,
    );
  }

  destroy(): void {
    this.decodeActivations?.destroy();
    this.prefillActivations?.destroy();
    this.arena?.buffer.destroy();
    this.parts.invFreq.destroy();
    this.weights.destroy();
  }
}
