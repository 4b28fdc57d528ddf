// The sizes the forward pass and the decode step record their dispatches with, built once from a
// LlamaConfig so that the recording code reads `s.qDim` rather than `c.numHeads * c.headDim`.
import type { AttentionShape } from '../gpu/kernels/index.ts';
import type { LlamaConfig } from './config.ts';

/** How a layer's attention splits q, k and v into heads, and how it rotates and masks them: the kernels' type, so the model passes its own to them. */
export type { AttentionShape };

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
  readonly attention: AttentionShape;
}

export function llamaShape(c: LlamaConfig): LlamaShape {
  return {
    dim: c.hiddenSize,
    qDim: c.numHeads * c.headDim,
    kvDim: c.numKvHeads * c.headDim,
    ffn: c.intermediateSize,
    vocab: c.vocabSize,
    layers: c.numLayers,
    eps: c.rmsNormEps,
    attention: {
      heads: c.numHeads,
      kvHeads: c.numKvHeads,
      headDim: c.headDim,
      pairing: c.ropePairing,
      slidingWindow: c.slidingWindow,
    },
  };
}
