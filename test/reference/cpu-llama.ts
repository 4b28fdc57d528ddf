// The forward pass of any family the runtime describes, on the CPU in float64, with the same names
// as src/model/forward.ts. It reads the same description (familyOf, modelLayers) the GPU passes
// read, but none of their code: it is the truth the GPU paths are held to on random-weight models.
// Weights are the file's (norm weights without the family's offset folded in: it applies
// x·(offset + w) itself); K and V are rounded to f16 as cached when the GPU cache is f16.
import { familyOf, modelLayers, ropeMagnitude, type LlamaConfig } from '../../src/model/config.ts';
import { layerInverseFrequencies, ropeContextLength } from '../../src/model/rope-frequencies.ts';
import { f16BitsToF32, f32ToF16Bits } from './cpu-ops.ts';

export interface CpuLayerWeights {
  attnNorm: Float32Array;
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  bq?: Float32Array;
  bk?: Float32Array;
  bv?: Float32Array;
  /** [headDim] each: FamilyDescription.qkNorm. */
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  /** FamilyDescription.postAttentionNorm. */
  postAttnNorm?: Float32Array;
  ffnNorm: Float32Array;
  /** FamilyDescription.postFeedForwardNorm. */
  postFfnNorm?: Float32Array;
  wGate: Float32Array;
  wUp: Float32Array;
  wDown: Float32Array;
}

export interface CpuLlamaWeights {
  tokenEmbedding: Float32Array; // [vocab, d]
  layers: CpuLayerWeights[];
  outputNorm: Float32Array;
  lmHead: Float32Array; // [vocab, d] (the embedding itself when tied)
}

type Vec = Float64Array;

/** y[t, r] = Σ_c x[t, c]·W[r, c] (+ bias[r]). */
function matmul(x: Vec, W: Float32Array, T: number, rows: number, cols: number, bias?: Float32Array): Vec {
  const y = new Float64Array(T * rows);
  for (let t = 0; t < T; t++) {
    for (let r = 0; r < rows; r++) {
      let sum = bias ? bias[r] : 0;
      const wOff = r * cols;
      const xOff = t * cols;
      for (let c = 0; c < cols; c++) sum += x[xOff + c] * W[wOff + c];
      y[t * rows + r] = sum;
    }
  }
  return y;
}

/** Each row of `dim` values: x / sqrt(mean(x²) + eps) · (offset + gamma). */
function rmsNorm(x: Vec, gamma: Float32Array, rows: number, dim: number, eps: number, offset: number): Vec {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[r * dim + i] ** 2;
    const inv = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i] * inv * (offset + gamma[i]);
  }
  return y;
}

/** RoPE in place over the first rotaryDims of each head, cos and sin times `magnitude`. */
function rope(x: Vec, T: number, heads: number, headDim: number, startPos: number, invFreq: Float32Array, rotaryDims: number, magnitude: number, pairing: 'halves' | 'adjacent'): void {
  const half = rotaryDims / 2;
  for (let t = 0; t < T; t++) {
    const pos = startPos + t;
    for (let h = 0; h < heads; h++) {
      const base = (t * heads + h) * headDim;
      for (let i = 0; i < half; i++) {
        const angle = pos * invFreq[i];
        const cos = Math.cos(angle) * magnitude;
        const sin = Math.sin(angle) * magnitude;
        const [a, b] = pairing === 'halves' ? [base + i, base + i + half] : [base + 2 * i, base + 2 * i + 1];
        const x0 = x[a];
        const x1 = x[b];
        x[a] = x0 * cos - x1 * sin;
        x[b] = x0 * sin + x1 * cos;
      }
    }
  }
}

const gelu = (g: number) => 0.5 * g * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (g + 0.044715 * g ** 3)));
const silu = (g: number) => g / (1 + Math.exp(-g));
const roundHalf = (v: number) => f16BitsToF32(f32ToF16Bits(v));

export class CpuLlama {
  private readonly kCache: Vec[];
  private readonly vCache: Vec[];

  constructor(
    readonly config: LlamaConfig,
    readonly weights: CpuLlamaWeights,
    readonly capacity: number,
    /** The GPU cache's element type: 'f16' (LlamaModel.createKvCache's default) rounds K and V as cached. */
    readonly kvDType: 'f16' | 'f32' = 'f16',
  ) {
    const rowElems = config.numKvHeads * config.headDim;
    this.kCache = Array.from({ length: config.numLayers }, () => new Float64Array(capacity * rowElems));
    this.vCache = Array.from({ length: config.numLayers }, () => new Float64Array(capacity * rowElems));
  }

  /** Logits of every input token, [T, vocab]. */
  forward(tokens: number[], startPos: number): Float32Array {
    const c = this.config;
    const f = familyOf(c);
    const xn = this.hiddenStates(tokens, startPos);
    const logits = matmul(xn, this.weights.lmHead, tokens.length, c.vocabSize, c.hiddenSize);
    if (f.finalLogitSoftcap !== undefined) for (let i = 0; i < logits.length; i++) logits[i] = f.finalLogitSoftcap * Math.tanh(logits[i] / f.finalLogitSoftcap);
    return Float32Array.from(logits);
  }

  /** The final norm's output of every input token, [T, hiddenSize] in float64: what the LM head reads (embeddings pool it). */
  hiddenStates(tokens: readonly number[], startPos: number): Float64Array {
    const c = this.config;
    const f = familyOf(c);
    const w = this.weights;
    const T = tokens.length;
    const d = c.hiddenSize;
    const { numHeads: H, numKvHeads: KV, headDim: hd } = c;
    const qDim = H * hd;
    const kvDim = KV * hd;
    const ffn = c.intermediateSize;
    const eps = c.rmsNormEps;
    const off = f.normWeightOffset;
    const scale = f.attentionScale ?? 1 / Math.sqrt(hd);
    const layers = modelLayers(c);

    const x = new Float64Array(T * d);
    for (let t = 0; t < T; t++) {
      for (let i = 0; i < d; i++) x[t * d + i] = w.tokenEmbedding[tokens[t] * d + i] * (f.embeddingScale ?? 1);
    }
    for (let l = 0; l < c.numLayers; l++) {
      const layer = w.layers[l];
      const desc = layers[l];
      const xb = rmsNorm(x, layer.attnNorm, T, d, eps, off);
      let q = matmul(xb, layer.wq, T, qDim, d, layer.bq);
      let k = matmul(xb, layer.wk, T, kvDim, d, layer.bk);
      const v = matmul(xb, layer.wv, T, kvDim, d, layer.bv);
      if (f.qkNorm) {
        q = rmsNorm(q, layer.qNorm!, T * H, hd, eps, off);
        k = rmsNorm(k, layer.kNorm!, T * KV, hd, eps, off);
      }
      if (desc.rope) {
        const invFreq = layerInverseFrequencies(desc.rope, ropeContextLength(c));
        const magnitude = ropeMagnitude(desc.rope);
        rope(q, T, H, hd, startPos, invFreq, desc.rope.rotaryDims, magnitude, c.ropePairing);
        rope(k, T, KV, hd, startPos, invFreq, desc.rope.rotaryDims, magnitude, c.ropePairing);
      }
      const kc = this.kCache[l];
      const vc = this.vCache[l];
      for (let i = 0; i < T * kvDim; i++) {
        kc[startPos * kvDim + i] = this.kvDType === 'f16' ? roundHalf(k[i]) : Math.fround(k[i]);
        vc[startPos * kvDim + i] = this.kvDType === 'f16' ? roundHalf(v[i]) : Math.fround(v[i]);
      }
      // Attention: query t at position p sees keys max(0, p - window + 1) .. p.
      const att = new Float64Array(T * qDim);
      const group = H / KV;
      for (let t = 0; t < T; t++) {
        const p = startPos + t;
        const first = desc.slidingWindow !== undefined ? Math.max(0, p - desc.slidingWindow + 1) : 0;
        for (let h = 0; h < H; h++) {
          const kvh = Math.floor(h / group);
          const scores = new Float64Array(p - first + 1);
          let max = -Infinity;
          for (let j = first; j <= p; j++) {
            let s = 0;
            for (let i = 0; i < hd; i++) s += q[(t * H + h) * hd + i] * kc[j * kvDim + kvh * hd + i];
            s *= scale;
            if (f.attentionSoftcap !== undefined) s = f.attentionSoftcap * Math.tanh(s / f.attentionSoftcap);
            scores[j - first] = s;
            if (s > max) max = s;
          }
          let sum = 0;
          for (let j = 0; j < scores.length; j++) sum += scores[j] = Math.exp(scores[j] - max);
          for (let j = first; j <= p; j++) {
            const a = scores[j - first] / sum;
            for (let i = 0; i < hd; i++) att[(t * H + h) * hd + i] += a * vc[j * kvDim + kvh * hd + i];
          }
        }
      }
      let attnOut = matmul(att, layer.wo, T, d, qDim);
      if (f.postAttentionNorm) attnOut = rmsNorm(attnOut, layer.postAttnNorm!, T, d, eps, off);
      for (let i = 0; i < x.length; i++) x[i] += attnOut[i];

      const xf = rmsNorm(x, layer.ffnNorm, T, d, eps, off);
      const gate = matmul(xf, layer.wGate, T, ffn, d);
      const up = matmul(xf, layer.wUp, T, ffn, d);
      const act = f.activation === 'gelu_tanh' ? gelu : silu;
      for (let i = 0; i < gate.length; i++) gate[i] = act(gate[i]) * up[i];
      let ffnOut = matmul(gate, layer.wDown, T, d, ffn);
      if (f.postFeedForwardNorm) ffnOut = rmsNorm(ffnOut, layer.postFfnNorm!, T, d, eps, off);
      for (let i = 0; i < x.length; i++) x[i] += ffnOut[i];
    }
    return rmsNorm(x, w.outputNorm, T, d, eps, off);
  }
}
