// RoPE's inverse frequencies, with the scalings the checkpoint formats describe, per layer (a
// model's layers may differ: SmolLM3's NoPE layers, Gemma's local and global ones). The GPU passes
// upload each distinct table once (LlamaModel); the CPU reference (test/reference/cpu-llama.ts)
// uses them as they are.
import { modelLayers, type LayerRope, type LlamaConfig } from './config.ts';

/**
 * RoPE inverse frequencies of one layer's RoPE, over its d = rotaryDims rotated dims:
 * θ_i = theta^(-2i/d) for i < d/2, then the scaling:
 * - linear: θ_i / factor (positions divided by the factor);
 * - llama3 (Hugging Face `_compute_llama3_parameters`): with wavelength λ_i = 2π / θ_i and
 *   λ_lo = original_context / low_freq_factor, λ_hi = original_context / high_freq_factor,
 *   λ_i < λ_hi keeps θ_i, λ_i > λ_lo gives θ_i / factor, and in between
 *   s = (original_context / λ_i - low_freq_factor) / (high_freq_factor - low_freq_factor),
 *   θ_i ((1 - s) / factor + s);
 * - longrope: θ_i / long_factor[i] when `contextLength` (the loaded context) is more than the
 *   original context, else θ_i / short_factor[i] (llama.cpp's and vLLM's choice);
 * - GGUF rope_freqs.weight: θ_i / rope_freqs[i] (llama.cpp's way of storing llama3's).
 */
export function layerInverseFrequencies(rope: LayerRope, contextLength: number): Float32Array<ArrayBuffer> {
  const half = rope.rotaryDims / 2;
  const invFreq = new Float32Array(half);
  const scaling = rope.scaling;
  const factors = rope.freqFactors;
  if (factors && factors.length !== half) {
    throw new Error(`${factors.length} RoPE frequency factors for ${rope.rotaryDims} rotated dims (needs ${half})`);
  }
  const longRope = scaling?.type === 'longrope' ? (contextLength > scaling.originalContextLength ? scaling.longFactor : scaling.shortFactor) : undefined;
  for (let i = 0; i < half; i++) {
    let f = Math.pow(rope.theta, (-2 * i) / rope.rotaryDims);
    if (scaling?.type === 'linear') {
      f /= scaling.factor;
    } else if (scaling?.type === 'llama3') {
      const { factor, lowFreqFactor, highFreqFactor, originalContextLength } = scaling;
      const wavelen = (2 * Math.PI) / f;
      const lowFreqWavelen = originalContextLength / lowFreqFactor;
      const highFreqWavelen = originalContextLength / highFreqFactor;
      if (wavelen > lowFreqWavelen) {
        f /= factor;
      } else if (wavelen >= highFreqWavelen) {
        const smooth = (originalContextLength / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
        f = ((1 - smooth) * f) / factor + smooth * f;
      }
    } else if (longRope) {
      f /= longRope[i];
    }
    if (factors) f /= factors[i];
    invFreq[i] = f;
  }
  return invFreq;
}

/** The positions a model's RoPE tables are chosen for: the loaded context, else the configured one. */
export function ropeContextLength(config: LlamaConfig): number {
  return config.loadedContextLength ?? config.contextLength;
}

/**
 * The inverse frequencies of `layer`'s RoPE (default layer 0; the first layer with RoPE when that
 * one has none), as layerInverseFrequencies.
 */
export function ropeInverseFrequencies(config: LlamaConfig, layer = 0): Float32Array<ArrayBuffer> {
  const layers = modelLayers(config);
  const rope = layers[layer]?.rope ?? layers.find((l) => l.rope)?.rope;
  if (!rope) return new Float32Array(0);
  return layerInverseFrequencies(rope, ropeContextLength(config));
}
