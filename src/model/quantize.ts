// Conversions the loader applies to Hugging Face weights while streaming them to the GPU: f32 to
// IEEE binary16 (round to nearest, ties to even), and ggml's Q8_0 / Q4_0 block quantizers (as
// ggml's reference quantize_row_q8_0_ref / quantize_row_q4_0_ref). The test reference
// (test/reference/quant.ts, test/reference/cpu-ops.ts) uses these same functions.

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

function putHalf(out: Uint8Array, o: number, v: number): void {
  const bits = f32ToF16Bits(v);
  out[o] = bits & 0xff;
  out[o + 1] = bits >> 8;
}

/** Q8_0 block of the 32 values x[at .. at+31] into out[o .. o+33]: f16 d = amax / 127, then round(x / d) as int8. */
export function quantizeBlockQ8_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[at + j]));
  const d = amax / 127;
  const id = d ? 1 / d : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 32; j++) out[o + 2 + j] = Math.round(x[at + j] * id) & 0xff;
}

/**
 * Q4_0 block of x[at .. at+31] into out[o .. o+17]: d from the value of largest magnitude, with its
 * sign (it maps to -8, the end of the range with room), then 16 bytes of nibbles (weight j low,
 * j + 16 high).
 */
export function quantizeBlockQ4_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < 32; j++) {
    const v = x[at + j];
    if (Math.abs(v) > amax) {
      amax = Math.abs(v);
      max = v;
    }
  }
  const d = max / -8;
  const id = d ? 1 / d : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 16; j++) {
    const lo = Math.min(15, Math.trunc(x[at + j] * id + 8.5));
    const hi = Math.min(15, Math.trunc(x[at + j + 16] * id + 8.5));
    out[o + 2 + j] = (lo & 15) | ((hi & 15) << 4);
  }
}

/** The load-time quantized storage types, with their block sizes in bytes (32 weights each). */
export const LOAD_QUANT_BLOCK_BYTES = { q8_0: 34, q4_0: 18 } as const;
export type LoadQuantDType = keyof typeof LOAD_QUANT_BLOCK_BYTES;

/** Quantizes `values` (a multiple of 32) into Q8_0 or Q4_0 blocks (into `out` when given: long enough; returns the bytes written). */
export function quantizeValues(dtype: LoadQuantDType, values: ArrayLike<number>, out?: Uint8Array): Uint8Array {
  if (values.length % 32 !== 0) throw new Error(`${values.length} is not a whole number of ${dtype} blocks`);
  const blockBytes = LOAD_QUANT_BLOCK_BYTES[dtype];
  const size = (values.length / 32) * blockBytes;
  const result = out ? out.subarray(0, size) : new Uint8Array(size);
  const block = dtype === 'q8_0' ? quantizeBlockQ8_0 : quantizeBlockQ4_0;
  for (let b = 0; b < values.length / 32; b++) block(values, 32 * b, result, b * blockBytes);
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
