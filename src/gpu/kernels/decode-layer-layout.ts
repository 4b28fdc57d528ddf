// The decode layer's (decode_layer.wgsl) bindings and where its state buffer keeps what for one
// sequence; the rows variant lays out its rows after this (decode-layer-rows.ts).
import { anyDecodeLayerFeature, decodeLayerFeatureLayout, needsModelConstants, type DecodeLayerFeatureLayout, type DecodeLayerFeatures } from './decode-layer-family.ts';

/** A layer's seven projections in decode_layer.wgsl's order: weight binding 10 + index, snippet suffix `s${name}`. */
export const DECODE_LAYER_MATRICES = ['q', 'k', 'v', 'o', 'g', 'u', 'd'] as const;
export const DECODE_LAYER_WEIGHT_BINDING = 10;
/** decode_layer.wgsl's other bindings: the f32 arena, the first slot's K cache (V at + 1, the next slot's K at + 2), the token and the logits. */
export const DECODE_LAYER_ARENA_BINDING = 2;
export const DECODE_LAYER_CACHE_BINDING = 3;
export const DECODE_LAYER_TOKENS_BINDING = 17;
export const DECODE_LAYER_LOGITS_BINDING = 18;
/** Storage buffers decode_layer.wgsl binds with a binding per matrix: st, the two caches, the seven weights. */
export const DECODE_LAYER_STORAGE_BUFFERS = 10;
/** Most layers one decode_layer.wgsl dispatch runs (its Params fit a 256-byte uniform slot up to 6). */
export const DECODE_LAYER_MAX_SLOTS = 4;

/** The sizes decode_layer.wgsl is compiled for. */
export interface DecodeLayerDims {
  dim: number;
  qDim: number;
  kvDim: number;
  ffn: number;
  headDim: number;
  numLayers: number;
}

/** Where decode_layer.wgsl's state buffer keeps what (float indices, each a multiple of 4). */
export interface DecodeLayerLayout {
  x: number;
  qkv: number;
  att: number;
  h: number;
  pos: number;
  freq: number;
  /** γ_out, the final norm's weights (read where the logits join a decode layer dispatch). */
  outNorm: number;
  /**
   * Layer l's [γ_attn | γ_ffn | bq | bk | bv], then its features' constants (`features`), start
   * at consts + l * constsStride.
   */
  consts: number;
  constsStride: number;
  /** With family features (decodeLayerLayout's second argument): where their constants are. */
  features?: DecodeLayerFeatureLayout;
  /** With post-norms: a block's output before its norm, [dim]; -1 without. */
  block?: number;
  /**
   * The greedy steps' records (decodeLayers `greedyTo`): DECODE_RECORD_SLOTS of 4 words each, u32
   * id, f32 logprob, 0, 0; the step at position p writes slot p mod DECODE_RECORD_SLOTS.
   */
  records: number;
  /** Floats in the buffer. */
  floats: number;
}

/** Record slots in the decode layers' state: a batch of steps may take this many before the first is overwritten. */
export const DECODE_RECORD_SLOTS = 32;
/** Bytes of one greedy record in the decode layers' state. */
export const DECODE_RECORD_BYTES = 16;

export const up4 = (n: number) => Math.ceil(n / 4) * 4;

export function decodeLayerLayout(d: DecodeLayerDims, f?: DecodeLayerFeatures): DecodeLayerLayout {
  const qkvRows = d.qDim + 2 * d.kvDim;
  const x = 0;
  const qkv = x + up4(d.dim);
  const att = qkv + up4(qkvRows);
  const h = att + up4(d.qDim);
  const pos = h + up4(d.ffn);
  const freq = pos + 4;
  const outNorm = freq + up4(d.headDim / 2);
  const consts = outNorm + up4(d.dim);
  const llamaStride = up4(2 * d.dim + qkvRows);
  const recordFloats = (DECODE_RECORD_SLOTS * DECODE_RECORD_BYTES) / 4;
  if (!f || !anyDecodeLayerFeature(f)) {
    // The Llama block: exactly the layout it always had.
    const records = consts + d.numLayers * llamaStride;
    return { x, qkv, att, h, pos, freq, outNorm, consts, constsStride: llamaStride, records, floats: records + recordFloats };
  }
  const layer = decodeLayerFeatureLayout(f, llamaStride, d.dim, d.headDim);
  const constsStride = llamaStride + layer.layerFloats;
  const model = consts + d.numLayers * constsStride;
  const records = model + (needsModelConstants(f) ? 4 : 0);
  const block = records + recordFloats;
  const floats = block + (f.postNorms ? up4(d.dim) : 0);
  return {
    x, qkv, att, h, pos, freq, outNorm, consts, constsStride, records, floats,
    features: { ...layer, model: needsModelConstants(f) ? model : -1 },
    block: f.postNorms ? block : -1,
  };
}
