// The Llama forward pass on the CPU, in plain TypeScript, with the same names as src/model/llama.ts.
// It is the truth the GPU path is held to on random-weight models.
import type { LlamaConfig } from '../../src/model/config.ts';
import { ropeInverseFrequencies } from '../../src/model/llama.ts';
import { addRef, attentionRef, embeddingRef, matmulRef, rmsNormRef, ropeRef, roundF16, swigluRef } from './cpu-ops.ts';

export interface CpuLayerWeights {
  attnNorm: Float32Array;
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  bq?: Float32Array;
  bk?: Float32Array;
  bv?: Float32Array;
  ffnNorm: Float32Array;
  wGate: Float32Array;
  wUp: Float32Array;
  wDown: Float32Array;
}

export interface CpuLlamaWeights {
  tokenEmbedding: Float32Array; // [vocab, d]
  layers: CpuLayerWeights[];
  outputNorm: Float32Array;
  lmHead: Float32Array; // [vocab, d] (the embedding itself when tied)
}

export class CpuLlama {
  private readonly kCache: Float32Array[];
  private readonly vCache: Float32Array[];

  constructor(
    readonly config: LlamaConfig,
    readonly weights: CpuLlamaWeights,
    readonly capacity: number,
    /** The GPU cache's element type: 'f16' (LlamaModel.createKvCache's default) rounds K and V as cached. */
    readonly kvDType: 'f16' | 'f32' = 'f16',
  ) {
    const rowElems = config.numKvHeads * config.headDim;
    this.kCache = Array.from({ length: config.numLayers }, () => new Float32Array(capacity * rowElems));
    this.vCache = Array.from({ length: config.numLayers }, () => new Float32Array(capacity * rowElems));
  }

  /** Logits of every input token, [T, vocab]. */
  forward(tokens: number[], startPos: number): Float32Array {
    const c = this.config;
    const w = this.weights;
    const T = tokens.length;
    const d = c.hiddenSize;
    const qDim = c.numHeads * c.headDim;
    const kvDim = c.numKvHeads * c.headDim;
    const ffn = c.intermediateSize;
    const invFreq = ropeInverseFrequencies(c);

    let x = embeddingRef(w.tokenEmbedding, d, tokens);
    for (let l = 0; l < c.numLayers; l++) {
      const layer = w.layers[l];
      let xb = rmsNormRef(x, layer.attnNorm, T, d, c.rmsNormEps);
      let q = matmulRef(xb, layer.wq, T, qDim, d, layer.bq);
      let k = matmulRef(xb, layer.wk, T, kvDim, d, layer.bk);
      const v = matmulRef(xb, layer.wv, T, kvDim, d, layer.bv);
      q = ropeRef(q, T, c.numHeads, c.headDim, startPos, invFreq, c.ropePairing);
      k = ropeRef(k, T, c.numKvHeads, c.headDim, startPos, invFreq, c.ropePairing);
      const f16 = this.kvDType === 'f16';
      this.kCache[l].set(f16 ? roundF16(k) : k, startPos * kvDim);
      this.vCache[l].set(f16 ? roundF16(v) : v, startPos * kvDim);
      const att = attentionRef(q, this.kCache[l], this.vCache[l], T, startPos, c.numHeads, c.numKvHeads, c.headDim, c.slidingWindow);
      x = addRef(x, matmulRef(att, layer.wo, T, d, qDim));

      xb = rmsNormRef(x, layer.ffnNorm, T, d, c.rmsNormEps);
      const gate = matmulRef(xb, layer.wGate, T, ffn, d);
      const up = matmulRef(xb, layer.wUp, T, ffn, d);
      x = addRef(x, matmulRef(swigluRef(gate, up), layer.wDown, T, d, ffn));
    }
    const xb = rmsNormRef(x, w.outputNorm, T, d, c.rmsNormEps);
    return matmulRef(xb, w.lmHead, T, c.vocabSize, d);
  }
}
