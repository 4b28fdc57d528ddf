// The kernels of one thread per element or row: rmsnorm.wgsl, rope.wgsl, swiglu.wgsl,
// residual.wgsl, softcap.wgsl and kv_cache.wgsl (the K/V append).
import type { ShaderSpec } from '../pipelines.ts';
import { paramStruct } from '../uniforms.ts';
import { positionWgsl, replaceOnceWgsl, SEGMENT_WGSL, type PositionSource } from './wgsl.ts';
import rmsnormWgsl from '../../../shaders/rmsnorm.wgsl?raw';
import ropeWgsl from '../../../shaders/rope.wgsl?raw';
import swigluWgsl from '../../../shaders/swiglu.wgsl?raw';
import softcapWgsl from '../../../shaders/softcap.wgsl?raw';
import residualWgsl from '../../../shaders/residual.wgsl?raw';
import kvCacheWgsl from '../../../shaders/kv_cache.wgsl?raw';
import sinCosWgsl from '../../../shaders/sin_cos.wgsl?raw';
import geluTanhWgsl from '../../../shaders/gelu_tanh.wgsl?raw';
import f16BitsWgsl from '../../../shaders/f16_bits.wgsl?raw';

/** Element type of a KV cache: 'f16' packs two halves a u32 word (no shader-f16 needed). */
export type KvDType = 'f16' | 'f32';

// Workgroup shapes; each must match its shader's constants.
export const ELEMENTWISE_WORKGROUP = 256; // embedding, rope, swiglu, residual, softcap: one invocation per element

/**
 * The activation of a gated feed-forward's gate: out = act(gate) * up. 'silu' (SwiGLU: Llama,
 * Qwen, Phi-3) or 'gelu_tanh' (GeGLU with torch's tanh-approximated GELU, HF gelu_pytorch_tanh: Gemma).
 */
export type GatedActivation = 'silu' | 'gelu_tanh';

/** `const GELU_TANH: bool` (whether a gating kernel takes gelu_tanh rather than silu) and gelu_tanh.wgsl. */
export function gatedActivationWgsl(activation: GatedActivation): string {
  return `const GELU_TANH: bool = ${activation === 'gelu_tanh'};\n${geluTanhWgsl}\n`;
}

/** Throws unless `activation` is a GatedActivation. */
export function checkGatedActivation(activation: GatedActivation, what: string): void {
  if (activation !== 'silu' && activation !== 'gelu_tanh') throw new Error(`${what}: unknown gated activation ${String(activation)}`);
}

// Kernels whose source does not depend on the weights.
export const FIXED_KERNELS = {
  swiglu: { code: `${geluTanhWgsl}\n${swigluWgsl}`, entryPoint: 'main' },
  swiglu_gelu_tanh: { code: `${geluTanhWgsl}\n${swigluWgsl}`, entryPoint: 'gelu_tanh_main' },
  add: { code: residualWgsl, entryPoint: 'add' },
  add_in_place: { code: residualWgsl, entryPoint: 'add_in_place' },
  softcap: { code: softcapWgsl, entryPoint: 'main' },
} satisfies Record<string, ShaderSpec>;
export type FixedKernel = keyof typeof FIXED_KERNELS;

// Kernels that take a position, each compiled for both position sources.
// (Their sources include the snippets they call: sin_cos.wgsl, f16_bits.wgsl.)
export const POSITIONAL_KERNELS = {
  rope: { code: `${sinCosWgsl}\n${ropeWgsl}`, entryPoint: 'main' },
  write_kv: { code: `${f16BitsWgsl}\n${kvCacheWgsl}`, entryPoint: 'write_kv' },
  write_kv_f32: { code: `${f16BitsWgsl}\n${kvCacheWgsl}`, entryPoint: 'write_kv_f32' },
} satisfies Record<string, ShaderSpec>;
export type PositionalKernel = keyof typeof POSITIONAL_KERNELS;
/** `ring`: the K/V write's caches are a ring of that many rows (kvWriteIndexWgsl); its key part /ring<rows>. */
export const positionalKey = (name: PositionalKernel, source: PositionSource, ring?: number) =>
  `${name}/pos_${source}` + (ring === undefined ? '' : `/ring${ring}`);
export const positionalSpec = (name: PositionalKernel, source: PositionSource, ring?: number): ShaderSpec => ({
  code: `${positionWgsl(source)}\n${name === 'rope' ? '' : kvWriteIndexWgsl(ring)}${POSITIONAL_KERNELS[name].code}`,
  entryPoint: POSITIONAL_KERNELS[name].entryPoint,
});

/**
 * rope.wgsl for a packed pass (TokenSpan.segments): token t's position is its cache row
 * start_pos() + t less the first row of its input, token_segment[t]. The uniform position source only.
 */
export const PACKED_ROPE_KEY = 'rope/pos_uniform/packed';
export const packedRopeSpec = (): ShaderSpec => {
  const plain = positionalSpec('rope', 'uniform');
  const code = replaceOnceWgsl(plain.code, 'f32(start_pos() + t)', 'f32(start_pos() + t - token_segment[t])');
  return { code: SEGMENT_WGSL + code, entryPoint: plain.entryPoint };
};

/**
 * kv_cache.wgsl's `fn cache_index(i: u32) -> u32`: where word (or float) i of the T rows goes,
 * from row start_pos(); with a ring of `ringRows` rows, position p's row is p mod ringRows.
 */
export function kvWriteIndexWgsl(ringRows: number | undefined): string {
  return ringRows === undefined
    ? 'fn cache_index(i: u32) -> u32 { return start_pos() * params.row_len + i; }\n'
    : `fn cache_index(i: u32) -> u32 { return ((start_pos() + i / params.row_len) % ${ringRows}u) * params.row_len + i % params.row_len; }\n`;
}

/** The element type prefix of rmsnorm.wgsl: vec4 loads when every row starts 16-byte aligned. */
export function rmsNormWidthWgsl(aligned: boolean): string {
  return aligned
    ? `alias V = vec4<f32>;\nconst WIDTH: u32 = 4u;\nfn hsum(v: V) -> f32 { return v.x + v.y + v.z + v.w; }\n`
    : `alias V = f32;\nconst WIDTH: u32 = 1u;\nfn hsum(v: V) -> f32 { return v; }\n`;
}

/**
 * rmsnorm.wgsl's x and out: `load_x` of x at binding 2 and `store_out` to out at binding 1, or
 * (inPlace) both on the one read_write buffer at binding 1.
 */
export function rmsNormIoWgsl(inPlace: boolean): string {
  return inPlace
    ? '@group(0) @binding(1) var<storage, read_write> xo: array<V>;\n' +
        'fn load_x(i: u32) -> V { return xo[i]; }\nfn store_out(i: u32, v: V) { xo[i] = v; }\n'
    : '@group(0) @binding(1) var<storage, read_write> out: array<V>;\n@group(0) @binding(2) var<storage, read> x: array<V>;\n' +
        'fn load_x(i: u32) -> V { return x[i]; }\nfn store_out(i: u32, v: V) { out[i] = v; }\n';
}

export type RmsNormVariant = { entry: 'per_row' | 'per_workgroup'; aligned: boolean; inPlace?: boolean };
export const rmsNormKey = (v: RmsNormVariant) => `rmsnorm/${v.entry}/${v.aligned ? 'vec4' : 'scalar'}${v.inPlace ? '/in_place' : ''}`;
export const rmsNormSpec = (v: RmsNormVariant): ShaderSpec => ({
  code: `${rmsNormWidthWgsl(v.aligned)}${rmsNormIoWgsl(!!v.inPlace)}\n${rmsnormWgsl}`,
  entryPoint: v.entry,
});

/**
 * How RoPE pairs the dimensions of a head: llama.cpp's GGUF (rows of Wq/Wk permuted at conversion)
 * rotates adjacent pairs (x[2i], x[2i+1]); Hugging Face Llama rotates halves (x[i], x[i + d/2]).
 */
export type RopePairing = 'adjacent' | 'halves';
/** How RoPE rotates a head: which elements pair up, how many rotate, and by what the rotation is scaled. */
export interface RopeRotation {
  /** Which elements of a head RoPE rotates together. */
  readonly pairing: RopePairing;
  /**
   * Only the first rotaryDims elements of each head rotate (even, <= headDim; default headDim:
   * all), the rest pass through (HF partial_rotary_factor, llama.cpp rope n_dims < head_dim).
   * invFreq then holds rotaryDims / 2 values; 'halves' pairs i with i + rotaryDims / 2,
   * 'adjacent' 2i with 2i + 1, both inside the rotated part.
   */
  readonly rotaryDims?: number;
  /** cos and sin times this (LongRoPE's attention factor); default 1. */
  readonly magnitude?: number;
}
/** The heads rope() rotates in each token: `heads` of headDim elements, rotated as RopeRotation says. */
export interface RopeShape extends RopeRotation {
  readonly heads: number;
  readonly headDim: number;
}

/** The rotated elements a head and the rotation's factor of `rotation`, checked against headDim. */
export function ropeParams(rotation: RopeRotation, headDim: number, what: string): { rotaryDims: number; magnitude: number } {
  const rotaryDims = rotation.rotaryDims ?? headDim;
  const magnitude = rotation.magnitude ?? 1;
  if (!Number.isInteger(rotaryDims) || rotaryDims < 2 || rotaryDims > headDim || rotaryDims % 2 !== 0) {
    throw new Error(`${what} rotaryDims must be an even integer in 2 ..= headDim (${headDim}), got ${rotaryDims}`);
  }
  if (!(Number.isFinite(magnitude) && magnitude > 0)) throw new Error(`${what} magnitude must be a positive number, got ${magnitude}`);
  return { rotaryDims, magnitude };
}
/** The `pairing` parameter of rope.wgsl and the decode kernels. */
export const ropePairingCode = (pairing: RopePairing): number => (pairing === 'adjacent' ? 0 : 1);

/** rmsnorm.wgsl's Params. */
export const RMSNORM_PARAMS = paramStruct({ T: 'u32', dim: 'u32', eps: 'f32' });
/** rope.wgsl's Params. */
export const ROPE_PARAMS = paramStruct({
  T: 'u32',
  num_heads: 'u32',
  head_dim: 'u32',
  start_pos: 'u32',
  pairing: 'u32',
  rotary_dims: 'u32',
  magnitude: 'f32',
});
/** swiglu.wgsl's Params. */
export const SWIGLU_PARAMS = paramStruct({ n: 'u32' });
/** softcap.wgsl's Params. */
export const SOFTCAP_PARAMS = paramStruct({ n: 'u32', cap: 'f32' });
/** residual.wgsl's Params. */
export const RESIDUAL_PARAMS = paramStruct({ n: 'u32' });
/** kv_cache.wgsl's Params. */
export const KV_WRITE_PARAMS = paramStruct({ n: 'u32', start_pos: 'u32', row_len: 'u32' });
