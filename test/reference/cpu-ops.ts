// Plain CPU implementations of every kernel: the truth the GPU kernels are tested against, and the
// building blocks of the CPU reference forward pass. Written for obviousness, not speed: loops in
// the order of the formulas, sums in float64 (JS numbers), results rounded to f32 at the end.

/** out[t, c] = table[tokens[t], c] for a row-major table with `cols` columns. */
export function embeddingRef(table: Float32Array, cols: number, tokens: number[]): Float32Array {
  const out = new Float32Array(tokens.length * cols);
  tokens.forEach((token, t) => {
    for (let c = 0; c < cols; c++) out[t * cols + c] = table[token * cols + c];
  });
  return out;
}

/** out[t, i] = x[t, i] / sqrt(mean_j x[t, j]^2 + eps) * gamma[i]. */
export function rmsNormRef(x: Float32Array, gamma: Float32Array, T: number, dim: number, eps: number): Float32Array {
  const out = new Float32Array(T * dim);
  for (let t = 0; t < T; t++) {
    let sumSq = 0;
    for (let i = 0; i < dim; i++) sumSq += x[t * dim + i] * x[t * dim + i];
    const invRms = 1 / Math.sqrt(sumSq / dim + eps);
    for (let i = 0; i < dim; i++) out[t * dim + i] = x[t * dim + i] * invRms * gamma[i];
  }
  return out;
}

/** y[t, r] = sum_k x[t, k] * W[r, k] (+ bias[r]); W row-major [rows, cols]. */
export function matmulRef(
  x: Float32Array,
  W: Float32Array,
  T: number,
  rows: number,
  cols: number,
  bias?: Float32Array,
): Float32Array {
  const y = new Float32Array(T * rows);
  for (let t = 0; t < T; t++) {
    for (let r = 0; r < rows; r++) {
      let sum = bias ? bias[r] : 0;
      for (let k = 0; k < cols; k++) sum += x[t * cols + k] * W[r * cols + k];
      y[t * rows + r] = sum;
    }
  }
  return y;
}

/** invFreq[i] = theta^(-2i / headDim) for i < headDim / 2. */
export function ropeInvFreq(headDim: number, theta: number): Float32Array {
  const invFreq = new Float32Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) invFreq[i] = Math.pow(theta, (-2 * i) / headDim);
  return invFreq;
}

/**
 * Rotary embedding of x [T, numHeads, headDim], returned as a rotated copy. Token t is at
 * position startPos + t; pair i turns by angle (startPos + t) * invFreq[i]. Only the first
 * rotaryDims elements of a head rotate (default all; the rest are copied), as Hugging Face's
 * apply_rotary_pos_emb with partial_rotary_factor (rotate_half on x[..., :rotaryDims]) and
 * llama.cpp's rope with n_dims < head_dim do: 'adjacent' pairs (x[2i], x[2i+1]) (llama.cpp's
 * 'normal' mode), 'halves' pairs (x[i], x[i + rotaryDims/2]) (HF's rotate_half), for
 * i < rotaryDims / 2. cos and sin are multiplied by magnitude (HF's attention_scaling, LongRoPE).
 */
export function ropeRef(
  x: Float32Array,
  T: number,
  numHeads: number,
  headDim: number,
  startPos: number,
  invFreq: Float32Array,
  pairing: 'adjacent' | 'halves',
  { rotaryDims = headDim, magnitude = 1 }: { rotaryDims?: number; magnitude?: number } = {},
): Float32Array {
  const out = Float32Array.from(x);
  const half = rotaryDims / 2;
  for (let t = 0; t < T; t++) {
    const pos = startPos + t;
    for (let h = 0; h < numHeads; h++) {
      const base = (t * numHeads + h) * headDim;
      for (let i = 0; i < half; i++) {
        const ia = pairing === 'adjacent' ? base + 2 * i : base + i;
        const ib = pairing === 'adjacent' ? base + 2 * i + 1 : base + i + half;
        // The angle rounded to f32, as Hugging Face, llama.cpp and the GPU kernel compute it; at
        // long positions that rounding is the largest difference between implementations.
        const angle = Math.fround(pos * invFreq[i]);
        const cos = Math.cos(angle) * magnitude;
        const sin = Math.sin(angle) * magnitude;
        const a = x[ia];
        const b = x[ib];
        out[ia] = a * cos - b * sin;
        out[ib] = a * sin + b * cos;
      }
    }
  }
  return out;
}

/**
 * Causal grouped-query attention. q and the result are [T, numHeads, headDim]; the caches are
 * [contextRows, numKvHeads, headDim]. Query t (position p = startPos + t) attends to cache rows
 * 0 ..= p, or with a slidingWindow W to the rows in (p - W, p]; query head h reads KV head
 * floor(h / (numHeads / numKvHeads)). A score is q·k · scale (default 1 / sqrt(headDim)), then
 * with a softcap c, c · tanh(score / c) (Gemma 2), before the softmax.
 */
export function attentionRef(
  q: Float32Array,
  kCache: Float32Array,
  vCache: Float32Array,
  T: number,
  startPos: number,
  numHeads: number,
  numKvHeads: number,
  headDim: number,
  slidingWindow?: number,
  scores: { scale?: number; softcap?: number } = {},
): Float32Array {
  const out = new Float32Array(T * numHeads * headDim);
  const groupSize = numHeads / numKvHeads;
  const scale = scores.scale ?? 1 / Math.sqrt(headDim);
  const cap = (s: number) => (scores.softcap === undefined ? s : scores.softcap * Math.tanh(s / scores.softcap));
  for (let t = 0; t < T; t++) {
    const pos = startPos + t;
    const first = slidingWindow === undefined ? 0 : Math.max(0, pos - slidingWindow + 1);
    const nKeys = pos + 1 - first; // keys first ..= pos
    for (let h = 0; h < numHeads; h++) {
      const kvHead = Math.floor(h / groupSize);
      const qBase = (t * numHeads + h) * headDim;
      const kvBase = (j: number) => ((first + j) * numKvHeads + kvHead) * headDim;

      const weights = new Float64Array(nKeys);
      for (let j = 0; j < nKeys; j++) {
        let dot = 0;
        for (let d = 0; d < headDim; d++) dot += q[qBase + d] * kCache[kvBase(j) + d];
        weights[j] = cap(dot * scale);
      }
      const max = Math.max(...weights);
      let sum = 0;
      for (let j = 0; j < nKeys; j++) {
        weights[j] = Math.exp(weights[j] - max);
        sum += weights[j];
      }
      for (let d = 0; d < headDim; d++) {
        let acc = 0;
        for (let j = 0; j < nKeys; j++) acc += weights[j] * vCache[kvBase(j) + d];
        out[qBase + d] = acc / sum;
      }
    }
  }
  return out;
}

/** silu(gate) * up, silu(g) = g / (1 + e^-g). */
export function swigluRef(gate: Float32Array, up: Float32Array): Float32Array {
  const out = new Float32Array(gate.length);
  for (let i = 0; i < gate.length; i++) out[i] = (gate[i] / (1 + Math.exp(-gate[i]))) * up[i];
  return out;
}

/** torch's gelu(x, approximate='tanh') (HF gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))). */
export function geluTanhRef(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
}

/** act(gate) * up: silu (SwiGLU, swigluRef) or gelu_tanh (GeGLU, Gemma). */
export function gatedRef(gate: Float32Array, up: Float32Array, activation: 'silu' | 'gelu_tanh'): Float32Array {
  if (activation === 'silu') return swigluRef(gate, up);
  return gate.map((g, i) => geluTanhRef(g) * up[i]);
}

/** cap · tanh(x / cap) elementwise (Gemma 2's soft-capping). */
export function softcapRef(x: Float32Array, cap: number): Float32Array {
  return x.map((v) => cap * Math.tanh(v / cap));
}

/** a + b elementwise. */
export function addRef(a: Float32Array, b: Float32Array): Float32Array {
  const out = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i] + b[i];
  return out;
}

// ---- 16-bit floats -------------------------------------------------------------------------

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** IEEE binary16 bits of x (ties to even; overflow gives ±inf): the loader's own conversion. */
export { f32ToF16Bits } from '../../src/model/quantize.ts';
import { f32ToF16Bits } from '../../src/model/quantize.ts';

/** The value of IEEE binary16 bits h. */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** xs rounded to f16 (nearest even) and back, as an f16 KV cache stores them (Kernels.writeKv). */
export function roundF16(xs: Float32Array): Float32Array {
  return xs.map((x) => f16BitsToF32(f32ToF16Bits(x)));
}

/** bfloat16 bits of x: the top 16 bits of its f32, rounded to nearest, ties to even. */
export function f32ToBf16Bits(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0];
  if (Number.isNaN(f32Scratch[0])) return 0x7fc0;
  const lowerHalf = bits & 0xffff;
  let upper = bits >>> 16;
  if (lowerHalf > 0x8000 || (lowerHalf === 0x8000 && upper & 1)) upper += 1; // may carry into the exponent: correct
  return upper & 0xffff;
}

/** The value of bfloat16 bits b. */
export function bf16BitsToF32(b: number): number {
  u32Scratch[0] = (b & 0xffff) << 16;
  return f32Scratch[0];
}

/** Packs 16-bit patterns two per u32, element 2i in the low half of word i; an odd count pads with 0. */
export function packHalves(bits: Uint16Array): Uint32Array {
  const words = new Uint32Array(Math.ceil(bits.length / 2));
  for (let i = 0; i < bits.length; i++) words[i >> 1] |= bits[i] << (16 * (i & 1));
  return words;
}
