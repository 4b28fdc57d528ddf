// The sizes and per-layer attention the forward pass and the decode step record their dispatches
// with, built once from a LlamaConfig and its family description so that the recording code reads
// `s.qDim` and `s.layerShapes[l].attention` rather than the config.
import type { AttentionShape } from '../gpu/kernels/index.ts';
import { familyOf, modelLayers, ropeMagnitude, type FamilyDescription, type LlamaConfig } from './config.ts';

/** How a layer's attention splits q, k and v into heads, and how it rotates and masks them: the kernels' type, so the model passes its own to them. */
export type { AttentionShape };

/** A layer's attention shape: with rotaryDims, magnitude, scale and softcap set only where they differ from the kernels' defaults, so a Llama-layout model passes exactly what it passed before. */
export type LayerAttentionShape = AttentionShape;

/** One layer's attention as the passes record it. */
export interface LayerShape {
  readonly attention: LayerAttentionShape;
  /** False: the layer has no RoPE (q and k are not rotated). */
  readonly rope: boolean;
  /** Index into LlamaParts.invFreqs of this layer's RoPE table (without RoPE: the zero table, see ropeTables). */
  readonly ropeTable: number;
}

/** The sizes of a model's tensors, per token. */
export interface LlamaShape {
  /** The residual stream's width (hidden size). */
  readonly dim: number;
  /** q's width: heads * headDim. */
  readonly qDim: number;
  /** k's and v's width: kvHeads * headDim. */
  readonly kvDim: number;
  /** The feed-forward block's hidden width. */
  readonly ffn: number;
  readonly vocab: number;
  readonly layers: number;
  /** RMSNorm's ε. */
  readonly eps: number;
  /** Layer 0's attention (every layer's, for a Llama-layout model). */
  readonly attention: LayerAttentionShape;
  /** Each layer's attention, RoPE and window. */
  readonly layerShapes: readonly LayerShape[];
  /** The family's block. */
  readonly family: FamilyDescription;
}

/**
 * Layers whose RoPE tables are equal share one: each layer's table index, and one layer using
 * each table. Layers without RoPE get the index after the last (firstLayer.length): a table of
 * zero frequencies (cos 1, sin 0: the identity), for the fused step's attention, which always
 * rotates; `zeroTable` says whether any layer needs it.
 */
export function ropeTables(c: LlamaConfig): { tableOf: number[]; firstLayer: number[]; zeroTable: boolean } {
  const keys: string[] = [];
  const firstLayer: number[] = [];
  const noRope: number[] = [];
  const tableOf = modelLayers(c).map((layer, l) => {
    if (!layer.rope) {
      noRope.push(l);
      return -1;
    }
    const r = layer.rope;
    const key = JSON.stringify([r.theta, r.rotaryDims, r.scaling ?? null, r.freqFactors ? Array.from(r.freqFactors) : null]);
    let i = keys.indexOf(key);
    if (i < 0) {
      i = keys.push(key) - 1;
      firstLayer.push(l);
    }
    return i;
  });
  for (const l of noRope) tableOf[l] = firstLayer.length;
  return { tableOf, firstLayer, zeroTable: noRope.length > 0 };
}

export function llamaShape(c: LlamaConfig): LlamaShape {
  const family = familyOf(c);
  const { tableOf } = ropeTables(c);
  const layerShapes = modelLayers(c).map((layer, l): LayerShape => {
    const r = layer.rope;
    const attention: LayerAttentionShape = {
      heads: c.numHeads,
      kvHeads: c.numKvHeads,
      headDim: c.headDim,
      pairing: c.ropePairing,
      slidingWindow: layer.slidingWindow,
      ...(r && r.rotaryDims !== c.headDim ? { rotaryDims: r.rotaryDims } : {}),
      ...(r && ropeMagnitude(r) !== 1 ? { magnitude: ropeMagnitude(r) } : {}),
      ...(family.attentionScale !== undefined ? { scale: family.attentionScale } : {}),
      ...(family.attentionSoftcap !== undefined ? { softcap: family.attentionSoftcap } : {}),
    };
    return { attention, rope: r !== null, ropeTable: tableOf[l] };
  });
  return {
    dim: c.hiddenSize,
    qDim: c.numHeads * c.headDim,
    kvDim: c.numKvHeads * c.headDim,
    ffn: c.intermediateSize,
    vocab: c.vocabSize,
    layers: c.numLayers,
    eps: c.rmsNormEps,
    attention: layerShapes[0]?.attention ?? { heads: c.numHeads, kvHeads: c.numKvHeads, headDim: c.headDim, pairing: c.ropePairing },
    layerShapes,
    family,
  };
}
