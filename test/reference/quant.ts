// ggml's block-quantized weight formats on the CPU: the dequantizer that the GPU snippets
// (src/gpu/weight-formats.ts) and the project's quantizers (src/model/quantize.ts) are held to.
// It is written apart from the quantizers on purpose: the tests check one against the other.
// Layouts follow ggml (little-endian; see QUANT_FORMATS). Dequantization computes in f32 in
// ggml's order (scale products first, then times the quant), so it matches ggml's
// dequantize_row_* bit for bit.
import type { QuantDType } from '../../src/gpu/tensor.ts';
import { QUANT_FORMATS } from '../../src/gpu/weight-formats.ts';
import { f16BitsToF32 } from './cpu-ops.ts';

const f = Math.fround;

/** Reads f16 at byte offset o. */
function half(bytes: Uint8Array, o: number): number {
  return f16BitsToF32(bytes[o] | (bytes[o + 1] << 8));
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
