// The Llama forward pass on the GPU, read top to bottom like llama2.c's run.c:
//
//   x = embed(tokens)
//   for each layer:
//     xb = rmsnorm(x) ; q, k, v = xb·Wqᵀ, xb·Wkᵀ, xb·Wvᵀ ; rope(q, k) ; cache k, v
//     x += attention(q, K, V)·Woᵀ
//     xb = rmsnorm(x) ; x += (silu(xb·W_gateᵀ) * xb·W_upᵀ)·W_downᵀ
//   logits = rmsnorm(x)·W_lm_headᵀ
//
// That is the Llama block; a family's description (shape.family, shape.layerShapes: config.ts's
// FamilyDescription) adds to it where it says so: an embedding scale, q/k per-head norms before
// RoPE, per-layer RoPE tables (or none) and windows, an attention scale and soft-cap, norms of
// each block's output before its residual add, GeGLU, a logit soft-cap.
//
// Prefill runs the whole prompt through each layer in one pass (T tokens at once); decode is the
// same code with T = 1. Every dispatch of a step is recorded into one command buffer.
// test/reference/cpu-llama.ts runs the same steps on the CPU: check recordForward against it, and
// the tensor shapes in recordForward's comments against the arrays it computes (sizes: LlamaShape).
//
// The reusable decode step is the same math with fused kernels, in decode-step.ts; on CPU
// adapters small models run it a layer a dispatch, in decode-layers.ts. LlamaModel (llama.ts)
// owns the buffers and runs these passes.
import type { GpuContext } from '../gpu/device.ts';
import type { Kernels, KernelRecorder } from '../gpu/kernels/index.ts';
import type { GatedActivation, LlamaConfig } from './config.ts';
import type { KvCache } from './kv-cache.ts';
import { llamaShape, type LlamaShape } from './shape.ts';
import type { LlamaWeights } from './weights.ts';

/**
 * f32 elements per token of the activation buffers (Activations' [T, ...] ones: token ids, segment
 * starts, x, xb, q, k, v, attention out, gate, up, FFN hidden).
 */
export function activationFloatsPerToken(c: LlamaConfig): number {
  const s = llamaShape(c);
  return 2 + 2 * s.dim + 2 * s.qDim + 2 * s.kvDim + 3 * s.ffn + extraFloatsPerToken(s);
}

/** The activation only some families use: a block's output before its post-norm. */
function extraFloatsPerToken(s: LlamaShape): number {
  const f = s.family;
  return f.postAttentionNorm || f.postFeedForwardNorm ? s.dim : 0;
}

/** The family's optional trailing arguments: none where the value is the default, so Llama-layout calls stay as they were. */
const optional = <T>(value: T | undefined, fallback: T): [] | [T] => (value === undefined || value === fallback ? [] : [value]);

/** Activation buffers of one step, sized for up to `tokens` tokens (T below). */
export class Activations {
  readonly buffers: GPUBuffer[] = [];
  readonly tokenIds: GPUBuffer; // u32 [T]
  /** A packed pass's segment starts (ForwardPass.segments), u32 [T]: kept here so that its bind groups stay the same. */
  readonly segments: GPUBuffer;
  readonly x: GPUBuffer; // the residual stream [T, dim]
  readonly xb: GPUBuffer; // rmsnorm(x) [T, dim]
  readonly q: GPUBuffer; // [T, heads, headDim]
  readonly k: GPUBuffer; // [T, kvHeads, headDim]
  readonly v: GPUBuffer; // [T, kvHeads, headDim]
  readonly attnOut: GPUBuffer; // [T, heads, headDim]
  readonly gate: GPUBuffer; // [T, ffn]
  readonly up: GPUBuffer; // [T, ffn]
  readonly ffnHidden: GPUBuffer; // silu(gate) * up [T, ffn]
  /** A block's output before its post-norm (FamilyDescription.postAttentionNorm / postFeedForwardNorm; 4 bytes otherwise). */
  readonly blockOut: GPUBuffer; // [T, dim]
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
    this.segments = f32('segments', T);
    this.x = f32('x', T * s.dim);
    this.xb = f32('xb', T * s.dim);
    this.q = f32('q', T * s.qDim);
    this.k = f32('k', T * s.kvDim);
    this.v = f32('v', T * s.kvDim);
    this.attnOut = f32('attn_out', T * s.qDim);
    this.gate = f32('gate', T * s.ffn);
    this.up = f32('up', T * s.ffn);
    this.ffnHidden = f32('ffn_hidden', T * s.ffn);
    const f = s.family;
    this.blockOut = f32('block_out', f.postAttentionNorm || f.postFeedForwardNorm ? T * s.dim : 1);
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
  /** f32 [rotaryDims / 2]: the first layer's RoPE inverse frequencies (ropeInverseFrequencies); invFreqs[0]. */
  readonly invFreq: GPUBuffer;
  /** Each distinct RoPE table of the layers (LayerShape.ropeTable indexes it). */
  readonly invFreqs: readonly GPUBuffer[];
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
  /** Stop after the final norm (act.xb holds the T hidden states): no LM head (embeddings). */
  readonly hiddenOnly?: boolean;
  /**
   * A packed pass (startPos 0, a cache without rings, no `position`): u32 [T], each token's
   * input's first row (TokenSpan.segments). Each input's tokens take positions from 0 and attend
   * only to its own rows; the K/V rows are the tokens' rows as in any pass.
   */
  readonly segments?: GPUBuffer;
}

/**
 * The cache rows of positions start .. start + T - 1 as runs of consecutive rows: one run, or in a
 * ring of `ringRows` rows (T <= ringRows) two where the positions wrap. `from`: the run's first
 * token (of the T).
 */
export function cacheRuns(start: number, T: number, ringRows?: number): { from: number; row: number; count: number }[] {
  if (ringRows === undefined) return [{ from: 0, row: start, count: T }];
  const row = start % ringRows;
  const first = Math.min(T, ringRows - row);
  return first === T ? [{ from: 0, row, count: T }] : [{ from: 0, row, count: first }, { from: first, row: 0, count: T - first }];
}

/** Records the forward pass of the tokens in act.tokenIds, at their positions, up to act.logits (or act.xb: ForwardPass.hiddenOnly). */
export function recordForward(rec: KernelRecorder, model: LlamaParts, act: Activations, pass: ForwardPass): void {
  const { shape: s, weights: w, invFreqs } = model;
  const family = s.family;
  const { T, startPos, cache, position, segments } = pass;
  const tokens = { T, startPos, position, segments };
  if (segments && (position || startPos !== 0 || cache.rings.some((r) => r))) {
    throw new Error('a packed pass starts at row 0, with no position buffer, over a cache without rings');
  }

  rec.embedding(act.x, w.tokenEmbedding, act.tokenIds, T, ...optional(family.embeddingScale, 1)); // x: [T, dim]

  for (let l = 0; l < s.layers; l++) {
    const layer = w.layers[l];
    const { attention: a, rope, ropeTable } = s.layerShapes[l];
    const keys = cache.keys[l]; // [capacity, kvHeads, headDim], or a window layer's ring [rows, kvHeads, headDim]
    const values = cache.values[l];
    const ring = cache.rings[l];

    // Attention block: x += attention(rope(xb·Wqᵀ), rope(xb·Wkᵀ), xb·Wvᵀ)·Woᵀ with xb = rmsnorm(x)
    // (the residual add is folded into the Wo matmul).
    rec.rmsNorm(act.xb, act.x, layer.attnNorm, T, s.dim, s.eps); // xb: [T, dim]
    rec.matmul(act.q, act.xb, layer.wq, T, layer.bq); // q: [T, heads, headDim]
    rec.matmulPair({ y: act.k, W: layer.wk, bias: layer.bk }, { y: act.v, W: layer.wv, bias: layer.bv }, act.xb, T); // k, v: [T, kvHeads, headDim]
    const q = act.q;
    const k = act.k;
    if (layer.qNorm && layer.kNorm) {
      // Per-head RMSNorm of q and k (Qwen3, Gemma 3), in place: rows of headDim.
      rec.rmsNorm(q, q, layer.qNorm, T * a.heads, a.headDim, s.eps);
      rec.rmsNorm(k, k, layer.kNorm, T * a.kvHeads, a.headDim, s.eps);
    }
    if (rope) {
      const rotation = { pairing: a.pairing, rotaryDims: a.rotaryDims, magnitude: a.magnitude };
      rec.rope(q, invFreqs[ropeTable], tokens, { heads: a.heads, headDim: a.headDim, ...rotation }); // q's heads: a.heads
      rec.rope(k, invFreqs[ropeTable], tokens, { heads: a.kvHeads, headDim: a.headDim, ...rotation });
    }
    // keys, values rows startPos .. startPos + T - 1 (in a ring: those mod its rows) = k, v
    if (cache.kvDType === 'f32' && !position) {
      // The T new positions are contiguous in the cache (a ring's: at most two runs): a copy each for K and V.
      for (const run of cacheRuns(startPos, T, ring?.rows)) {
        rec.copy(k, run.from * cache.rowBytes, keys, run.row * cache.rowBytes, run.count * cache.rowBytes);
        rec.copy(act.v, run.from * cache.rowBytes, values, run.row * cache.rowBytes, run.count * cache.rowBytes);
      }
    } else {
      rec.writeKv({ keys, values, k, v: act.v }, tokens, s.kvDim, cache.kvDType, ...(ring ? [ring] : []));
    }
    // attnOut: [T, heads, headDim]; each query sees the rows up to its position (the last slidingWindow of them, when set).
    rec.attention({ out: act.attnOut, q, keys, values }, tokens, ring ? { ...a, ring } : a, cache.kvDType);
    if (layer.postAttnNorm) {
      // Gemma: x += rmsnorm(attention·Woᵀ).
      rec.matmul(act.blockOut, act.attnOut, layer.wo, T); // blockOut: [T, dim]
      rec.rmsNorm(act.blockOut, act.blockOut, layer.postAttnNorm, T, s.dim, s.eps);
      rec.add(act.x, act.x, act.blockOut, T * s.dim);
    } else {
      rec.matmul(act.x, act.attnOut, layer.wo, T, undefined, { accumulate: true }); // x: [T, dim]
    }

    // Feed-forward block (SwiGLU, or GeGLU): x += (act(xb·W_gateᵀ) * xb·W_upᵀ)·W_downᵀ with xb = rmsnorm(x)
    // (the residual add is folded into the W_down matmul).
    rec.rmsNorm(act.xb, act.x, layer.ffnNorm, T, s.dim, s.eps); // xb: [T, dim]
    rec.matmulSwiglu(act.ffnHidden, act.xb, layer.wGate, layer.wUp, T, { gate: act.gate, up: act.up }, ...optional<GatedActivation>(family.activation, 'silu')); // ffnHidden: [T, ffn]
    if (layer.postFfnNorm) {
      rec.matmul(act.blockOut, act.ffnHidden, layer.wDown, T); // blockOut: [T, dim]
      rec.rmsNorm(act.blockOut, act.blockOut, layer.postFfnNorm, T, s.dim, s.eps);
      rec.add(act.x, act.x, act.blockOut, T * s.dim);
    } else {
      rec.matmul(act.x, act.ffnHidden, layer.wDown, T, undefined, { accumulate: true }); // x: [T, dim]
    }
  }

  rec.rmsNorm(act.xb, act.x, w.outputNorm, T, s.dim, s.eps); // xb: [T, dim]
  if (pass.hiddenOnly) return;
  // One row of logits takes the matrix-vector kernel even in a prefill pass: the last token's
  // logits are computed so however the prompt was split.
  const rows = act.allLogits || T === 1 ? T : 1;
  if (act.allLogits || T === 1) {
    rec.matmul(act.logits, act.xb, w.lmHead, T, undefined, { vector: true }); // logits: [T, vocab]
  } else {
    // Only the last token's logits are needed to pick the next token.
    rec.copy(act.xb, (T - 1) * s.dim * 4, act.lastXb, 0, s.dim * 4); // lastXb: [dim]
    rec.matmul(act.logits, act.lastXb, w.lmHead, 1, undefined, { vector: true }); // logits: [1, vocab]
  }
  if (family.finalLogitSoftcap !== undefined) rec.softcap(act.logits, rows * s.vocab, family.finalLogitSoftcap); // Gemma 2
}
