// How a kernel reads a weight element, per storage type.
//
// The matmul, matvec and embedding kernels never touch the weight buffer directly: they call
// `load_weight(i)`, the i-th element of the row-major weight matrix as f32. This file supplies the
// WGSL that declares the weight binding and defines `load_weight` for one storage type; it is
// prepended to the kernel's source when its pipeline is created (WGSL lets module-scope
// declarations appear in any order), so each kernel is written once for every dtype.
//
// f16 and bf16 are packed two per u32 (element i lives in word i >> 1, the low half first, as the
// little-endian bytes of a 2-byte array read as u32 words) and widened to f32 in the shader: no
// kernel needs the optional `shader-f16` feature.
import type { WeightDType } from './tensor.ts';

const LOADERS: Record<WeightDType, (binding: number, group: number) => string> = {
  f32: (binding, group) => /* wgsl */ `
// Weight storage: f32, one element per array slot.
@group(${group}) @binding(${binding}) var<storage, read> weight: array<f32>;

fn load_weight(i: u32) -> f32 {
  return weight[i];
}
`,
  f16: (binding, group) => /* wgsl */ `
// Weight storage: IEEE binary16, two per u32 word, element i in word i >> 1 (low half first).
@group(${group}) @binding(${binding}) var<storage, read> weight: array<u32>;

fn load_weight(i: u32) -> f32 {
  let word = weight[i >> 1u];
  // unpack2x16float: component 0 is the low 16 bits, component 1 the high 16 bits.
  return unpack2x16float(word)[i & 1u];
}
`,
  bf16: (binding, group) => /* wgsl */ `
// Weight storage: bfloat16, two per u32 word, element i in word i >> 1 (low half first).
@group(${group}) @binding(${binding}) var<storage, read> weight: array<u32>;

fn load_weight(i: u32) -> f32 {
  let word = weight[i >> 1u];
  // bf16 is the top half of an f32: move the wanted half into bits 16..31, zero the rest.
  let bits = select(word << 16u, word & 0xffff0000u, (i & 1u) == 1u);
  return bitcast<f32>(bits);
}
`,
};

/** The WGSL that declares `weight` at (group, binding) and defines `fn load_weight(i: u32) -> f32` for `dtype`. */
export function weightFormatWgsl(dtype: WeightDType, binding: number, group = 0): string {
  const loader = LOADERS[dtype];
  if (!loader) throw new Error(`unsupported weight dtype: ${String(dtype)}`);
  return loader(binding, group);
}

/** Bytes a weight buffer of `elements` elements takes in `dtype`, padded to whole u32 words. */
export function weightByteSize(dtype: WeightDType, elements: number): number {
  return dtype === 'f32' ? elements * 4 : Math.ceil(elements / 2) * 4;
}
