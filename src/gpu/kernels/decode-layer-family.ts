// The family features of the decode layer kernel (decode_layer.wgsl): what a layer of Qwen3,
// SmolLM3, Phi-3, Phi-4-mini or Gemma adds to the plain Llama block, each a compile-time variant
// whose code replaces decode_layer.wgsl's or the decode attention's functions of the same names
// (decode_layer_family.wgsl and the snippets below), and their constants' places in the state
// buffer. With no feature on nothing here is composed: a Llama layer's shader and key are
// decode_layer.wgsl's alone.
import geluTanhWgsl from '../../../shaders/gelu_tanh.wgsl?raw';
import decodeLayerFamilyWgsl from '../../../shaders/decode_layer_family.wgsl?raw';
import { takeWgslFunctions } from './wgsl.ts';

/** What decode_layer.wgsl runs beyond the Llama block (every field optional, off by default). */
export interface DecodeLayerFeatures {
  /** Qwen3, Gemma 3: each q and k head RMS-normalized before RoPE (γ_q, γ_k [headDim] in the layer's constants; eps the layer's). */
  qkNorm?: boolean;
  /**
   * Each layer's own RoPE: its inverse frequencies (all zeros: no RoPE, as SmolLM3's NoPE layers),
   * rotated elements a head and magnitude (Phi-3's LongRoPE factor, Phi-4-mini's partial rotation),
   * in its constants, rather than one table for every layer.
   */
  layerRope?: boolean;
  /** Each layer's own sliding window (Gemma's local and global layers), in its constants. */
  layerWindow?: boolean;
  /** Gemma 2: score = cap·tanh(score / cap) (the cap in the model constants). */
  attentionSoftcap?: boolean;
  /** Gemma: RMSNorms of the attention's and the feed-forward's outputs before their residual adds. */
  postNorms?: boolean;
  /** Gemma: GeGLU, gelu_tanh(gate) * up, rather than SwiGLU. */
  geluTanh?: boolean;
  /** Gemma: the token's embedding times a scale (the model constants), where the dispatch embeds it. */
  embeddingScale?: boolean;
  /** Gemma 2: logits = cap·tanh(logits / cap), where the dispatch computes them. */
  logitSoftcap?: boolean;
  /** Sliding-window layers whose caches are rings (KvCache.rings): position j at row j mod the layer's ring rows (0: not a ring). */
  ring?: boolean;
}

const FEATURE_KEYS: Record<keyof DecodeLayerFeatures, string> = {
  qkNorm: 'qk_norm',
  layerRope: 'layer_rope',
  layerWindow: 'layer_window',
  attentionSoftcap: 'softcap',
  postNorms: 'post_norms',
  geluTanh: 'gelu_tanh',
  embeddingScale: 'emb_scale',
  logitSoftcap: 'logit_softcap',
  ring: 'ring',
};

/** The pipeline key's part of the features on ('' with none: Llama's key as it was). */
export function decodeLayerFeaturesKey(f: DecodeLayerFeatures | undefined): string {
  if (!f) return '';
  return (Object.keys(FEATURE_KEYS) as (keyof DecodeLayerFeatures)[])
    .filter((k) => f[k])
    .map((k) => `/${FEATURE_KEYS[k]}`)
    .join('');
}

export function anyDecodeLayerFeature(f: DecodeLayerFeatures | undefined): boolean {
  return decodeLayerFeaturesKey(f) !== '';
}

/**
 * Where the features' constants sit in the state buffer: per layer, after its [γ_attn | γ_ffn |
 * bq | bk | bv] (offsets from the layer's constants, -1 when absent), and the model's at `model`.
 */
export interface DecodeLayerFeatureLayout {
  /** γ_q, γ_k: [headDim] each. */
  qNorm: number;
  kNorm: number;
  /** γ_post_attn, γ_post_ffn: [dim] each. */
  postAttn: number;
  postFfn: number;
  /** The layer's RoPE inverse frequencies, [headDim / 2] (zeros past its rotaryDims / 2, and all zeros without RoPE). */
  freq: number;
  /** A vec4 of the layer: u32 window (0: none), u32 rotary dims, f32 RoPE magnitude, u32 ring rows (0: no ring). */
  ext: number;
  /** Floats the features add to a layer's constants. */
  layerFloats: number;
  /** The model's vec4: f32 embedding scale, attention soft-cap, logit soft-cap, 0 (absolute; -1: absent). */
  model: number;
}

const up4 = (n: number) => Math.ceil(n / 4) * 4;

/** The features' places within a layer's constants, from `base` (the floats the Llama block's take, a multiple of 4). */
export function decodeLayerFeatureLayout(f: DecodeLayerFeatures, base: number, dim: number, headDim: number): Omit<DecodeLayerFeatureLayout, 'model'> {
  let at = base;
  const take = (on: boolean | undefined, floats: number) => {
    if (!on) return -1;
    const start = at;
    at += up4(floats);
    return start;
  };
  const qNorm = take(f.qkNorm, headDim);
  const kNorm = take(f.qkNorm, headDim);
  const postAttn = take(f.postNorms, dim);
  const postFfn = take(f.postNorms, dim);
  const freq = take(f.layerRope, headDim / 2);
  const ext = take(f.layerRope || f.layerWindow || f.ring, 4);
  return { qNorm, kNorm, postAttn, postFfn, freq, ext, layerFloats: at - base };
}

/** Whether the features need the model's constants vec4. */
export function needsModelConstants(f: DecodeLayerFeatures): boolean {
  return !!(f.embeddingScale || f.attentionSoftcap || f.logitSoftcap);
}

/** `code` with the functions `defs` defines taken out of it, and `defs` after it. */
export function replaceWgslFunctions(code: string, defs: string): string {
  const names = [...defs.matchAll(/^fn\s+(\w+)/gm)].map((m) => m[1]);
  return `${takeWgslFunctions(code, names).rest}\n${defs}`;
}

/** The model constants' vec4 (MODEL0: its float index). */
const modelConst = (c: 'x' | 'y' | 'z') => `st[MODEL0 / 4u].${c}`;
/** The layer's ext vec4. */
const EXT = 'st[(cur.consts + LAYER_EXT) >> 2u]';

/**
 * The decode attention's helpers (decodeAttentionHelpersWgsl with no features, and online_softmax's
 * first_key) with the features' versions of their functions: the layer's q/k norm gammas, RoPE
 * table, rotated dims and magnitude, window, and the soft-capped score.
 */
export function decodeLayerAttentionFeaturesWgsl(helpers: string, f: DecodeLayerFeatures, l: DecodeLayerFeatureLayout): string {
  let code = helpers;
  let defs = '';
  if (f.qkNorm) {
    const before = code;
    code = code.replace('const QK_NORM: bool = false;', 'const QK_NORM: bool = true;');
    if (code === before) throw new Error('decode_layer.wgsl: the decode attention helpers no longer declare QK_NORM');
    defs +=
      `const LAYER_Q_NORM: u32 = ${l.qNorm}u;\nconst LAYER_K_NORM: u32 = ${l.kNorm}u;\n` +
      'fn q_gamma(e: u32) -> f32 { return st[(cur.consts + LAYER_Q_NORM + e) >> 2u][e & 3u]; }\n' +
      'fn k_gamma(e: u32) -> f32 { return st[(cur.consts + LAYER_K_NORM + e) >> 2u][e & 3u]; }\n' +
      'fn qk_eps() -> f32 { return params.eps; }\n';
  }
  if (l.ext >= 0) defs += `const LAYER_EXT: u32 = ${l.ext}u;\n`;
  if (f.layerRope) {
    defs +=
      `const LAYER_FREQ: u32 = ${l.freq}u;\n` +
      'fn load_inv_freq(d: u32) -> f32 { return st[(cur.consts + LAYER_FREQ + d) >> 2u][d & 3u]; }\n' +
      `fn rope_dims() -> u32 { return bitcast<u32>(${EXT}.y); }\n` +
      `fn rope_magnitude() -> f32 { return ${EXT}.z; }\n`;
  }
  if (f.layerWindow) {
    defs +=
      'fn first_key(pos: u32) -> u32 {\n' +
      `  let window = bitcast<u32>(${EXT}.x);\n` +
      '  if (window == 0u || pos < window) {\n    return 0u;\n  }\n  return pos + 1u - window;\n}\n';
  }
  if (f.ring) {
    // One chunk of every position (params.chunk_keys: the positions), so slot_chunk stays the slot.
    defs += `fn kv_row(j: u32) -> u32 {\n  let rows = bitcast<u32>(${EXT}.w);\n  if (rows == 0u) {\n    return j;\n  }\n  return j % rows;\n}\n`;
  }
  if (f.attentionSoftcap) {
    defs += `fn cap_score(s: f32) -> f32 { let cap = ${modelConst('y')}; return cap * tanh(clamp(s / cap, -15.0, 15.0)); }\n`;
  }
  return defs ? replaceWgslFunctions(code, defs) : code;
}

/** decode_layer.wgsl with decode_layer_family.wgsl's functions in place of its own, and their constants. */
export function decodeLayerBodyWgsl(layerWgsl: string, f: DecodeLayerFeatures, l: DecodeLayerFeatureLayout, block: number): string {
  const consts =
    `const POST_NORMS: bool = ${!!f.postNorms};\nconst GELU_TANH: bool = ${!!f.geluTanh};\n` +
    `const BLOCK0: u32 = ${Math.max(block, 0)}u;\nconst POST_ATTN: u32 = ${Math.max(l.postAttn, 0)}u;\nconst POST_FFN: u32 = ${Math.max(l.postFfn, 0)}u;\n`;
  // load_inv_freq is decode_layer.wgsl's; the layer's table replaces it (decodeLayerAttentionFeaturesWgsl).
  const body = f.layerRope ? takeWgslFunctions(layerWgsl, ['load_inv_freq']).rest : layerWgsl;
  return `${consts}${geluTanhWgsl}\n${replaceWgslFunctions(body, decodeLayerFamilyWgsl)}`;
}

/** The embedding's scale, or '' (decodeEmbeddingWgsl multiplies by it). */
export function embeddingScaleWgsl(f: DecodeLayerFeatures | undefined): string {
  return f?.embeddingScale ? ` * ${modelConst('x')}` : '';
}

/** The logits' soft-cap of `y` (a vec4), or y. */
export function logitCapWgsl(f: DecodeLayerFeatures | undefined, y: string): string {
  return f?.logitSoftcap ? `${modelConst('z')} * tanh(clamp(${y} / ${modelConst('z')}, vec4<f32>(-15.0), vec4<f32>(15.0)))` : y;
}
