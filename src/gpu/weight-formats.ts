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
// ggml's block-quantized types have their own snippets (weight-formats-quant.ts); the byte layout
// of every type (block shapes, buffer sizes) is weight-layout.ts, re-exported here as the one
// entry for weight types.
import type { WeightDType } from './tensor.ts';
import { QUANT_RUN_LENGTH, quantWeightWgsl } from './weight-formats-quant.ts';
import { isQuantized } from './weight-layout.ts';
export {
  QUANT_FORMATS,
  checkWeightShape,
  isPairedQuant,
  isQuantized,
  pairQuantBlocks,
  splitMatrixRows,
  weightBlockSize,
  weightByteSize,
  weightRowBytes,
} from './weight-layout.ts';

/** WGSL that widens a packed pair of bf16 (low half first) to a vec2<f32>. */
const BF16_UNPACK2 = /* wgsl */ `
fn unpack2x16bf(word: u32) -> vec2<f32> {
  // bf16 is the top half of an f32: the low half shifted up, the high half with its low bits cleared.
  return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}
`;

type Loader = (binding: number, group: number) => string;

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

/** dot_run of f32, f16 and bf16: one load_weight4 (quantized types run a block: weight-formats-quant.ts). */
const DOT_RUN_OF_4 = /* wgsl */ `
const RUN_VEC4S: u32 = 1u;

fn dot_run(i: u32, xs: array<vec4<f32>, RUN_VEC4S>) -> f32 {
  return dot(xs[0], load_weight4(i));
}
`;

/** Weights one dot_run covers in `dtype`. */
export function weightRunLength(dtype: WeightDType): number {
  return isQuantized(dtype) ? QUANT_RUN_LENGTH : 4;
}

/**
 * The WGSL that declares `weight` at (group, binding) and defines `fn load_weight(i: u32) -> f32`,
 * `fn load_weight4(i: u32) -> vec4<f32>` and `fn dot_run` (with `const RUN_VEC4S`)
 * for `dtype`. With `aligned`, load_weight4 must only be called with multiples of 4 (and the
 * buffer holds a multiple of 4 elements).
 */
export function weightFormatWgsl(dtype: WeightDType, binding: number, group = 0, aligned = false): string {
  // Quantized types have one layout: their rows are whole blocks, so always "aligned".
  if (isQuantized(dtype)) return quantWeightWgsl(dtype, binding, group);
  const loader = Object.hasOwn(LOADERS, dtype) ? LOADERS[dtype as keyof typeof LOADERS] : undefined;
  if (!loader) throw new Error(`unsupported weight dtype: ${String(dtype)}`);
  return (aligned ? loader.aligned : loader.plain)(binding, group) + DOT_RUN_OF_4;
}
