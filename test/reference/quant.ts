// ggml's block-quantized weight formats on the CPU: the dequantizer the GPU snippets
// (src/gpu/weight-formats.ts) are held to, and our own quantizer that writes valid blocks for the
// tests and the generated GGUF models. Layouts follow ggml (little-endian; see QUANT_FORMATS).
// Dequantization computes in f32 in ggml's order (scale products first, then times the quant),
// so it matches ggml's dequantize_row_* bit for bit.
//
// The quantizers aim at valid, reasonably accurate blocks, not at ggml's error-minimising search:
// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow ggml's reference quantize_row_*_ref (Q8_0 and Q4_0 are
// the loader's own, src/model/quantize.ts, which quantizes Hugging Face weights at load); the K-quants use a
// plain min/max scale per sub-block with the 6/8-bit scales rounded to the nearest step.
import type { QuantDType } from '../../src/gpu/tensor.ts';
import { QUANT_FORMATS } from '../../src/gpu/weight-formats.ts';
import { quantizeBlockQ4_0, quantizeBlockQ8_0 } from '../../src/model/quantize.ts';
import { f16BitsToF32, f32ToF16Bits } from './cpu-ops.ts';

const f = Math.fround;

/** Reads f16 at byte offset o. */
function half(bytes: Uint8Array, o: number): number {
  return f16BitsToF32(bytes[o] | (bytes[o + 1] << 8));
}

function putHalf(bytes: Uint8Array, o: number, v: number): number {
  const bits = f32ToF16Bits(v);
  bytes[o] = bits & 0xff;
  bytes[o + 1] = bits >> 8;
  return f16BitsToF32(bits);
}

const i8 = (b: number) => (b << 24) >> 24;

/** Element values of `n` weights stored as `dtype` blocks (n a multiple of the block size). */
export function dequantize(dtype: QuantDType, bytes: Uint8Array, n: number): Float32Array {
  const { blockSize, blockBytes } = QUANT_FORMATS[dtype];
  if (n % blockSize !== 0) throw new Error(`${n} is not a whole number of ${dtype} blocks`);
  if (bytes.length < (n / blockSize) * blockBytes) throw new Error(`${dtype}: ${bytes.length} bytes hold fewer than ${n} weights`);
  const out = new Float32Array(n);
  for (let b = 0; b < n / blockSize; b++) {
    const o = b * blockBytes;
    const y = out.subarray(b * blockSize, (b + 1) * blockSize);
    switch (dtype) {
      case 'q8_0': {
        const d = half(bytes, o);
        for (let j = 0; j < 32; j++) y[j] = f(d * i8(bytes[o + 2 + j]));
        break;
      }
      case 'q4_0':
      case 'q4_1': {
        const d = half(bytes, o);
        const m = dtype === 'q4_1' ? half(bytes, o + 2) : 0;
        const qs = o + (dtype === 'q4_1' ? 4 : 2);
        for (let j = 0; j < 16; j++) {
          const lo = bytes[qs + j] & 15;
          const hi = bytes[qs + j] >> 4;
          if (dtype === 'q4_0') {
            y[j] = f(d * (lo - 8));
            y[j + 16] = f(d * (hi - 8));
          } else {
            y[j] = f(f(d * lo) + m);
            y[j + 16] = f(f(d * hi) + m);
          }
        }
        break;
      }
      case 'q5_0':
      case 'q5_1': {
        const one = dtype === 'q5_1';
        const d = half(bytes, o);
        const m = one ? half(bytes, o + 2) : 0;
        const qhAt = o + (one ? 4 : 2);
        const qh = (bytes[qhAt] | (bytes[qhAt + 1] << 8) | (bytes[qhAt + 2] << 16) | (bytes[qhAt + 3] << 24)) >>> 0;
        const qs = qhAt + 4;
        for (let j = 0; j < 16; j++) {
          const q0 = (bytes[qs + j] & 15) | (((qh >>> j) & 1) << 4);
          const q1 = (bytes[qs + j] >> 4) | (((qh >>> (j + 16)) & 1) << 4);
          y[j] = one ? f(f(d * q0) + m) : f(d * (q0 - 16));
          y[j + 16] = one ? f(f(d * q1) + m) : f(d * (q1 - 16));
        }
        break;
      }
      case 'q4_k':
      case 'q5_k': {
        const five = dtype === 'q5_k';
        const d = half(bytes, o);
        const dmin = half(bytes, o + 2);
        const sb = bytes.subarray(o + 4, o + 16);
        const qh = o + 16;
        const qs = o + (five ? 48 : 16);
        for (let s = 0; s < 8; s++) {
          const [sc, m] = kScaleMin(sb, s);
          const d1 = f(d * sc);
          const m1 = f(dmin * m);
          for (let l = 0; l < 32; l++) {
            let q = (bytes[qs + 32 * (s >> 1) + l] >> (4 * (s & 1))) & 15;
            if (five) q |= ((bytes[qh + l] >> s) & 1) << 4;
            y[32 * s + l] = f(f(d1 * q) - m1);
          }
        }
        break;
      }
      case 'q6_k': {
        const d = half(bytes, o + 208);
        for (let e = 0; e < 256; e++) {
          const n = e >> 7;
          const g = (e >> 5) & 3;
          const l = e & 31;
          const low = (bytes[o + 64 * n + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
          const high = (bytes[o + 128 + 32 * n + l] >> (2 * g)) & 3;
          const sc = i8(bytes[o + 192 + 8 * n + 2 * g + (l >> 4)]);
          y[e] = f(f(d * sc) * ((low | (high << 4)) - 32));
        }
        break;
      }
    }
  }
  return out;
}

/** ggml's get_scale_min_k4: the 6-bit scale and min of sub-block s from the 12 packed bytes. */
function kScaleMin(sb: Uint8Array, s: number): [number, number] {
  if (s < 4) return [sb[s] & 63, sb[s + 4] & 63];
  return [(sb[s + 4] & 15) | ((sb[s - 4] >> 6) << 4), (sb[s + 4] >> 4) | ((sb[s] >> 6) << 4)];
}

/** Packs 8 6-bit scales and mins into the 12 bytes kScaleMin reads. */
function packKScales(sc: number[], m: number[]): Uint8Array {
  const out = new Uint8Array(12);
  for (let s = 0; s < 4; s++) {
    out[s] = (sc[s] & 63) | ((sc[s + 4] >> 4) << 6);
    out[s + 4] = (m[s] & 63) | ((m[s + 4] >> 4) << 6);
    out[s + 8] = (sc[s + 4] & 15) | ((m[s + 4] & 15) << 4);
  }
  return out;
}

const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));

/** Quantizes `values` (length a multiple of the block size) into `dtype` blocks. */
export function quantize(dtype: QuantDType, values: Float32Array): Uint8Array {
  const { blockSize, blockBytes } = QUANT_FORMATS[dtype];
  if (values.length % blockSize !== 0) throw new Error(`${values.length} is not a whole number of ${dtype} blocks`);
  const out = new Uint8Array((values.length / blockSize) * blockBytes);
  for (let b = 0; b < values.length / blockSize; b++) {
    const x = values.subarray(b * blockSize, (b + 1) * blockSize);
    const o = b * blockBytes;
    switch (dtype) {
      case 'q8_0':
        quantizeBlockQ8_0(x, 0, out, o);
        break;
      case 'q4_0':
        quantizeBlockQ4_0(x, 0, out, o);
        break;
      case 'q5_0': {
        // As Q4_0 (src/model/quantize.ts) with 5 bits: the value of largest magnitude maps to -16.
        let amax = 0;
        let max = 0;
        for (const v of x) if (Math.abs(v) > amax) { amax = Math.abs(v); max = v; }
        const levels = 16;
        const d = max / -levels;
        const id = d ? 1 / d : 0;
        putHalf(out, o, d);
        const q = Array.from(x, (v) => Math.min(2 * levels - 1, Math.trunc(v * id + levels + 0.5)));
        writeNibblesAndHigh(out, o, q, 2, 6);
        break;
      }
      case 'q4_1':
      case 'q5_1': {
        let min = Infinity;
        let max = -Infinity;
        for (const v of x) { min = Math.min(min, v); max = Math.max(max, v); }
        const top = dtype === 'q4_1' ? 15 : 31;
        const d = (max - min) / top;
        const id = d ? 1 / d : 0;
        putHalf(out, o, d);
        putHalf(out, o + 2, min);
        const q = Array.from(x, (v) => Math.min(top, Math.trunc((v - min) * id + 0.5)));
        writeNibblesAndHigh(out, o, q, dtype === 'q5_1' ? 4 : -1, dtype === 'q5_1' ? 8 : 4);
        break;
      }
      case 'q4_k':
      case 'q5_k': {
        const top = dtype === 'q4_k' ? 15 : 31;
        const scales: number[] = [];
        const mins: number[] = []; // stored as positive offsets: w = scale * q - min
        for (let s = 0; s < 8; s++) {
          let lo = 0;
          let hi = 0;
          for (let l = 0; l < 32; l++) { lo = Math.min(lo, x[32 * s + l]); hi = Math.max(hi, x[32 * s + l]); }
          scales.push((hi - lo) / top);
          mins.push(-lo);
        }
        const d = putHalf(out, o, Math.max(...scales) / 63);
        const dmin = putHalf(out, o + 2, Math.max(...mins) / 63);
        const sc = scales.map((v) => (d ? clamp(Math.round(v / d), 0, 63) : 0));
        const m = mins.map((v) => (dmin ? clamp(Math.round(v / dmin), 0, 63) : 0));
        out.set(packKScales(sc, m), o + 4);
        const qhAt = o + 16;
        const qs = o + (dtype === 'q5_k' ? 48 : 16);
        for (let s = 0; s < 8; s++) {
          const d1 = f(d * sc[s]);
          const m1 = f(dmin * m[s]);
          for (let l = 0; l < 32; l++) {
            const q = d1 ? clamp(Math.round((x[32 * s + l] + m1) / d1), 0, top) : 0;
            out[qs + 32 * (s >> 1) + l] |= (q & 15) << (4 * (s & 1));
            if (dtype === 'q5_k') out[qhAt + l] |= (q >> 4) << s;
          }
        }
        break;
      }
      case 'q6_k': {
        // 16 sub-blocks of 16, each with a signed scale mapping its largest-magnitude value to -32.
        const scales: number[] = [];
        for (let s = 0; s < 16; s++) {
          let amax = 0;
          let max = 0;
          for (let l = 0; l < 16; l++) if (Math.abs(x[16 * s + l]) > amax) { amax = Math.abs(x[16 * s + l]); max = x[16 * s + l]; }
          scales.push(max / -32);
        }
        let smax = 0;
        for (const v of scales) smax = Math.max(smax, Math.abs(v));
        const d = putHalf(out, o + 208, smax / 127);
        const sc = scales.map((v) => (d ? clamp(Math.round(v / d), -128, 127) : 0));
        for (let s = 0; s < 16; s++) out[o + 192 + s] = sc[s] & 0xff;
        for (let e = 0; e < 256; e++) {
          const n = e >> 7;
          const g = (e >> 5) & 3;
          const l = e & 31;
          const scale = sc[8 * n + 2 * g + (l >> 4)];
          const ds = f(d * scale);
          const q = ds ? clamp(Math.round(x[e] / ds), -32, 31) + 32 : 32;
          out[o + 64 * n + 32 * (g & 1) + l] |= (q & 15) << (4 * (g >> 1));
          out[o + 128 + 32 * n + l] |= (q >> 4) << (2 * g);
        }
        break;
      }
    }
  }
  return out;
}

/** Writes 32 quants of a 32-weight block: nibbles at qs (weight j and j + 16 share byte j), and the fifth bits as a u32 at qh (-1: none). */
function writeNibblesAndHigh(out: Uint8Array, o: number, q: number[], qh: number, qs: number): void {
  for (let j = 0; j < 16; j++) out[o + qs + j] = (q[j] & 15) | ((q[j + 16] & 15) << 4);
  if (qh < 0) return;
  for (let j = 0; j < 32; j++) out[o + qh + (j >> 3)] |= ((q[j] >> 4) & 1) << (j & 7);
}
