// The project's quantizers: f32 to IEEE binary16 (round to nearest, ties to even), and a block
// quantizer for each of ggml's quantized weight formats (layouts in src/gpu/weight-layout.ts).
// The loader uses f16, Q8_0 and Q4_0 on Hugging Face weights while streaming them to the GPU; the
// GGUF converter (scripts/gguf-from-hf.ts) and the tests use all of them. The CPU dequantizer they
// are checked against lives apart, in test/reference/quant.ts.
//
// The quantizers aim at valid, reasonably accurate blocks, not at ggml's error-minimising search:
// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow ggml's reference quantize_row_*_ref; the K-quants use a
// plain min/max scale per sub-block with the 6/8-bit scales rounded to the nearest step. Where a
// block's scale is stored as f16, the quants are computed from the stored (rounded) scale.
import type { QuantDType } from '../gpu/tensor.ts';
import { QUANT_FORMATS } from '../gpu/weight-layout.ts';

const f32Scratch = new Float32Array(1);
const i32Scratch = new Int32Array(f32Scratch.buffer); // signed: stays a small integer in V8

/** Largest finite f16. */
export const F16_MAX = 65504;

/** IEEE binary16 bits of x (first rounded to f32, then to f16 with ties to even; overflow gives ±inf, NaN 0x7e00). */
export function f32ToF16Bits(x: number): number {
  f32Scratch[0] = x;
  return f16BitsOfF32Bits(i32Scratch[0]);
}

/** f32ToF16Bits on the f32's bit pattern. */
function f16BitsOfF32Bits(b: number): number {
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  const mant = b & 0x7fffff;
  if (exp === 0xff) return mant ? 0x7e00 : sign | 0x7c00;
  const e = exp - 112; // f16 exponent field
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal (or zero): a multiple of 2^-24; 1024 is the smallest normal, which encodes itself.
    const shift = 14 - e;
    if (shift > 24) return sign;
    const full = mant | 0x800000;
    let q = full >>> shift;
    const rem = full & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && q & 1)) q++;
    return sign | q;
  }
  let q = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && q & 1)) q++; // a carry into the exponent is right (up to inf)
  return sign | q;
}

/** The value of IEEE binary16 bits h (exact in f32). */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** Writes v as f16 at out[o..o+1]; returns the value stored (v rounded to f16). */
function putHalf(out: Uint8Array, o: number, v: number): number {
  const bits = f32ToF16Bits(v);
  out[o] = bits & 0xff;
  out[o + 1] = bits >> 8;
  return f16ToF32(bits);
}

const f = Math.fround;
const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));

/** Quantizes the block of weights starting at x[at] into out[o ..] (one block of its format). */
type BlockQuantizer = (x: ArrayLike<number>, at: number, out: Uint8Array, o: number) => void;

/** Q8_0 block of the 32 values x[at .. at+31] into out[o .. o+33]: f16 d = amax / 127, then round(x / d) as int8. */
export function quantizeBlockQ8_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[at + j]));
  const d = amax / 127;
  const id = d ? 1 / d : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 32; j++) out[o + 2 + j] = Math.round(x[at + j] * id) & 0xff;
}

/** The value of largest magnitude among x[at .. at+n-1], with its sign (the first on ties). */
function signedAbsMax(x: ArrayLike<number>, at: number, n: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < n; j++) {
    const v = x[at + j];
    if (Math.abs(v) > amax) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

/**
 * Q4_0 block of x[at .. at+31] into out[o .. o+17]: d from the value of largest magnitude, with its
 * sign (it maps to -8, the end of the range with room), then 16 bytes of nibbles (weight j low,
 * j + 16 high).
 */
export function quantizeBlockQ4_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const d = signedAbsMax(x, at, 32) / -8;
  const id = d ? 1 / d : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 16; j++) {
    const lo = Math.min(15, Math.trunc(x[at + j] * id + 8.5));
    const hi = Math.min(15, Math.trunc(x[at + j + 16] * id + 8.5));
    out[o + 2 + j] = (lo & 15) | ((hi & 15) << 4);
  }
}

/** Q5_0 block (22 bytes): as Q4_0 with 5 bits, the value of largest magnitude maps to -16; f16 d, u32 of fifth bits, nibbles. */
export function quantizeBlockQ5_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const d = signedAbsMax(x, at, 32) / -16;
  const id = d ? 1 / d : 0;
  putHalf(out, o, d);
  const q = Array.from({ length: 32 }, (_, j) => Math.min(31, Math.trunc(x[at + j] * id + 16.5)));
  writeNibblesAndHigh(out, o, q, 2, 6);
}

/** Q4_1 (20 bytes) and Q5_1 (24 bytes) blocks: f16 d = (max - min) / top, f16 m = min, w = d * q + m. */
function quantizeBlockWithMin(bits: 4 | 5): BlockQuantizer {
  const top = bits === 4 ? 15 : 31;
  return (x, at, out, o) => {
    let min = Infinity;
    let max = -Infinity;
    for (let j = 0; j < 32; j++) {
      min = Math.min(min, x[at + j]);
      max = Math.max(max, x[at + j]);
    }
    const d = (max - min) / top;
    const id = d ? 1 / d : 0;
    putHalf(out, o, d);
    putHalf(out, o + 2, min);
    const q = Array.from({ length: 32 }, (_, j) => Math.min(top, Math.trunc((x[at + j] - min) * id + 0.5)));
    writeNibblesAndHigh(out, o, q, bits === 5 ? 4 : -1, bits === 5 ? 8 : 4);
  };
}

export const quantizeBlockQ4_1 = quantizeBlockWithMin(4);
export const quantizeBlockQ5_1 = quantizeBlockWithMin(5);

/** Writes 32 quants of a 32-weight block: nibbles at o + qs (weight j and j + 16 share byte j), and the fifth bits as a u32 at o + qh (-1: none). */
function writeNibblesAndHigh(out: Uint8Array, o: number, q: number[], qh: number, qs: number): void {
  for (let j = 0; j < 16; j++) out[o + qs + j] = (q[j] & 15) | ((q[j + 16] & 15) << 4);
  if (qh < 0) return;
  for (let j = 0; j < 32; j++) out[o + qh + (j >> 3)] |= ((q[j] >> 4) & 1) << (j & 7);
}

/** Packs 8 6-bit scales and mins into the 12 bytes ggml's get_scale_min_k4 reads. */
function packKScales(sc: number[], m: number[]): Uint8Array {
  const out = new Uint8Array(12);
  for (let s = 0; s < 4; s++) {
    out[s] = (sc[s] & 63) | ((sc[s + 4] >> 4) << 6);
    out[s + 4] = (m[s] & 63) | ((m[s + 4] >> 4) << 6);
    out[s + 8] = (sc[s + 4] & 15) | ((m[s + 4] & 15) << 4);
  }
  return out;
}

/**
 * Q4_K (144 bytes) and Q5_K (176 bytes) super-blocks of 256: 8 sub-blocks of 32, each with a 6-bit
 * scale and min (w = d·sc · q - dmin·m) under f16 d and dmin; Q5_K adds 32 bytes of fifth bits.
 */
function quantizeBlockK(bits: 4 | 5): BlockQuantizer {
  const top = bits === 4 ? 15 : 31;
  return (x, at, out, o) => {
    const scales: number[] = [];
    const mins: number[] = []; // stored as positive offsets: w = scale * q - min
    for (let s = 0; s < 8; s++) {
      let lo = 0;
      let hi = 0;
      for (let l = 0; l < 32; l++) {
        lo = Math.min(lo, x[at + 32 * s + l]);
        hi = Math.max(hi, x[at + 32 * s + l]);
      }
      scales.push((hi - lo) / top);
      mins.push(-lo);
    }
    const d = putHalf(out, o, Math.max(...scales) / 63);
    const dmin = putHalf(out, o + 2, Math.max(...mins) / 63);
    const sc = scales.map((v) => (d ? clamp(Math.round(v / d), 0, 63) : 0));
    const m = mins.map((v) => (dmin ? clamp(Math.round(v / dmin), 0, 63) : 0));
    out.set(packKScales(sc, m), o + 4);
    const qhAt = o + 16;
    const qs = o + (bits === 5 ? 48 : 16);
    for (let s = 0; s < 8; s++) {
      const d1 = f(d * sc[s]);
      const m1 = f(dmin * m[s]);
      for (let l = 0; l < 32; l++) {
        const q = d1 ? clamp(Math.round((x[at + 32 * s + l] + m1) / d1), 0, top) : 0;
        out[qs + 32 * (s >> 1) + l] |= (q & 15) << (4 * (s & 1));
        if (bits === 5) out[qhAt + l] |= (q >> 4) << s;
      }
    }
  };
}

export const quantizeBlockQ4_K = quantizeBlockK(4);
export const quantizeBlockQ5_K = quantizeBlockK(5);

/**
 * Q6_K super-block of 256 (210 bytes): 16 sub-blocks of 16, each with a signed int8 scale (under
 * f16 d) mapping its largest-magnitude value to -32; 6-bit quants as low nibbles and high 2 bits.
 */
export function quantizeBlockQ6_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const scales = Array.from({ length: 16 }, (_, s) => signedAbsMax(x, at + 16 * s, 16) / -32);
  let smax = 0;
  for (const v of scales) smax = Math.max(smax, Math.abs(v));
  const d = putHalf(out, o + 208, smax / 127);
  const sc = scales.map((v) => (d ? clamp(Math.round(v / d), -128, 127) : 0));
  for (let s = 0; s < 16; s++) out[o + 192 + s] = sc[s] & 0xff;
  for (let e = 0; e < 256; e++) {
    const n = e >> 7;
    const g = (e >> 5) & 3;
    const l = e & 31;
    const ds = f(d * sc[8 * n + 2 * g + (l >> 4)]);
    const q = ds ? clamp(Math.round(x[at + e] / ds), -32, 31) + 32 : 32;
    out[o + 64 * n + 32 * (g & 1) + l] |= (q & 15) << (4 * (g >> 1));
    out[o + 128 + 32 * n + l] |= (q >> 4) << (2 * g);
  }
}

const BLOCK_QUANTIZERS: Record<QuantDType, BlockQuantizer> = {
  q8_0: quantizeBlockQ8_0,
  q4_0: quantizeBlockQ4_0,
  q4_1: quantizeBlockQ4_1,
  q5_0: quantizeBlockQ5_0,
  q5_1: quantizeBlockQ5_1,
  q4_k: quantizeBlockQ4_K,
  q5_k: quantizeBlockQ5_K,
  q6_k: quantizeBlockQ6_K,
};

/**
 * Quantizes `values` (a whole number of `dtype` blocks) into `dtype` blocks: into `out` when given
 * (long enough; the bytes it covers are overwritten), else a new array. Returns the bytes written.
 */
export function quantizeValues(dtype: QuantDType, values: ArrayLike<number>, out?: Uint8Array): Uint8Array {
  const { blockSize, blockBytes } = QUANT_FORMATS[dtype];
  if (values.length % blockSize !== 0) throw new Error(`${values.length} is not a whole number of ${dtype} blocks`);
  const size = (values.length / blockSize) * blockBytes;
  const result = out ? out.subarray(0, size) : new Uint8Array(size);
  if (out) result.fill(0); // some quantizers OR their bits into the block
  const block = BLOCK_QUANTIZERS[dtype];
  for (let b = 0; b < values.length / blockSize; b++) block(values, blockSize * b, result, b * blockBytes);
  return result;
}

/**
 * f16 bits of values, clamping those beyond the f16 range (which would round to ±infinity,
 * infinities included) to ±65504; NaN stays NaN. Returns how many were clamped.
 */
export function toF16Clamped(values: Float32Array, out: Uint16Array): number {
  const bits = new Int32Array(values.buffer, values.byteOffset, values.length);
  let clamped = 0;
  for (let i = 0; i < bits.length; i++) {
    let h = f16BitsOfF32Bits(bits[i]);
    if ((h & 0x7fff) === 0x7c00) {
      h = (h & 0x8000) | 0x7bff; // ±65504
      clamped++;
    }
    out[i] = h;
  }
  return clamped;
}
