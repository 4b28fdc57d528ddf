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
import type { GpuContext } from '../gpu/device.ts';
import {
  DECODE_LAYER_MAX_WEIGHTS,
  DECODE_RECORD_BYTES,
  DECODE_RECORD_SLOTS,
  decodeLayerGroups,
  decodeLayerLayout,
  Kernels,
  type DecodeArena,
  type DecodeLayerDims,
  type DecodeLayerLayout,
  type KernelProgram,
  type KernelRecorder,
  type KernelTuning,
} from '../gpu/kernels/index.ts';
import type { GpuMatrix } from '../gpu/tensor.ts';
import type { LlamaConfig } from './config.ts';
import { KvCache, type KvDType } from './kv-cache.ts';
import type { LlamaLayerWeights, LlamaWeights } from './weights.ts';

/**
 * RoPE inverse frequencies: θ_i = theta^(-2i/d) for i < d/2, then the config's scaling:
 * - linear: θ_i / factor (positions divided by the factor);
 * - llama3 (Hugging Face `_compute_llama3_parameters`): with wavelength λ_i = 2π / θ_i and
 *   λ_lo = original_context / low_freq_factor, λ_hi = original_context / high_freq_factor,
 *   λ_i < λ_hi keeps θ_i, λ_i > λ_lo gives θ_i / factor, and in between
 *   s = (original_context / λ_i - low_freq_factor) / (high_freq_factor - low_freq_factor),
 *   θ_i ((1 - s) / factor + s);
 * - GGUF rope_freqs.weight: θ_i / rope_freqs[i] (llama.cpp's way of storing the same).
 */
export function ropeInverseFrequencies(config: LlamaConfig): Float32Array<ArrayBuffer> {
  const half = config.headDim / 2;
  const invFreq = new Float32Array(half);
  const scaling = config.ropeScaling;
  const factors = config.ropeFreqFactors;
  if (factors && factors.length !== half) {
    throw new Error(`${factors.length} RoPE frequency factors for head size ${config.headDim} (needs ${half})`);
  }
  for (let i = 0; i < half; i++) {
    let f = Math.pow(config.ropeTheta, (-2 * i) / config.headDim);
    if (scaling?.type === 'linear') {
      f /= scaling.factor;
    } else if (scaling?.type === 'llama3') {
      const { factor, lowFreqFactor, highFreqFactor, originalContextLength } = scaling;
      const wavelen = (2 * Math.PI) / f;
      const lowFreqWavelen = originalContextLength / lowFreqFactor;
      const highFreqWavelen = originalContextLength / highFreqFactor;
      if (wavelen > lowFreqWavelen) {
        f /= factor;
      } else if (wavelen >= highFreqWavelen) {
        const smooth = (originalContextLength / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
        f = ((1 - smooth) * f) / factor + smooth * f;
      }
    }
    if (factors) f /= factors[i];
    invFreq[i] = f;
  }
  return invFreq;
}

/**
 * f32 elements per token of the activation buffers (Activations' [T, ...] ones: token ids, x, xb,
 * q, k, v, attention out, gate, up, FFN hidden).
 */
export function activationFloatsPerToken(c: LlamaConfig): number {
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  return 1 + 2 * c.hiddenSize + 2 * q + 2 * kv + 3 * c.intermediateSize;
}

/** Activation buffers of one step, sized for up to `tokens` tokens. */
class Activations {
  readonly buffers: GPUBuffer[] = [];
  readonly tokenIds: GPUBuffer;
  readonly x: GPUBuffer; // residual stream [T, d]
  readonly xb: GPUBuffer; // normalized x [T, d]
  readonly q: GPUBuffer; // [T, n_heads, head_dim]
  readonly k: GPUBuffer; // [T, n_kv_heads, head_dim]
  readonly v: GPUBuffer;
  readonly attnOut: GPUBuffer; // [T, n_heads, head_dim]
  readonly gate: GPUBuffer; // [T, ffn]
  readonly up: GPUBuffer;
  readonly ffnHidden: GPUBuffer; // silu(gate) * up
  readonly lastXb: GPUBuffer; // the last token's normalized x [d]
  readonly logits: GPUBuffer; // [T or 1, vocab]
  /** MAP_READ copy of the logits; absent when they stay on the GPU (the decode step). */
  readonly logitsReadback: GPUBuffer | undefined;

  constructor(
    device: GPUDevice,
    c: LlamaConfig,
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
    const qDim = c.numHeads * c.headDim;
    const kvDim = c.numKvHeads * c.headDim;
    this.tokenIds = f32('tokens', T);
    this.x = f32('x', T * c.hiddenSize);
    this.xb = f32('xb', T * c.hiddenSize);
    this.q = f32('q', T * qDim);
    this.k = f32('k', T * kvDim);
    this.v = f32('v', T * kvDim);
    this.attnOut = f32('attn_out', T * qDim);
    this.gate = f32('gate', T * c.intermediateSize);
    this.up = f32('up', T * c.intermediateSize);
    this.ffnHidden = f32('ffn_hidden', T * c.intermediateSize);
    this.lastXb = f32('last_xb', c.hiddenSize);
    const logitRows = allLogits ? T : 1;
    this.logits = f32('logits', logitRows * c.vocabSize);
    if (readable) {
      this.logitsReadback = device.createBuffer({
        label: 'logits_readback',
        size: logitRows * c.vocabSize * 4,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
      this.buffers.push(this.logitsReadback);
    }
  }

  destroy(): void {
    for (const b of this.buffers) b.destroy();
  }
}

/**
 * Prefill activations are kept between prefills up to this size; larger ones (long prompts on
 * large models) are made for their prefill and freed after it, as the memory they hold would
 * otherwise stay taken until the model is unloaded.
 */
const MAX_KEPT_PREFILL_BYTES = 64 * 1024 * 1024;
/**
 * The most bytes LlamaModel.decodeArena copies the decode layers' matrices into. Only small models
 * take decode_layer.wgsl (DECODE_LAYER_MAX_WEIGHTS a layer), so this bounds the memory their decode
 * step adds to the weights (stories260K: ~1 MB).
 */
const MAX_DECODE_ARENA_BYTES = 64 * 1024 * 1024;

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

/**
 * One decode step recorded once and encoded again for every token: the token is read from
 * `tokenIn` on the GPU and the position from a small buffer, so nothing is created per step.
 */
export interface DecodeStep {
  /** u32 at byte offset 0: the token the next encodeStep embeds (written on the GPU by a sampler, or by queue.writeBuffer). */
  readonly tokenIn: GPUBuffer; // usage STORAGE | COPY_DST | COPY_SRC
  /** f32 [vocab]: the logits of the last encoded step, once its commands have run. */
  readonly logits: GPUBuffer; // usage STORAGE | COPY_SRC | COPY_DST
  /** Dispatches one encodeStep records. */
  readonly dispatchCount: number;
  /**
   * Records one decode step (the token in tokenIn at `position`, its K/V written to the cache at
   * `position`, logits out) into `encoder`. The position is set by a 4-byte copy recorded in the
   * encoder ahead of the dispatches (from a table of every position), so several steps may be
   * encoded into one command buffer, in order. Creates no buffers, bind groups or pipelines, and
   * writes nothing through the queue: it only encodes that copy and the recorded dispatches.
   */
  encodeStep(encoder: GPUCommandEncoder, position: number): void;
  /**
   * Present when each step leaves the next one's position on the GPU (the step of one dispatch a
   * layer: its last layer adds 1 to the position it ran at). Then a run of n steps at positions
   * p .. p + n - 1 is one `setPosition(encoder, p, n)` followed by `encodeInPass` per step, all in one
   * compute pass with whatever else runs between them (the sampler). On SwiftShader in Chromium a
   * pass costs ~20 µs and a copy ~25 µs: with the sampler's pass, ~5% of a stories260K token.
   */
  readonly consecutive?: {
    /** Records the copy that starts a run of `steps` steps at `position` (outside a pass). */
    setPosition(encoder: GPUCommandEncoder, position: number, steps: number): void;
    /** Records one step, at the position the previous one left, into an open compute pass. */
    encodeInPass(pass: GPUComputePassEncoder): void;
  };
  /**
   * Present with `consecutive` where the step's last dispatch can also pick the next token
   * greedily: the argmax of the logits (the lowest id on ties), as the GPU sampler picks it at
   * temperature 0 with no bias, penalties or alternatives. A greedy sequence then needs no
   * sampler dispatch a step (on SwiftShader in Chromium: ~100 µs of stories260K's ~1.7 ms).
   */
  readonly greedy?: {
    /**
     * consecutive.encodeInPass, then the pick: its id to tokenIn (byte 0), where the next step
     * reads it, and its record to `records`.
     */
    encodeInPass(pass: GPUComputePassEncoder): void;
    /**
     * Records of `bytes` each from byte `offset` of `buffer` (u32 id, f32 logprob, then zeros):
     * the step at position p writes slot p mod `slots`.
     */
    records: { buffer: GPUBuffer; offset: number; bytes: number; slots: number };
  };
  /** Frees the step's buffers (not the cache's). */
  destroy(): void;
}

export interface DecodeStepOptions {
  /**
   * The fused kernels (default true: 5 dispatches a layer, see recordDecodeStep); false records
   * forward()'s unfused kernels instead (16 a layer), for benchmarks and tests.
   */
  fused?: boolean;
  /**
   * Ids the tokens may be chosen among: the first `vocabRows` logits (default all). A checkpoint's
   * lm_head may have padding rows past its tokenizer's last id (Qwen2: 151936 rows, 151665 ids);
   * the step's greedy pick (DecodeStep.greedy) chooses among all rows, so with fewer it is left out.
   */
  vocabRows?: number;
}

/** A layer's projections in the decode layer kernel's order (DECODE_LAYER_MATRICES). */
function layerMatrices(layer: LlamaLayerWeights): GpuMatrix[] {
  return [layer.wq, layer.wk, layer.wv, layer.wo, layer.wGate, layer.wUp, layer.wDown];
}

export class LlamaModel {
  private readonly invFreq: GPUBuffer;
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
  /** The decode layers' matrices in one buffer (see decodeArena): made on first use; null where they cannot share one. */
  private arena: DecodeArena | null | undefined;
  /** @internal The most prefill activation bytes kept between prefills (tests lower it). */
  maxKeptPrefillBytes = MAX_KEPT_PREFILL_BYTES;

  private constructor(
    readonly ctx: GpuContext,
    readonly kernels: Kernels,
    readonly config: LlamaConfig,
    readonly weights: LlamaWeights,
  ) {
    const invFreq = ropeInverseFrequencies(config);
    this.invFreq = ctx.device.createBuffer({
      label: 'rope_inv_freq',
      size: invFreq.byteLength,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
    });
    ctx.device.queue.writeBuffer(this.invFreq, 0, invFreq);
  }

  /** `options.tuning` replaces the kernels' device choices (tests, measurements; see KernelTuning). */
  static async create(ctx: GpuContext, config: LlamaConfig, weights: LlamaWeights, options: { tuning?: Partial<KernelTuning> } = {}): Promise<LlamaModel> {
    return new LlamaModel(ctx, await Kernels.create(ctx, { tuning: options.tuning }), config, weights);
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
      this.recordForward(batch, act, T, startPos, cache);
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
   * A reusable decode step over `cache` (see DecodeStep): its activations, position buffer, uniform
   * parameters and bind groups are made here, once. Steps must be submitted in position order
   * with the tokens the cache has not yet seen; forward() and other steps may share the cache.
   */
  createDecodeStep(cache: KvCache, options: DecodeStepOptions = {}): DecodeStep {
    const device = this.ctx.device;
    const act = new Activations(device, this.config, 1, false, false);
    // Every position once, so that a step's position is a 4-byte copy recorded in the encoder (in
    // order with the dispatches) rather than a queue write: steps can share one command buffer.
    const positions = device.createBuffer({
      label: 'decode_positions',
      size: Math.max(4, cache.capacity * 4),
      usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    device.queue.writeBuffer(positions, 0, Uint32Array.from({ length: cache.capacity }, (_, i) => i));
    const c = this.config;
    const storage = (label: string, floats: number) =>
      device.createBuffer({ label, size: Math.max(4, floats * 4), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    const program = this.kernels.program('decode step');
    // Small models on CPU adapters: a layer in one dispatch, its activations in one state buffer.
    const layered = (options.fused ?? true) && this.decodeLayerState(cache);
    let greedyProgram: KernelProgram | undefined;
    let position: GPUBuffer | undefined;
    let qkv: GPUBuffer | undefined;
    let partials: GPUBuffer | undefined;
    let positionTarget: { buffer: GPUBuffer; offset: number };
    if (layered) {
      this.recordDecodeLayers(program, act, layered.state, cache, false);
      if (this.decodeArena()?.lmHead && (options.vocabRows ?? c.vocabSize) >= c.vocabSize) {
        greedyProgram = this.kernels.program('decode step, greedy');
        this.recordDecodeLayers(greedyProgram, act, layered.state, cache, true);
        greedyProgram.seal();
      }
      positionTarget = { buffer: layered.state, offset: layered.layout.pos * 4 };
    } else {
      position = device.createBuffer({ label: 'decode_position', size: 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
      qkv = storage('qkv', (c.numHeads + 2 * c.numKvHeads) * c.headDim);
      // Long caches split the attention over the sequence (flash-decoding): chunks of chunkKeys rows.
      const chunkKeys = this.kernels.decodeAttentionChunkKeys();
      const chunks = Math.ceil(cache.capacity / chunkKeys);
      partials = chunks > 1 ? storage('attention_partials', c.numHeads * chunks * (c.headDim + 2)) : undefined;
      if (options.fused ?? true) {
        this.recordDecodeStep(program, act, qkv, cache, position, partials && { chunkKeys, partials });
      } else {
        this.recordForward(program, act, 1, 0, cache, position);
      }
      positionTarget = { buffer: position, offset: 0 };
    }
    program.seal();
    const capacity = cache.capacity;
    const setPosition = (encoder: GPUCommandEncoder, pos: number, steps = 1): void => {
      const last = pos + steps - 1;
      if (!Number.isInteger(pos) || !Number.isInteger(steps) || pos < 0 || steps < 1 || last >= capacity) {
        throw new Error(`decode positions ${pos} .. ${last} are outside the KV cache (0 .. ${capacity - 1})`);
      }
      encoder.copyBufferToBuffer(positions, pos * 4, positionTarget.buffer, positionTarget.offset, 4);
    };
    return {
      tokenIn: act.tokenIds,
      logits: act.logits,
      dispatchCount: program.dispatchCount,
      encodeStep(encoder: GPUCommandEncoder, pos: number): void {
        setPosition(encoder, pos);
        program.encode(encoder);
      },
      // decode_layer.wgsl advances the position on the last layer.
      consecutive: layered && program.dispatchesOnly ? { setPosition, encodeInPass: (pass) => program.encodeInPass(pass) } : undefined,
      greedy:
        layered && greedyProgram?.dispatchesOnly
          ? {
              encodeInPass: (pass) => greedyProgram.encodeInPass(pass),
              records: { buffer: layered.state, offset: layered.layout.records * 4, bytes: DECODE_RECORD_BYTES, slots: DECODE_RECORD_SLOTS },
            }
          : undefined,
      destroy(): void {
        program.destroy();
        greedyProgram?.destroy();
        for (const b of [position, positions, qkv, partials, layered ? layered.state : undefined]) b?.destroy();
        act.destroy();
      },
    };
  }

  /** The sizes the decode layer kernel is compiled for. */
  private decodeLayerDims(): DecodeLayerDims {
    const c = this.config;
    return {
      dim: c.hiddenSize,
      qDim: c.numHeads * c.headDim,
      kvDim: c.numKvHeads * c.headDim,
      ffn: c.intermediateSize,
      headDim: c.headDim,
      numLayers: c.numLayers,
    };
  }

  /**
   * For a decode step whose layers each run as one dispatch (Kernels.usesDecodeLayer, for every
   * layer): its state buffer (decodeLayerLayout), with RoPE's frequencies and every layer's norms
   * and biases copied in. Undefined: the step takes the five dispatches a layer.
   */
  private decodeLayerState(cache: KvCache): { state: GPUBuffer; layout: DecodeLayerLayout } | undefined {
    const c = this.config;
    const dims = this.decodeLayerDims();
    if (!this.weights.layers.every((layer) => this.kernels.usesDecodeLayer(dims, layerMatrices(layer)))) return undefined;
    // The norms and biases are copied into the state: weights uploaded without COPY_SRC (made by
    // hand rather than by uploadLlamaWeights) keep the five dispatches.
    const vectors = [this.weights.outputNorm, ...this.weights.layers.flatMap((layer) => [layer.attnNorm, layer.ffnNorm, layer.bq, layer.bk, layer.bv])];
    if (!vectors.every((b) => !b || b.usage & GPUBufferUsage.COPY_SRC)) return undefined;
    if (cache.keys.length !== c.numLayers) throw new Error(`the KV cache has ${cache.keys.length} layers, the model ${c.numLayers}`);
    const layout = decodeLayerLayout(dims);
    const device = this.ctx.device;
    const state = device.createBuffer({
      label: 'decode_state',
      size: layout.floats * 4,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    const encoder = device.createCommandEncoder({ label: 'decode state constants' });
    encoder.copyBufferToBuffer(this.invFreq, 0, state, layout.freq * 4, (c.headDim / 2) * 4);
    encoder.copyBufferToBuffer(this.weights.outputNorm, 0, state, layout.outNorm * 4, dims.dim * 4);
    this.weights.layers.forEach((layer, l) => {
      const base = layout.consts + l * layout.constsStride;
      const copy = (src: GPUBuffer | undefined, at: number, floats: number) => {
        if (src) encoder.copyBufferToBuffer(src, 0, state, (base + at) * 4, floats * 4);
      };
      copy(layer.attnNorm, 0, dims.dim);
      copy(layer.ffnNorm, dims.dim, dims.dim);
      // Missing biases stay zero (a new buffer is zeroed).
      copy(layer.bq, 2 * dims.dim, dims.qDim);
      copy(layer.bk, 2 * dims.dim + dims.qDim, dims.kvDim);
      copy(layer.bv, 2 * dims.dim + dims.qDim + dims.kvDim, dims.kvDim);
    });
    device.queue.submit([encoder.finish()]);
    return { state, layout };
  }

  /**
   * Records one decode step with decode_layer.wgsl (the same math as recordDecodeStep's five
   * dispatches a layer), x in `state` from the embedding to the logits. Where the matrices share one
   * f32 arena (decodeArena), a dispatch runs up to four layers, the first one also the embedding
   * and the last the logits when the arena holds those matrices: stories260K's step is then two
   * dispatches rather than seven (SwiftShader: ~20-40 µs each). Otherwise a dispatch a layer.
   */
  private recordDecodeLayers(rec: KernelRecorder, act: Activations, state: GPUBuffer, cache: KvCache, greedy: boolean): void {
    const c = this.config;
    const w = this.weights;
    const dims = this.decodeLayerDims();
    const attention = { numHeads: c.numHeads, numKvHeads: c.numKvHeads, pairing: c.ropePairing, slidingWindow: c.slidingWindow, kvDType: cache.kvDType };
    const arena = this.decodeArena();
    if (!arena?.embedding) rec.embedding(state, w.tokenEmbedding, act.tokenIds, 1);
    if (arena) {
      const hasBias = w.layers.some((layer) => layer.bq || layer.bk || layer.bv);
      const maxStorage = this.ctx.limits.maxStorageBuffersPerShaderStage;
      for (const [first, count] of decodeLayerGroups(c.numLayers, maxStorage, !!arena.embedding, !!arena.lmHead)) {
        const embedFrom = first === 0 && arena.embedding ? act.tokenIds : undefined;
        const logits = first + count === c.numLayers && arena.lmHead ? act.logits : undefined;
        const greedyTo = greedy && logits ? act.tokenIds : undefined;
        rec.decodeLayers(state, { arena, embedFrom, logits, greedyTo }, first, count, dims, cache, attention, c.rmsNormEps, hasBias);
      }
    } else {
      w.layers.forEach((layer, l) => {
        const hasBias = !!(layer.bq || layer.bk || layer.bv);
        rec.decodeLayers(state, { matrices: layerMatrices(layer) }, l, 1, dims, cache, attention, c.rmsNormEps, hasBias);
      });
    }
    if (!arena?.lmHead) rec.fusedMatvec(act.logits, state, [{ W: w.lmHead }], { norm: { gamma: w.outputNorm, eps: c.rmsNormEps } });
  }

  /**
   * The decode layers' matrices copied into one f32 buffer, for decode_layer.wgsl's dispatches of
   * several layers; with the token embedding and W_lm_head where each is no bigger than a layer
   * (the layer kernel runs on one core: a large vocabulary's logits go faster on their own). Null
   * where a matrix is not f32, is split, cannot be copied (made without COPY_SRC), or the copy
   * would pass MAX_DECODE_ARENA_BYTES: the step then takes a dispatch a layer.
   */
  private decodeArena(): DecodeArena | null {
    if (this.arena !== undefined) return this.arena;
    this.arena = null;
    const w = this.weights;
    const copyable = (m: GpuMatrix) => m.dtype === 'f32' && !m.parts && (m.buffer.usage & GPUBufferUsage.COPY_SRC) !== 0;
    const matrices = w.layers.flatMap(layerMatrices);
    if (!this.kernels.tuning.decodeArena || !matrices.every(copyable)) return null;
    const small = (m: GpuMatrix) => copyable(m) && m.rows * m.cols <= DECODE_LAYER_MAX_WEIGHTS && m.cols === this.config.hiddenSize;
    const extras = [w.tokenEmbedding, w.lmHead].filter(small);
    const offsets = new Map<GpuMatrix, number>();
    let floats = 0;
    for (const m of [...matrices, ...extras]) {
      if (offsets.has(m)) continue; // tied embeddings: one copy
      offsets.set(m, floats);
      floats += Math.ceil((m.rows * m.cols) / 4) * 4;
    }
    if (floats * 4 > MAX_DECODE_ARENA_BYTES) return null;
    const device = this.ctx.device;
    const buffer = device.createBuffer({ label: 'decode_arena', size: floats * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    const encoder = device.createCommandEncoder({ label: 'decode arena' });
    for (const [m, offset] of offsets) encoder.copyBufferToBuffer(m.buffer, 0, buffer, offset * 4, m.rows * m.cols * 4);
    device.queue.submit([encoder.finish()]);
    const at = (m: GpuMatrix) => offsets.get(m)!;
    const extra = (m: GpuMatrix) => (small(m) ? { offset: at(m), rows: m.rows } : undefined);
    this.arena = {
      buffer,
      layers: w.layers.map((layer) => layerMatrices(layer).map(at)),
      embedding: extra(w.tokenEmbedding),
      lmHead: extra(w.lmHead),
    };
    return this.arena;
  }

  /**
   * Records one decode step with the fused kernels, per layer:
   *   qkv = rmsnorm(x)·[Wq; Wk; Wv]ᵀ + [bq; bk; bv]          (one fused_matvec pass)
   *   cache[p] = (rope(k), v); a = attention(rope(q), K, V)  (decode_attention: one pass, or
   *                                                          split over the sequence + combine)
   *   x += a·Woᵀ                                            (fused_matvec, accumulate)
   *   h = silu(rmsnorm(x)·W_gateᵀ) * (rmsnorm(x)·W_upᵀ)     (fused_matvec, swiglu)
   *   x += h·W_downᵀ                                        (fused_matvec, accumulate)
   * then logits = rmsnorm(x)·W_lm_headᵀ in one pass.
   */
  private recordDecodeStep(
    rec: KernelRecorder,
    act: Activations,
    qkv: GPUBuffer,
    cache: KvCache,
    position: GPUBuffer,
    split: { chunkKeys: number; partials: GPUBuffer } | undefined,
  ): void {
    const c = this.config;
    const w = this.weights;
    const eps = c.rmsNormEps;
    rec.embedding(act.x, w.tokenEmbedding, act.tokenIds, 1);
    for (let l = 0; l < c.numLayers; l++) {
      const layer = w.layers[l];
      rec.fusedMatvec(
        qkv,
        act.x,
        [
          { W: layer.wq, bias: layer.bq },
          { W: layer.wk, bias: layer.bk },
          { W: layer.wv, bias: layer.bv },
        ],
        { norm: { gamma: layer.attnNorm, eps } },
      );
      rec.decodeAttention(
        act.attnOut,
        qkv,
        cache.keys[l],
        cache.values[l],
        0,
        c.numHeads,
        c.numKvHeads,
        c.headDim,
        { invFreq: this.invFreq, pairing: c.ropePairing },
        c.slidingWindow,
        cache.kvDType,
        split,
        position,
      );
      rec.fusedMatvec(act.x, act.attnOut, [{ W: layer.wo }], { accumulate: true });
      rec.fusedSwiglu(act.ffnHidden, act.x, layer.wGate, layer.wUp, {
        norm: { gamma: layer.ffnNorm, eps },
        scratch: { gate: act.gate, up: act.up },
      });
      rec.fusedMatvec(act.x, act.ffnHidden, [{ W: layer.wDown }], { accumulate: true });
    }
    rec.fusedMatvec(act.logits, act.x, [{ W: w.lmHead }], { norm: { gamma: w.outputNorm, eps } });
  }

  /** Activations for T tokens: the kept ones (see decodeActivations, prefillActivations), or new ones for all-logits passes. */
  private activationsFor(T: number, allLogits: boolean, maxTokens = T): Activations {
    const device = this.ctx.device;
    if (T === 1 && !allLogits) {
      this.decodeActivations ??= new Activations(device, this.config, 1, false);
      return this.decodeActivations;
    }
    if (allLogits) return new Activations(device, this.config, T, true);
    if (this.prefillActivations && this.prefillActivations.tokens >= T) return this.prefillActivations;
    const tokens = Math.max(T, Math.min(2 ** Math.ceil(Math.log2(T)), maxTokens));
    if (4 * tokens * activationFloatsPerToken(this.config) > this.maxKeptPrefillBytes) {
      return new Activations(device, this.config, T, false, false); // freed by forward() after its submit
    }
    // Legal right after submit: the old buffers are freed once the submitted work is done with them.
    this.prefillActivations?.destroy();
    this.prefillActivations = new Activations(device, this.config, tokens, false, false);
    return this.prefillActivations;
  }

  /**
   * Records the forward pass of the T tokens in act.tokenIds at positions startPos.. (plus the u32
   * in `position`, when given: the reusable decode step) up to act.logits.
   */
  private recordForward(
    rec: KernelRecorder,
    act: Activations,
    T: number,
    startPos: number,
    cache: KvCache,
    position?: GPUBuffer,
  ): void {
    const c = this.config;
    const w = this.weights;
    const d = c.hiddenSize;

    rec.embedding(act.x, w.tokenEmbedding, act.tokenIds, T);

    for (let l = 0; l < c.numLayers; l++) {
      const layer = w.layers[l];

      // Attention block: x += Wo · attention(rope(Wq·xb), rope(Wk·xb), Wv·xb), xb = rmsnorm(x)
      // (the residual adds are folded into the Wo and W_down matmuls)
      rec.rmsNorm(act.xb, act.x, layer.attnNorm, T, d, c.rmsNormEps);
      rec.matmul(act.q, act.xb, layer.wq, T, layer.bq);
      rec.matmulPair(act.k, act.v, act.xb, layer.wk, layer.wv, T, layer.bk, layer.bv);
      rec.rope(act.q, T, c.numHeads, c.headDim, startPos, this.invFreq, c.ropePairing, position);
      rec.rope(act.k, T, c.numKvHeads, c.headDim, startPos, this.invFreq, c.ropePairing, position);
      const kvDim = c.numKvHeads * c.headDim;
      if (cache.kvDType === 'f32' && !position) {
        // The T new positions are contiguous in the cache: one copy each for K and V.
        rec.copy(act.k, 0, cache.keys[l], startPos * cache.rowBytes, T * cache.rowBytes);
        rec.copy(act.v, 0, cache.values[l], startPos * cache.rowBytes, T * cache.rowBytes);
      } else {
        rec.writeKv(cache.keys[l], cache.values[l], act.k, act.v, T, startPos, kvDim, { kvDType: cache.kvDType, position });
      }
      // Mistral-style sliding window: each query sees at most the last c.slidingWindow positions.
      rec.attention(act.attnOut, act.q, cache.keys[l], cache.values[l], T, startPos, c.numHeads, c.numKvHeads, c.headDim, c.slidingWindow, cache.kvDType, position);
      rec.matmul(act.x, act.attnOut, layer.wo, T, undefined, { accumulate: true });

      // Feed-forward block (SwiGLU): x += W_down · (silu(W_gate·xb) * (W_up·xb)), xb = rmsnorm(x)
      rec.rmsNorm(act.xb, act.x, layer.ffnNorm, T, d, c.rmsNormEps);
      rec.matmulSwiglu(act.ffnHidden, act.xb, layer.wGate, layer.wUp, T, { gate: act.gate, up: act.up });
      rec.matmul(act.x, act.ffnHidden, layer.wDown, T, undefined, { accumulate: true });
    }

    rec.rmsNorm(act.xb, act.x, w.outputNorm, T, d, c.rmsNormEps);
    if (act.allLogits || T === 1) {
      rec.matmul(act.logits, act.xb, w.lmHead, T);
    } else {
      // Only the last token's logits are needed to pick the next token.
      rec.copy(act.xb, (T - 1) * d * 4, act.lastXb, 0, d * 4);
      rec.matmul(act.logits, act.lastXb, w.lmHead, 1);
    }
  }

  destroy(): void {
    this.decodeActivations?.destroy();
    this.prefillActivations?.destroy();
    this.arena?.buffer.destroy();
    this.invFreq.destroy();
    this.weights.destroy();
  }
}
