// How a kernel reads a weight element, per storage type.
//
// The matmul, matvec and embedding kernels never touch the weight buffer directly: they call
// `load_weight(i)`, the i-th element of the row-major weight matrix as f32, and (matmul, matvec)
// `load_weight4(i)`, elements i .. i+3 as a vec4. This file supplies the WGSL that declares the
// weight binding and defines both for one storage type; it is prepended to the kernel's source when
// its pipeline is created (WGSL lets module-scope declarations appear in any order), so each kernel
// is written once for every dtype.
//
// Two layouts per type. The plain one works for any i. The `aligned` one may only be used when
// every load_weight4 index is a multiple of 4 (the matrix has a multiple of 4 columns and the
// kernels only step K by 4): it declares the buffer as an array of 4-element groups, so one
// load_weight4 is a single 16-byte (f32) or 8-byte (f16/bf16) load instead of four.
//
// f16 and bf16 are packed two per u32 (element i lives in word i >> 1, the low half first, as the
// little-endian bytes of a 2-byte array read as u32 words) and widened to f32 in the shader: no
// kernel needs the optional `shader-f16` feature.
//
// ggml's block-quantized types (Q4_1, Q5_*, Q4_K, Q6_K, ...) keep the file's blocks as they are:
// the buffer is the raw bytes read as array<u32>. Blocks are only 2-byte aligned (a Q8_0 block is
// 34 bytes), so the snippets pick bytes and f16 halves out of words with shifts at any offset
// (`load_byte(b)`, `load_f16(b)`), and `load_weight(i)` decodes element i from its block (block
// i / 32, or i / 256 for the K-quants; every row is a whole number of blocks).
//
// Q8_0 and Q4_0 are stored in pairs of blocks instead (isPairedQuant, pairQuantBlocks): the two
// f16 scales first, then the two blocks' quants, so a pair (68 / 36 bytes, the same as two file
// blocks) is whole words and every load is one aligned word: 4 weights cost 2 loads (scale, quants)
// instead of 3-4 with the shifts of unaligned reads. Measured on SwiftShader, decoding 512k
// weights: Q8_0 ~4.0 -> ~2.1 ms, Q4_0 ~3.0 -> ~2.2 ms (f32 ~1.7). An odd last block is a half pair
// (its scale, 2 bytes of padding, its quants): the same size as the file's blocks padded to words.
import type { QuantDType, WeightDType } from './tensor.ts';

/** WGSL that widens a packed pair of bf16 (low half first) to a vec2<f32>. */
const BF16_UNPACK2 = /* wgsl */ `
fn unpack2x16bf(word: u32) -> vec2<f32> {
  // bf16 is the top half of an f32: the low half shifted up, the high half with its low bits cleared.
  return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}
`;

type Loader = (binding: number, group: number) => string;

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

/** Whether `dtype`'s GPU buffers hold pairs of blocks (see the head of this file). */
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
 * Shared by the quantized snippets: the weight binding as raw u32 words, and byte / f16 extraction
 * at any byte offset (little-endian; an f16 at an even offset never straddles two words).
 *
 * Each type's load_weight4(i) (i a multiple of 4: the 4 weights share a block and a scale, since
 * every block and sub-block is a multiple of 4 weights long) decodes the block's scales once and
 * takes the 4 quants from one unaligned 4-byte read (`load_u32_at`, at most two words).
 */
const QUANT_PRELUDE = (binding: number, group: number) => /* wgsl */ `
@group(${group}) @binding(${binding}) var<storage, read> weight: array<u32>;

/** Byte b of the buffer, 0..255. */
fn load_byte(b: u32) -> u32 {
  return (weight[b >> 2u] >> ((b & 3u) << 3u)) & 0xffu;
}

/** Byte b as a signed int8. */
fn load_i8(b: u32) -> i32 {
  return (i32(load_byte(b)) << 24u) >> 24u;
}

/** The f16 at (even) byte offset b, widened to f32. */
fn load_f16(b: u32) -> f32 {
  return unpack2x16float(weight[b >> 2u] >> ((b & 2u) << 3u)).x;
}

/** The 4 bytes from bit shift (a multiple of 8) of the little-endian pair of words lo, hi. */
fn join_u32(lo: u32, hi: u32, shift: u32) -> u32 {
  return select((lo >> shift) | (hi << (32u - shift)), lo, shift == 0u);
}

/** Bytes b .. b+3 (any alignment) as one little-endian u32. */
fn load_u32_at(b: u32) -> u32 {
  let w = b >> 2u;
  let shift = (b & 3u) << 3u;
  let lo = weight[w];
  if (shift == 0u) {
    return lo;
  }
  // (b + 3 lies in the buffer, so word w + 1 does; the min only keeps the index provably in bounds.)
  return join_u32(lo, weight[min(w + 1u, arrayLength(&weight) - 1u)], shift);
}

/** The 4 bytes of v, lowest first. */
fn bytes4(v: u32) -> vec4<u32> {
  return (vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
}

/** The 4 bytes of v as int8, lowest first. */
fn bytes4_i8(v: u32) -> vec4<i32> {
  return bitcast<vec4<i32>>(vec4<u32>(v) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
}
`;

/** 6-bit scale and min of sub-block s (0..7) of a Q4_K / Q5_K block whose 12 scale bytes start at sb. */
const K_SCALE_MIN = /* wgsl */ `
fn k_scale_min(sb: u32, s: u32) -> vec2<f32> {
  if (s < 4u) {
    return vec2<f32>(f32(load_byte(sb + s) & 63u), f32(load_byte(sb + s + 4u) & 63u));
  }
  let packed = load_byte(sb + s + 4u); // low 4 bits of the scale, low 4 bits of the min
  let sc = (packed & 15u) | ((load_byte(sb + s - 4u) >> 6u) << 4u);
  let m = (packed >> 4u) | ((load_byte(sb + s) >> 6u) << 4u);
  return vec2<f32>(f32(sc), f32(m));
}
`;

/** load_weight(i) of each quantized type (the prelude supplies the rest). */
const QUANT_LOAD_WEIGHT: Record<QuantDType, string> = {
  q8_0: /* wgsl */ `
// Q8_0 in pairs of blocks of 32 (17 words: the f16 scales d of both, then 8 words of int8 q
// each; see pairQuantBlocks). w = d * q.
fn q8_0_scale(pair: u32, half: u32) -> f32 {
  return unpack2x16float(weight[pair * 17u])[half];
}

fn load_weight(i: u32) -> f32 {
  let b = i >> 5u;
  let word = weight[(b >> 1u) * 17u + 1u + (b & 1u) * 8u + ((i & 31u) >> 2u)];
  let q = bitcast<i32>(word << (24u - ((i & 3u) << 3u))) >> 24u;
  return q8_0_scale(b >> 1u, b & 1u) * f32(q);
}

fn load_weight4(i: u32) -> vec4<f32> {
  let b = i >> 5u;
  let word = weight[(b >> 1u) * 17u + 1u + (b & 1u) * 8u + ((i & 31u) >> 2u)];
  return q8_0_scale(b >> 1u, b & 1u) * vec4<f32>(bytes4_i8(word));
}
`,
  q4_0: /* wgsl */ `
// Q4_0 in pairs of blocks of 32 (9 words: the f16 scales d of both, then 4 words of nibbles each;
// see pairQuantBlocks). Weight j < 16 of a block is the low nibble of its byte j, weight j + 16
// the high nibble. w = d * (q - 8).
fn q4_0_scale(pair: u32, half: u32) -> f32 {
  return unpack2x16float(weight[pair * 9u])[half];
}

fn load_weight(i: u32) -> f32 {
  let b = i >> 5u;
  let j = i & 31u;
  let word = weight[(b >> 1u) * 9u + 1u + (b & 1u) * 4u + ((j & 15u) >> 2u)];
  let q = (word >> (((j & 3u) << 3u) + ((j >> 4u) << 2u))) & 15u;
  return q4_0_scale(b >> 1u, b & 1u) * (f32(q) - 8.0);
}

fn load_weight4(i: u32) -> vec4<f32> {
  let b = i >> 5u;
  let j = i & 31u;
  let word = weight[(b >> 1u) * 9u + 1u + (b & 1u) * 4u + ((j & 15u) >> 2u)];
  let q = bytes4(word >> ((j >> 4u) << 2u)) & vec4<u32>(15u);
  return q4_0_scale(b >> 1u, b & 1u) * (vec4<f32>(q) - 8.0);
}
`,
  q4_1: /* wgsl */ `
// Q4_1: 20-byte blocks of 32: f16 d, f16 m, 16 bytes of nibbles as Q4_0. w = d * q + m.
fn load_weight(i: u32) -> f32 {
  let blk = (i >> 5u) * 20u;
  let j = i & 31u;
  let q = (load_byte(blk + 4u + (j & 15u)) >> ((j >> 4u) << 2u)) & 15u;
  return load_f16(blk) * f32(q) + load_f16(blk + 2u);
}

fn load_weight4(i: u32) -> vec4<f32> {
  let blk = (i >> 5u) * 20u;
  let j = i & 31u;
  let q = bytes4(load_u32_at(blk + 4u + (j & 15u)) >> ((j >> 4u) << 2u)) & vec4<u32>(15u);
  return load_f16(blk) * vec4<f32>(q) + load_f16(blk + 2u);
}
`,
  q5_0: /* wgsl */ `
// Q5_0: 22-byte blocks of 32: f16 d, 32 high bits (bit j of the little-endian u32 is weight j's),
// 16 bytes of nibbles as Q4_0. w = d * (q - 16).
fn load_weight(i: u32) -> f32 {
  let blk = (i >> 5u) * 22u;
  let j = i & 31u;
  let high = (load_byte(blk + 2u + (j >> 3u)) >> (j & 7u)) & 1u;
  let q = ((load_byte(blk + 6u + (j & 15u)) >> ((j >> 4u) << 2u)) & 15u) | (high << 4u);
  return load_f16(blk) * (f32(q) - 16.0);
}

fn load_weight4(i: u32) -> vec4<f32> {
  let blk = (i >> 5u) * 22u;
  let j = i & 31u;
  let high = (vec4<u32>(load_u32_at(blk + 2u) >> j) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u);
  let low = bytes4(load_u32_at(blk + 6u + (j & 15u)) >> ((j >> 4u) << 2u)) & vec4<u32>(15u);
  return load_f16(blk) * (vec4<f32>(low | (high << vec4<u32>(4u))) - 16.0);
}
`,
  q5_1: /* wgsl */ `
// Q5_1: 24-byte blocks of 32: f16 d, f16 m, 32 high bits, 16 bytes of nibbles. w = d * q + m.
fn load_weight(i: u32) -> f32 {
  let blk = (i >> 5u) * 24u;
  let j = i & 31u;
  let high = (load_byte(blk + 4u + (j >> 3u)) >> (j & 7u)) & 1u;
  let q = ((load_byte(blk + 8u + (j & 15u)) >> ((j >> 4u) << 2u)) & 15u) | (high << 4u);
  return load_f16(blk) * f32(q) + load_f16(blk + 2u);
}

fn load_weight4(i: u32) -> vec4<f32> {
  let blk = (i >> 5u) * 24u;
  let j = i & 31u;
  let high = (vec4<u32>(load_u32_at(blk + 4u) >> j) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u);
  let low = bytes4(load_u32_at(blk + 8u + (j & 15u)) >> ((j >> 4u) << 2u)) & vec4<u32>(15u);
  return load_f16(blk) * vec4<f32>(low | (high << vec4<u32>(4u))) + load_f16(blk + 2u);
}
`,
  q4_k: /* wgsl */ `
// Q4_K: 144-byte blocks of 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins of the 8
// sub-blocks of 32, 128 bytes of nibbles. Sub-block s takes the low (s even) or high (s odd)
// nibbles of bytes 32 * (s / 2) .. + 31. w = d * scale_s * q - dmin * min_s.
${K_SCALE_MIN}
fn load_weight(i: u32) -> f32 {
  let blk = (i >> 8u) * 144u;
  let e = i & 255u;
  let s = e >> 5u;
  let q = (load_byte(blk + 16u + ((s >> 1u) << 5u) + (e & 31u)) >> ((s & 1u) << 2u)) & 15u;
  let sm = k_scale_min(blk + 4u, s);
  return load_f16(blk) * sm.x * f32(q) - load_f16(blk + 2u) * sm.y;
}

fn load_weight4(i: u32) -> vec4<f32> {
  let blk = (i >> 8u) * 144u;
  let e = i & 255u;
  let s = e >> 5u;
  let q = bytes4(load_u32_at(blk + 16u + ((s >> 1u) << 5u) + (e & 31u)) >> ((s & 1u) << 2u)) & vec4<u32>(15u);
  let sm = k_scale_min(blk + 4u, s);
  return load_f16(blk) * sm.x * vec4<f32>(q) - load_f16(blk + 2u) * sm.y;
}
`,
  q5_k: /* wgsl */ `
// Q5_K: 176-byte blocks of 256: as Q4_K, plus 32 bytes of high bits before the nibbles: weight
// l of sub-block s has its fifth bit in bit s of high byte l.
${K_SCALE_MIN}
fn load_weight(i: u32) -> f32 {
  let blk = (i >> 8u) * 176u;
  let e = i & 255u;
  let s = e >> 5u;
  let l = e & 31u;
  let low = (load_byte(blk + 48u + ((s >> 1u) << 5u) + l) >> ((s & 1u) << 2u)) & 15u;
  let q = low | (((load_byte(blk + 16u + l) >> s) & 1u) << 4u);
  let sm = k_scale_min(blk + 4u, s);
  return load_f16(blk) * sm.x * f32(q) - load_f16(blk + 2u) * sm.y;
}

fn load_weight4(i: u32) -> vec4<f32> {
  let blk = (i >> 8u) * 176u;
  let e = i & 255u;
  let s = e >> 5u;
  let l = e & 31u;
  let low = bytes4(load_u32_at(blk + 48u + ((s >> 1u) << 5u) + l) >> ((s & 1u) << 2u)) & vec4<u32>(15u);
  let high = bytes4(load_u32_at(blk + 16u + l) >> s) & vec4<u32>(1u);
  let sm = k_scale_min(blk + 4u, s);
  return load_f16(blk) * sm.x * vec4<f32>(low | (high << vec4<u32>(4u))) - load_f16(blk + 2u) * sm.y;
}
`,
  q6_k: /* wgsl */ `
// Q6_K: 210-byte blocks of 256: ql (128 bytes of low nibbles), qh (64 bytes of high 2-bit pairs),
// 16 int8 scales (one per 16 weights), f16 d. Each half n of 128 weights is 4 groups g of 32:
// weight l of group g has its low 4 bits in ql[64n + 32 (g & 1) + l] (low nibble for g < 2),
// its high 2 bits at bit 2g of qh[32n + l], and the scale scales[8n + 2g + l / 16].
// w = d * scale * (q - 32).
fn load_weight(i: u32) -> f32 {
  let blk = (i >> 8u) * 210u;
  let e = i & 255u;
  let n = e >> 7u;
  let g = (e >> 5u) & 3u;
  let l = e & 31u;
  let low = (load_byte(blk + (n << 6u) + ((g & 1u) << 5u) + l) >> ((g >> 1u) << 2u)) & 15u;
  let high = (load_byte(blk + 128u + (n << 5u) + l) >> (g << 1u)) & 3u;
  let q = i32(low | (high << 4u)) - 32;
  let sc = load_i8(blk + 192u + (n << 3u) + (g << 1u) + (l >> 4u));
  return load_f16(blk + 208u) * f32(sc) * f32(q);
}

fn load_weight4(i: u32) -> vec4<f32> {
  let blk = (i >> 8u) * 210u;
  let e = i & 255u;
  let n = e >> 7u;
  let g = (e >> 5u) & 3u;
  let l = e & 31u;
  let low = bytes4(load_u32_at(blk + (n << 6u) + ((g & 1u) << 5u) + l) >> ((g >> 1u) << 2u)) & vec4<u32>(15u);
  let high = bytes4(load_u32_at(blk + 128u + (n << 5u) + l) >> (g << 1u)) & vec4<u32>(3u);
  let q = vec4<i32>(low | (high << vec4<u32>(4u))) - vec4<i32>(32);
  let sc = load_i8(blk + 192u + (n << 3u) + (g << 1u) + (l >> 4u));
  return load_f16(blk + 208u) * f32(sc) * vec4<f32>(q);
}
`,
};

const LOADERS: Record<'f32' | 'f16' | 'bf16', { plain: Loader; aligned: Loader }> = {
  f32: {
    plain: (binding, group) => /* wgsl */ `
// Weight storage: f32, one element per array slot.
@group(${group}) @binding(${binding}) var<storage, read> weight: array<f32>;

fn load_weight(i: u32) -> f32 {
  return weight[i];
}

fn load_weight4(i: u32) -> vec4<f32> {
  return vec4<f32>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u]);
}
`,
    aligned: (binding, group) => /* wgsl */ `
// Weight storage: f32, read as vec4 groups (load_weight4 indices are multiples of 4).
@group(${group}) @binding(${binding}) var<storage, read> weight: array<vec4<f32>>;

fn load_weight(i: u32) -> f32 {
  return weight[i >> 2u][i & 3u];
}

fn load_weight4(i: u32) -> vec4<f32> {
  return weight[i >> 2u];
}
`,
  },
  f16: {
    plain: (binding, group) => /* wgsl */ `
// Weight storage: IEEE binary16, two per u32 word, element i in word i >> 1 (low half first).
@group(${group}) @binding(${binding}) var<storage, read> weight: array<u32>;

fn load_weight(i: u32) -> f32 {
  let word = weight[i >> 1u];
  // unpack2x16float: component 0 is the low 16 bits, component 1 the high 16 bits.
  return unpack2x16float(word)[i & 1u];
}

fn load_weight4(i: u32) -> vec4<f32> {
  return vec4<f32>(load_weight(i), load_weight(i + 1u), load_weight(i + 2u), load_weight(i + 3u));
}
`,
    aligned: (binding, group) => /* wgsl */ `
// Weight storage: IEEE binary16, read as pairs of u32 words (4 elements; load_weight4 indices are
// multiples of 4). Element i is in word (i >> 1) & 1 of group i >> 2, the low half first.
@group(${group}) @binding(${binding}) var<storage, read> weight: array<vec2<u32>>;

fn load_weight(i: u32) -> f32 {
  let word = weight[i >> 2u][(i >> 1u) & 1u];
  return unpack2x16float(word)[i & 1u];
}

fn load_weight4(i: u32) -> vec4<f32> {
  let words = weight[i >> 2u];
  return vec4<f32>(unpack2x16float(words.x), unpack2x16float(words.y));
}
`,
  },
  bf16: {
    plain: (binding, group) => /* wgsl */ `
// Weight storage: bfloat16, two per u32 word, element i in word i >> 1 (low half first).
@group(${group}) @binding(${binding}) var<storage, read> weight: array<u32>;

fn load_weight(i: u32) -> f32 {
  let word = weight[i >> 1u];
  // bf16 is the top half of an f32: move the wanted half into bits 16..31, zero the rest.
  let bits = select(word << 16u, word & 0xffff0000u, (i & 1u) == 1u);
  return bitcast<f32>(bits);
}

fn load_weight4(i: u32) -> vec4<f32> {
  return vec4<f32>(load_weight(i), load_weight(i + 1u), load_weight(i + 2u), load_weight(i + 3u));
}
`,
    aligned: (binding, group) => /* wgsl */ `
// Weight storage: bfloat16, read as pairs of u32 words (4 elements; load_weight4 indices are
// multiples of 4). Element i is in word (i >> 1) & 1 of group i >> 2, the low half first.
@group(${group}) @binding(${binding}) var<storage, read> weight: array<vec2<u32>>;
${BF16_UNPACK2}
fn load_weight(i: u32) -> f32 {
  let word = weight[i >> 2u][(i >> 1u) & 1u];
  return unpack2x16bf(word)[i & 1u];
}

fn load_weight4(i: u32) -> vec4<f32> {
  let words = weight[i >> 2u];
  return vec4<f32>(unpack2x16bf(words.x), unpack2x16bf(words.y));
}
`,
  },
};

/** The sum of v's components. */
const HSUM4 = /* wgsl */ `
fn hsum4(v: vec4<f32>) -> f32 {
  return v.x + v.y + v.z + v.w;
}
`;

/**
 * For the runs of the 32-weight nibble types (Q4_0, Q4_1, Q5_0, Q5_1): weight j < 16 of a block is
 * the low nibble of its quant byte j, weight j + 16 the high nibble, and with fifth bits `high`,
 * bit j of it is weight j's bit 4 (0 for Q4_*).
 */
const NIBBLE_RUN = /* wgsl */ `
const RUN_VEC4S: u32 = 8u;
${HSUM4}
/** x_lo · q(weights 4u .. 4u+3) + x_hi · q(weights 16 + 4u ..), word the quant bytes 4u .. 4u+3. */
fn nibble_word_dot(word: u32, high: u32, u: u32, x_lo: vec4<f32>, x_hi: vec4<f32>) -> vec4<f32> {
  let bit = vec4<u32>(0u, 1u, 2u, 3u);
  let h_lo = ((vec4<u32>(high >> (4u * u)) >> bit) & vec4<u32>(1u)) << vec4<u32>(4u);
  let h_hi = ((vec4<u32>(high >> (16u + 4u * u)) >> bit) & vec4<u32>(1u)) << vec4<u32>(4u);
  return x_lo * vec4<f32>((bytes4(word) & vec4<u32>(15u)) | h_lo) + x_hi * vec4<f32>((bytes4(word >> 4u) & vec4<u32>(15u)) | h_hi);
}

/** sum_j x_j q_j over a block (as 4 partial sums), from its 4 words of quant bytes and its fifth bits. */
fn nibble_block_dot(w0: u32, w1: u32, w2: u32, w3: u32, high: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> vec4<f32> {
  return nibble_word_dot(w0, high, 0u, xs[0], xs[4]) + nibble_word_dot(w1, high, 1u, xs[1], xs[5]) +
         nibble_word_dot(w2, high, 2u, xs[2], xs[6]) + nibble_word_dot(w3, high, 3u, xs[3], xs[7]);
}

/** sum_j x_j over the run. */
fn run_sum(xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  return hsum4(xs[0] + xs[1] + xs[2] + xs[3] + xs[4] + xs[5] + xs[6] + xs[7]);
}
`;

/**
 * Runs: `fn dot_run(i, xs) -> f32`, the dot product of the RUN_VEC4S * 4 weights from i (a
 * multiple of that) with xs, for kernels that walk a row a run at a time (matvec.wgsl and the
 * fused matvec on CPU adapters, Kernels.usesWeightRuns). A run of a 32-weight block type (Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1) is one block: its scales are loaded and widened once and its quants are
 * read a word at a time (9 loads a Q8_0 block and 5 a Q4_0 one, where 8 load_weight4 calls take
 * 16); offsets and mins are applied to the run's sum of x. A K-quant's run is a sub-block of 32
 * (see below). Other types run 4 weights.
 */
const DOT_RUN: Partial<Record<WeightDType, string>> = {
  q8_0: /* wgsl */ `
const RUN_VEC4S: u32 = 8u;
${HSUM4}
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let b = i >> 5u;
  let quants = (b >> 1u) * 17u + 1u + (b & 1u) * 8u;
  var s = vec4<f32>();
  for (var u = 0u; u < RUN_VEC4S; u++) {
    s += xs[u] * vec4<f32>(bytes4_i8(weight[quants + u]));
  }
  return q8_0_scale(b >> 1u, b & 1u) * hsum4(s);
}
`,
  q4_0: /* wgsl */ `
${NIBBLE_RUN}
// sum_j x_j (q_j - 8) = sum_j x_j q_j - 8 sum_j x_j: the offset is applied once.
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let b = i >> 5u;
  let quants = (b >> 1u) * 9u + 1u + (b & 1u) * 4u;
  let s = nibble_block_dot(weight[quants], weight[quants + 1u], weight[quants + 2u], weight[quants + 3u], 0u, xs);
  return q4_0_scale(b >> 1u, b & 1u) * (hsum4(s) - 8.0 * run_sum(xs));
}
`,
  q4_1: /* wgsl */ `
${NIBBLE_RUN}
// 5 words a block: (d, m), then the nibbles. sum_j x_j (d q_j + m) = d sum_j x_j q_j + m sum_j x_j.
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let blk = (i >> 5u) * 5u;
  let dm = unpack2x16float(weight[blk]);
  let s = nibble_block_dot(weight[blk + 1u], weight[blk + 2u], weight[blk + 3u], weight[blk + 4u], 0u, xs);
  return dm.x * hsum4(s) + dm.y * run_sum(xs);
}
`,
  q5_1: /* wgsl */ `
${NIBBLE_RUN}
// 6 words a block: (d, m), the fifth bits, then the nibbles.
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let blk = (i >> 5u) * 6u;
  let dm = unpack2x16float(weight[blk]);
  let s = nibble_block_dot(weight[blk + 2u], weight[blk + 3u], weight[blk + 4u], weight[blk + 5u], weight[blk + 1u], xs);
  return dm.x * hsum4(s) + dm.y * run_sum(xs);
}
`,
  q5_0: /* wgsl */ `
${NIBBLE_RUN}
// 22-byte blocks, only 2-byte aligned: d, the fifth bits and the nibbles through load_u32_at.
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let blk = (i >> 5u) * 22u;
  let s = nibble_block_dot(load_u32_at(blk + 6u), load_u32_at(blk + 10u), load_u32_at(blk + 14u), load_u32_at(blk + 18u),
                           load_u32_at(blk + 2u), xs);
  return load_f16(blk) * (hsum4(s) - 16.0 * run_sum(xs));
}
`,
};

// A run of a K-quant is one sub-block of 32 weights, whose 6-bit scale and min (Q4_K, Q5_K) or two
// int8 scales (Q6_K) and the block's d (and dmin) are decoded once:
// sum_j x_j (d sc q_j - dmin m) = d sc (sum_j x_j q_j) - dmin m (sum_j x_j).
/**
 * Q4_K's and Q5_K's dot_run: blocks of `blockWords` words, the nibbles of sub-block pair s / 2 from
 * word `quantsWord` of the block (8 words a pair), and for Q5_K the fifth bits from word
 * `highBitsWord` (bit s of byte l is weight l's).
 */
const K_QUANT_DOT_RUN = (blockWords: number, quantsWord: number, highBitsWord?: number) => /* wgsl */ `
const RUN_VEC4S: u32 = 8u;
${HSUM4}
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let blk = (i >> 8u) * ${blockWords}u; // the block's first word
  let s = (i >> 5u) & 7u;
  let d = unpack2x16float(weight[blk]); // (d, dmin)
  let sm = k_scale_min(blk * 4u + 4u, s);
  let quants = blk + ${quantsWord}u + ((s >> 1u) << 3u);
  let shift = (s & 1u) << 2u;
  var dot_q = vec4<f32>();
  var sum_x = vec4<f32>();
  for (var u = 0u; u < RUN_VEC4S; u++) {
    var q = bytes4(weight[quants + u] >> shift) & vec4<u32>(15u);
${highBitsWord === undefined ? '' : `    q |= (bytes4(weight[blk + ${highBitsWord}u + u] >> s) & vec4<u32>(1u)) << vec4<u32>(4u);
`}    dot_q += xs[u] * vec4<f32>(q);
    sum_x += xs[u];
  }
  return d.x * sm.x * hsum4(dot_q) - d.y * sm.y * hsum4(sum_x);
}
`;
DOT_RUN.q4_k = K_QUANT_DOT_RUN(36, 4); // 144-byte blocks: d, dmin, 12 scale bytes, 128 of nibbles
DOT_RUN.q5_k = K_QUANT_DOT_RUN(44, 12, 4); // 176-byte blocks: as Q4_K with 32 bytes of fifth bits before the nibbles
// Q6_K blocks (210 bytes) are only 2-byte aligned: every other one starts mid-word. The run's 32
// bytes of low nibbles and of high bits are read as 9 words each, every word serving two
// neighbouring 4-byte groups (load_u32_at would read 2 words for each group).
DOT_RUN.q6_k = /* wgsl */ `
const RUN_VEC4S: u32 = 8u;
${HSUM4}
fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  let blk = (i >> 8u) * 210u;
  let e = i & 255u;
  let n = e >> 7u;
  let g = (e >> 5u) & 3u;
  let shift = (blk & 3u) << 3u; // 0 or 16 bits: every offset below is a multiple of 4 from blk
  let ql = (blk + (n << 6u) + ((g & 1u) << 5u)) >> 2u;
  let ql_shift = (g >> 1u) << 2u;
  let qh = (blk + 128u + (n << 5u)) >> 2u;
  let qh_shift = g << 1u;
  // Weights 0..15 of the run take scale 2g of half n, 16..31 the next one.
  var dot_lo = vec4<f32>();
  var dot_hi = vec4<f32>();
  var ql_prev = weight[ql];
  var qh_prev = weight[qh];
  for (var u = 0u; u < RUN_VEC4S; u++) {
    // (The word after a run's last is still in the block: the scales and d follow.)
    let ql_next = weight[ql + u + 1u];
    let qh_next = weight[qh + u + 1u];
    let low = bytes4(join_u32(ql_prev, ql_next, shift) >> ql_shift) & vec4<u32>(15u);
    let high = bytes4(join_u32(qh_prev, qh_next, shift) >> qh_shift) & vec4<u32>(3u);
    ql_prev = ql_next;
    qh_prev = qh_next;
    let q = xs[u] * vec4<f32>(vec4<i32>(low | (high << vec4<u32>(4u))) - vec4<i32>(32));
    if (u < RUN_VEC4S / 2u) {
      dot_lo += q;
    } else {
      dot_hi += q;
    }
  }
  let sc = blk + 192u + (n << 3u) + (g << 1u);
  return load_f16(blk + 208u) * (f32(load_i8(sc)) * hsum4(dot_lo) + f32(load_i8(sc + 1u)) * hsum4(dot_hi));
}
`;

const DOT_RUN_OF_4 = /* wgsl */ `
const RUN_VEC4S: u32 = 1u;

fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  return dot(xs[0], load_weight4(i));
}
`;

/** Weights one dot_run covers in `dtype` (see DOT_RUN). */
export function weightRunLength(dtype: WeightDType): number {
  return DOT_RUN[dtype] ? 32 : 4;
}

/**
 * The WGSL that declares `weight` at (group, binding) and defines `fn load_weight(i: u32) -> f32`,
 * `fn load_weight4(i: u32) -> vec4<f32>` and `fn dot_run` (with `const RUN_VEC4S`, see DOT_RUN)
 * for `dtype`. With `aligned`, load_weight4 must only be called with multiples of 4 (and the
 * buffer holds a multiple of 4 elements).
 */
export function weightFormatWgsl(dtype: WeightDType, binding: number, group = 0, aligned = false): string {
  const run = DOT_RUN[dtype] ?? DOT_RUN_OF_4;
  // Quantized types have one layout: their rows are whole blocks, so always "aligned".
  if (isQuantized(dtype)) return QUANT_PRELUDE(binding, group) + QUANT_LOAD_WEIGHT[dtype] + run;
  const loader = Object.hasOwn(LOADERS, dtype) ? LOADERS[dtype as keyof typeof LOADERS] : undefined;
  if (!loader) throw new Error(`unsupported weight dtype: ${String(dtype)}`);
  return (aligned ? loader.aligned : loader.plain)(binding, group) + run;
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
