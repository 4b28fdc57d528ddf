// RoPE's inverse frequencies, with the scalings the checkpoint formats describe. The GPU passes
// upload them once (LlamaModel); the CPU reference (test/reference/cpu-llama.ts) uses them as they are.
import type { LlamaConfig } from './config.ts';

/**
 * RoPE inverse frequencies: θ_i = theta^(-2i/d) for i < d/2, then the config's scaling:
 * - linear: θ_i / factor (positions divided by the factor);
 * - llama3 (Hugging Face `_compute_llama3_parameters`): with wavelength λ_i = 2π / θ_i and
 *   λ_lo = original_context / low_freq_factor, λ_hi = original_context / high_freq_factor,
 *   λ_i < λ_hi keeps θ_i, λ_i > λ_lo gives θ_i / factor, and in between
 *   s = (original_context / λ_i - low_freq_factor) / (high_freq_factor - low_freq_factor),
 *   θ_i ((1 - s) / factor + s);
 * - GGUF rope_freqs.weight: θ_i / rope_freqs[i] (llama.cpp's way of storing the same).
 */
export function ropeInverseFrequencies(config: LlamaConfig): Float32Array<ArrayBuffer> {
  const half = config.headDim / 2;
  const invFreq = new Float32Array(half);
  const scaling = config.ropeScaling;
  const factors = config.ropeFreqFactors;
  if (factors && factors.length !== half) {
    throw new Error(`${factors.length} RoPE frequency factors for head size ${config.headDim} (needs ${half})`);
  }
  for (let i = 0; i < half; i++) {
    let f = Math.pow(config.ropeTheta, (-2 * i) / config.headDim);
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
    }
    if (factors) f /= factors[i];
    invFreq[i] = f;
  }
  return invFreq;
}
