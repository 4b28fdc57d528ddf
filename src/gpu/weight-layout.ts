// How each weight storage type lays out in a GPU buffer, in bytes: the block shape of ggml's
// quantized types, the paired layout of Q8_0 / Q4_0, and the size of a matrix, a row, or a
// matrix split into buffers of whole rows. The WGSL that reads these layouts is weight-formats.ts.
import type { QuantDType, WeightDType } from './tensor.ts';

/** Block shape of each ggml quantized type: weights per block and bytes per block. */
export const QUANT_FORMATS: Record<QuantDType, { blockSize: number; blockBytes: number }> = {
  q4_0: { blockSize: 32, blockBytes: 18 }, // f16 d, 16 bytes of nibbles: w = d * (q - 8)
  q4_1: { blockSize: 32, blockBytes: 20 }, // f16 d, f16 m, 16 bytes of nibbles: w = d * q + m
  q5_0: { blockSize: 32, blockBytes: 22 }, // f16 d, 4 bytes of high bits, 16 bytes of nibbles: w = d * (q - 16)
  q5_1: { blockSize: 32, blockBytes: 24 }, // f16 d, f16 m, 4 bytes of high bits, 16 of nibbles: w = d * q + m
  q8_0: { blockSize: 32, blockBytes: 34 }, // f16 d, 32 int8: w = d * q
  q4_k: { blockSize: 256, blockBytes: 144 }, // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 of nibbles
  q5_k: { blockSize: 256, blockBytes: 176 }, // as q4_k plus 32 bytes of high bits
  q6_k: { blockSize: 256, blockBytes: 210 }, // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d
};

export function isQuantized(dtype: WeightDType): dtype is QuantDType {
  return Object.hasOwn(QUANT_FORMATS, dtype);
}

/** Whether `dtype`'s GPU buffers hold pairs of blocks (the reason: weight-formats-quant.ts). */
export function isPairedQuant(dtype: WeightDType): dtype is 'q8_0' | 'q4_0' {
  return dtype === 'q8_0' || dtype === 'q4_0';
}

/**
 * The GPU layout of `blocks` whole file blocks of a paired type (each an f16 scale, then its
 * quants): per pair of blocks, the two scales, then the two blocks' quants; an odd last block as
 * its scale, 2 zero bytes and its quants. The result has weightByteSize's length (the file bytes
 * padded to words). `src` may hold more bytes than the blocks; `out`, when given, receives it.
 */
export function pairQuantBlocks(dtype: 'q8_0' | 'q4_0', src: Uint8Array, blocks: number, out?: Uint8Array): Uint8Array {
  const { blockBytes } = QUANT_FORMATS[dtype];
  const quantBytes = blockBytes - 2;
  const size = Math.ceil((blocks * blockBytes) / 4) * 4;
  if (src.length < blocks * blockBytes) throw new Error(`${dtype}: ${src.length} bytes hold fewer than ${blocks} blocks`);
  const result = out ? out.subarray(0, size) : new Uint8Array(size);
  for (let b = 0; b < blocks; b += 2) {
    const from = b * blockBytes;
    const to = from; // a pair takes the bytes of its two file blocks
    result[to] = src[from];
    result[to + 1] = src[from + 1];
    if (b + 1 < blocks) {
      result[to + 2] = src[from + blockBytes];
      result[to + 3] = src[from + blockBytes + 1];
      result.set(src.subarray(from + 2, from + blockBytes), to + 4);
      result.set(src.subarray(from + blockBytes + 2, from + 2 * blockBytes), to + 4 + quantBytes);
    } else {
      result[to + 2] = 0;
      result[to + 3] = 0;
      result.set(src.subarray(from + 2, from + blockBytes), to + 4);
      result.fill(0, to + 4 + quantBytes);
    }
  }
  return result;
}

/** Elements per block of a storage type (1 for f32/f16/bf16): a matrix row must be a multiple of it. */
export function weightBlockSize(dtype: WeightDType): number {
  return isQuantized(dtype) ? QUANT_FORMATS[dtype].blockSize : 1;
}

/** Throws unless a [rows, cols] matrix can be stored in `dtype` (quantized rows are whole blocks). */
export function checkWeightShape(dtype: WeightDType, rows: number, cols: number, what: string): void {
  const block = weightBlockSize(dtype);
  if (cols % block !== 0) {
    throw new Error(`${what}: a ${dtype} matrix needs rows of a multiple of ${block} weights, got [${rows}, ${cols}]`);
  }
}

/**
 * Bytes a weight buffer of `elements` elements takes in `dtype`, padded to whole u32 words. For a
 * quantized type, `elements` must be a whole number of blocks.
 */
export function weightByteSize(dtype: WeightDType, elements: number): number {
  if (isQuantized(dtype)) {
    const { blockSize, blockBytes } = QUANT_FORMATS[dtype];
    if (elements % blockSize !== 0) throw new Error(`${elements} ${dtype} weights are not a whole number of ${blockSize}-weight blocks`);
    return Math.ceil(((elements / blockSize) * blockBytes) / 4) * 4;
  }
  return dtype === 'f32' ? elements * 4 : Math.ceil(elements / 2) * 4;
}

/** Bytes of one row of `cols` weights in `dtype`, unpadded (whole blocks for a quantized type). */
export function weightRowBytes(dtype: WeightDType, cols: number): number {
  if (isQuantized(dtype)) {
    const { blockSize, blockBytes } = QUANT_FORMATS[dtype];
    return (cols / blockSize) * blockBytes;
  }
  return cols * (dtype === 'f32' ? 4 : 2);
}

/**
 * Splits a [rows, cols] matrix of `dtype` into row ranges whose buffers take at most `maxBytes`
 * each (rows per part = floor(maxBytes / row bytes), the last part the rest). Undefined when it
 * fits in one buffer, or when not even one row fits (it cannot be stored).
 */
export function splitMatrixRows(dtype: WeightDType, rows: number, cols: number, maxBytes: number): { rows: number; bytes: number }[] | undefined {
  if (weightByteSize(dtype, rows * cols) <= maxBytes) return undefined;
  let perPart = Math.floor(maxBytes / weightRowBytes(dtype, cols));
  while (perPart > 0 && weightByteSize(dtype, perPart * cols) > maxBytes) perPart--; // the padding to 4 bytes
  if (perPart < 1) return undefined;
  const parts: { rows: number; bytes: number }[] = [];
  for (let first = 0; first < rows; first += perPart) {
    const n = Math.min(perPart, rows - first);
    parts.push({ rows: n, bytes: weightByteSize(dtype, n * cols) });
  }
  return parts;
}
