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
import { Kernels } from '../gpu/kernels.ts';
import type { LlamaConfig } from './config.ts';
import { KvCache, type KvDType } from './kv-cache.ts';
import type { LlamaWeights } from './weights.ts';

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

/** Activation buffers of one step, sized for up to `tokens` tokens. */
class Activations {
  readonly buffers: GPUBuffer[] = [];
  readonly tokenIds: GPUBuffer;
  readonly x: GPUBuffer; // residual stream [T, d]
  readonly xb: GPUBuffer; // normalized x [T, d]
  readonly xb2: GPUBuffer; // a projection back to d [T, d]
  readonly q: GPUBuffer; // [T, n_heads, head_dim]
  readonly k: GPUBuffer; // [T, n_kv_heads, head_dim]
  readonly v: GPUBuffer;
  readonly attnOut: GPUBuffer; // [T, n_heads, head_dim]
  readonly gate: GPUBuffer; // [T, ffn]
  readonly up: GPUBuffer;
  readonly ffnHidden: GPUBuffer; // silu(gate) * up
  readonly lastXb: GPUBuffer; // the last token's normalized x [d]
  readonly logits: GPUBuffer; // [T or 1, vocab]
  readonly logitsReadback: GPUBuffer;

  constructor(device: GPUDevice, c: LlamaConfig, readonly tokens: number, readonly allLogits: boolean) {
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
    this.xb2 = f32('xb2', T * c.hiddenSize);
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
    this.logitsReadback = device.createBuffer({
      label: 'logits_readback',
      size: logitRows * c.vocabSize * 4,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    this.buffers.push(this.logitsReadback);
  }

  destroy(): void {
    for (const b of this.buffers) b.destroy();
  }
}

export interface ForwardOptions {
  /** Return logits for every input token ([T, vocab]) instead of the last one only. */
  allLogits?: boolean;
}

export class LlamaModel {
  private readonly invFreq: GPUBuffer;
  /** Decode-step activations are kept between steps; prefill ones are made per call. */
  private decodeActivations: Activations | undefined;

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
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
    });
    ctx.device.queue.writeBuffer(this.invFreq, 0, invFreq);
  }

  static async create(ctx: GpuContext, config: LlamaConfig, weights: LlamaWeights): Promise<LlamaModel> {
    return new LlamaModel(ctx, await Kernels.create(ctx), config, weights);
  }

  createKvCache(capacity: number, kvDType: KvDType = 'f16'): KvCache {
    return new KvCache(this.ctx.device, this.config, capacity, kvDType);
  }

  /**
   * Runs `tokens` at positions startPos.. through the model, appending their K/V to `cache`.
   * Returns the logits of the last token ([vocab]) or, with `allLogits`, of every token ([T, vocab]).
   */
  async forward(tokens: readonly number[], startPos: number, cache: KvCache, options: ForwardOptions = {}): Promise<Float32Array> {
    const T = tokens.length;
    if (T === 0) throw new Error('forward() needs at least one token');
    if (startPos + T > cache.capacity) {
      throw new Error(`sequence of ${startPos + T} positions exceeds the KV cache (${cache.capacity})`);
    }
    const allLogits = options.allLogits ?? false;
    const act = this.activationsFor(T, allLogits);
    try {
      this.encodeForward(act, tokens, startPos, cache);
      await act.logitsReadback.mapAsync(GPUMapMode.READ);
      const logits = new Float32Array(act.logitsReadback.getMappedRange().slice(0));
      act.logitsReadback.unmap();
      return logits;
    } finally {
      if (act !== this.decodeActivations) act.destroy();
    }
  }

  private activationsFor(T: number, allLogits: boolean): Activations {
    if (T === 1 && !allLogits) {
      this.decodeActivations ??= new Activations(this.ctx.device, this.config, 1, false);
      return this.decodeActivations;
    }
    return new Activations(this.ctx.device, this.config, T, allLogits);
  }

  private encodeForward(act: Activations, tokens: readonly number[], startPos: number, cache: KvCache): void {
    const c = this.config;
    const w = this.weights;
    const T = tokens.length;
    const d = c.hiddenSize;
    const device = this.ctx.device;
    device.queue.writeBuffer(act.tokenIds, 0, new Uint32Array(tokens));

    const batch = this.kernels.begin();
    batch.embedding(act.x, w.tokenEmbedding, act.tokenIds, T);

    for (let l = 0; l < c.numLayers; l++) {
      const layer = w.layers[l];

      // Attention block: x += Wo · attention(rope(Wq·xb), rope(Wk·xb), Wv·xb), xb = rmsnorm(x)
      batch.rmsNorm(act.xb, act.x, layer.attnNorm, T, d, c.rmsNormEps);
      batch.matmul(act.q, act.xb, layer.wq, T, layer.bq);
      batch.matmul(act.k, act.xb, layer.wk, T, layer.bk);
      batch.matmul(act.v, act.xb, layer.wv, T, layer.bv);
      batch.rope(act.q, T, c.numHeads, c.headDim, startPos, this.invFreq, c.ropePairing);
      batch.rope(act.k, T, c.numKvHeads, c.headDim, startPos, this.invFreq, c.ropePairing);
      // The T new positions are contiguous in the cache: one copy each for K and V.
      if (cache.kvDType === 'f16') {
        batch.writeKv(cache.keys[l], cache.values[l], act.k, act.v, T, startPos, c.numKvHeads * c.headDim);
      } else {
        batch.copy(act.k, 0, cache.keys[l], startPos * cache.rowBytes, T * cache.rowBytes);
        batch.copy(act.v, 0, cache.values[l], startPos * cache.rowBytes, T * cache.rowBytes);
      }
      // Mistral-style sliding window: each query sees at most the last c.slidingWindow positions.
      batch.attention(act.attnOut, act.q, cache.keys[l], cache.values[l], T, startPos, c.numHeads, c.numKvHeads, c.headDim, c.slidingWindow, cache.kvDType);
      batch.matmul(act.xb2, act.attnOut, layer.wo, T);
      batch.add(act.x, act.x, act.xb2, T * d);

      // Feed-forward block (SwiGLU): x += W_down · (silu(W_gate·xb) * (W_up·xb)), xb = rmsnorm(x)
      batch.rmsNorm(act.xb, act.x, layer.ffnNorm, T, d, c.rmsNormEps);
      batch.matmul(act.gate, act.xb, layer.wGate, T);
      batch.matmul(act.up, act.xb, layer.wUp, T);
      batch.swiglu(act.ffnHidden, act.gate, act.up, T * c.intermediateSize);
      batch.matmul(act.xb2, act.ffnHidden, layer.wDown, T);
      batch.add(act.x, act.x, act.xb2, T * d);
    }

    batch.rmsNorm(act.xb, act.x, w.outputNorm, T, d, c.rmsNormEps);
    if (act.allLogits) {
      batch.matmul(act.logits, act.xb, w.lmHead, T);
    } else {
      // Only the last token's logits are needed to pick the next token.
      batch.copy(act.xb, (T - 1) * d * 4, act.lastXb, 0, d * 4);
      batch.matmul(act.logits, act.lastXb, w.lmHead, 1);
    }
    batch.copy(act.logits, 0, act.logitsReadback, 0, act.logitsReadback.size);
    batch.submit();
  }

  destroy(): void {
    this.decodeActivations?.destroy();
    this.invFreq.destroy();
    this.weights.destroy();
  }
}
