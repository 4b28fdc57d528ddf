// The WGSL of ggml's block-quantized weight types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K):
// each type's `load_weight` / `load_weight4` and `dot_run`, the half of the snippet contract in
// weight-formats.ts that decodes blocks. The byte layouts themselves are in weight-layout.ts.
//
// These types keep the file's blocks as they are: the buffer is the raw bytes read as array<u32>.
// Blocks are only 2-byte aligned (a Q5_0 block is 22 bytes), so the snippets pick bytes and f16
// halves out of words with shifts at any offset (`load_byte(b)`, `load_f16(b)`), and
// `load_weight(i)` decodes element i from its block (block i / 32, or i / 256 for the K-quants;
// every row is a whole number of blocks).
//
// Q8_0 and Q4_0 are stored in pairs of blocks instead (isPairedQuant, pairQuantBlocks): the two
// f16 scales first, then the two blocks' quants, so a pair (68 / 36 bytes, the same as two file
// blocks) is whole words and every load is one aligned word: 4 weights cost 2 loads (scale, quants)
// instead of 3-4 with the shifts of unaligned reads. An odd last block is a half pair (its scale,
// 2 bytes of padding, its quants): the same size as the file's blocks padded to words.
// Measurements: docs/tuning.md#weight-formats
import type { QuantDType } from './tensor.ts';

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
 * (see below). (f32, f16 and bf16 run 4 weights: weight-formats.ts.)
 */
const BLOCK_DOT_RUN: Record<'q8_0' | 'q4_0' | 'q4_1' | 'q5_0' | 'q5_1', string> = {
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

// Q6_K blocks (210 bytes) are only 2-byte aligned: every other one starts mid-word. The run's 32
// bytes of low nibbles and of high bits are read as 9 words each, every word serving two
// neighbouring 4-byte groups (load_u32_at would read 2 words for each group).
const Q6_K_DOT_RUN = /* wgsl */ `
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

/** dot_run of each quantized type (see BLOCK_DOT_RUN). */
const QUANT_DOT_RUN: Record<QuantDType, string> = {
  ...BLOCK_DOT_RUN,
  q4_k: K_QUANT_DOT_RUN(36, 4), // 144-byte blocks: d, dmin, 12 scale bytes, 128 of nibbles
  q5_k: K_QUANT_DOT_RUN(44, 12, 4), // 176-byte blocks: as Q4_K with 32 bytes of fifth bits before the nibbles
  q6_k: Q6_K_DOT_RUN,
};

/** Weights one quantized dot_run covers: a 32-weight block, or a K-quant's 32-weight sub-block. */
export const QUANT_RUN_LENGTH = 32;

/**
 * The quantized half of weightFormatWgsl: `weight` at (group, binding) as raw words, the prelude's
 * byte helpers, and `dtype`'s load_weight, load_weight4 and dot_run (runs of QUANT_RUN_LENGTH).
 */
export function quantWeightWgsl(dtype: QuantDType, binding: number, group: number): string {
  return QUANT_PRELUDE(binding, group) + QUANT_LOAD_WEIGHT[dtype] + QUANT_DOT_RUN[dtype];
}
