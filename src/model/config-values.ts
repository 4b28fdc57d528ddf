// The values the config readers (config-hf.ts, config-gguf.ts) and the Gemma rules (config-gemma.ts)
// read from the files, here so that neither reader imports the other or the Gemma rules in a cycle.
import type { GgufMetadata, GgufValue } from '../io/formats/gguf.ts';
import type { CheckpointDType, GatedActivation, RopeScaling } from './config.ts';

export type Json = Record<string, unknown>;

export function hfNumber(config: Json, key: string, fallback?: number): number {
  const v = config[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new Error(`config.json has no ${key}`);
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`config.json ${key} is not a number: ${JSON.stringify(v)}`);
  return v;
}

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** config.json activations and what they are. */
export const HF_ACTIVATIONS: Record<string, GatedActivation> = {
  silu: 'silu',
  swish: 'silu',
  gelu_pytorch_tanh: 'gelu_tanh',
  gelu_tanh: 'gelu_tanh',
};

/**
 * config.json `rope_scaling` or `rope_parameters` (`key`): null, type 'default', 'linear',
 * 'llama3' or 'longrope' / 'su' (Phi-3; its factor and original context as transformers'
 * _compute_longrope_parameters reads them); other types are errors.
 */
export function hfRopeScaling(
  value: unknown,
  key: string,
  model: { contextLength: number; originalContextLength: unknown; rotaryDims: number },
): RopeScaling | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw new Error(`config.json ${key} is not an object: ${JSON.stringify(value)}`);
  const r = value as Json;
  const type = r.rope_type ?? r.type;
  const num = (name: string, fallback?: number): number => {
    const v = r[name] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      throw new Error(`config.json ${key}.${name} must be a number for ${key} type ${JSON.stringify(type)} (got ${JSON.stringify(r[name])})`);
    }
    return v;
  };
  switch (type) {
    case 'default':
      return undefined;
    case 'linear': {
      const factor = num('factor');
      if (factor <= 0) throw new Error(`config.json ${key}.factor must be positive (got ${factor})`);
      return factor === 1 ? undefined : { type: 'linear', factor };
    }
    case 'llama3': {
      const scaling: RopeScaling = {
        type: 'llama3',
        factor: num('factor'),
        lowFreqFactor: num('low_freq_factor'),
        highFreqFactor: num('high_freq_factor'),
        originalContextLength: num('original_max_position_embeddings'),
      };
      if (!(scaling.factor > 0 && scaling.lowFreqFactor > 0 && scaling.originalContextLength > 0 && scaling.highFreqFactor > scaling.lowFreqFactor)) {
        throw new Error(`config.json ${key} (llama3) has invalid parameters: ${JSON.stringify(r)}`);
      }
      return scaling;
    }
    case 'longrope':
    case 'su': {
      const factors = (name: string): number[] => {
        const list = r[name];
        if (!Array.isArray(list) || list.length !== model.rotaryDims / 2 || list.some((v) => typeof v !== 'number' || !(v > 0) || !Number.isFinite(v))) {
          throw new Error(`config.json ${key}.${name} must be ${model.rotaryDims / 2} positive numbers (one per rotated pair), got ${JSON.stringify(list)}`);
        }
        return list as number[];
      };
      // transformers: with a top-level original_max_position_embeddings (Phi-3), factor =
      // max_position_embeddings / it; without, the original is max_position_embeddings and the
      // factor rope_scaling.factor. attention_factor: given, or sqrt(1 + ln(factor) / ln(original)), 1 for factor <= 1.
      const top = model.originalContextLength ?? r.original_max_position_embeddings;
      let original: number;
      let factor: number;
      if (top !== undefined && top !== null) {
        if (typeof top !== 'number' || !Number.isInteger(top) || top <= 0) throw new Error(`config.json original_max_position_embeddings must be a positive integer (got ${JSON.stringify(top)})`);
        original = top;
        factor = model.contextLength / original;
      } else {
        original = model.contextLength;
        factor = num('factor', 1);
      }
      const given = r.attention_factor;
      let attentionFactor: number;
      if (given !== undefined && given !== null) attentionFactor = num('attention_factor');
      else attentionFactor = factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(original));
      return { type: 'longrope', shortFactor: factors('short_factor'), longFactor: factors('long_factor'), originalContextLength: original, attentionFactor };
    }
    default:
      throw new Error(`Unsupported rope_scaling type ${JSON.stringify(type)} (config.json ${key}): supported are default, linear, llama3, longrope`);
  }
}

/** config.json's dtype (transformers 5 `dtype`, earlier `torch_dtype`), where it names one this reads. */
export function hfCheckpointDType(c: Json): CheckpointDType | undefined {
  const parts = isObject(c.text_config) ? [c.text_config, c] : [c];
  for (const part of parts) {
    const v = part.dtype ?? part.torch_dtype;
    if (v === 'bfloat16') return 'bf16';
    if (v === 'float16') return 'f16';
    if (v === 'float32') return 'f32';
  }
  return undefined;
}

export function ggufNum(metadata: GgufMetadata, key: string, fallback?: number): number {
  const v: GgufValue | undefined = metadata[key];
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new Error(`GGUF metadata has no ${key}`);
  }
  const n = typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : undefined;
  if (n === undefined) throw new Error(`GGUF metadata ${key} is not a number`);
  if (!Number.isFinite(n)) throw new Error(`GGUF metadata ${key} is not a finite number (${n})`);
  return n;
}
