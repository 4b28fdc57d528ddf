// A LlamaConfig from a Hugging Face config.json (configFromHf), and what it refuses.
import { LLAMA_FAMILY, MAX_DESCRIBED_LAYERS, setFamily, validateConfig, type FamilyDescription, type LlamaConfig } from './config.ts';
import { gemmaConfigFromHf } from './config-gemma.ts';
import { HF_ACTIVATIONS, hfNumber, hfRopeScaling, isObject, type Json } from './config-values.ts';

// ---------------------------------------------------------------------------------------------
// Reading a LlamaConfig from the files. Anything this runtime does not implement is an error that
// names it, never a silently wrong model. A family is its architecture names here and the
// FamilyDescription its reader builds; nothing past the readers asks for the architecture.

/** Hugging Face `architectures` this runtime runs, and their `model_type`. */
const HF_ARCHITECTURES: Record<string, string> = {
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Qwen2ForCausalLM: 'qwen2',
  Qwen3ForCausalLM: 'qwen3',
  SmolLM3ForCausalLM: 'smollm3',
  Phi3ForCausalLM: 'phi3',
  Gemma2ForCausalLM: 'gemma2',
  Gemma3ForCausalLM: 'gemma3',
  // The language model of a Gemma 3 image-text checkpoint (config under text_config; the vision
  // tower is not loaded: openModel says so).
  Gemma3ForConditionalGeneration: 'gemma3',
};

/** config.json model_type values of the families above, when `architectures` is absent. */
const HF_MODEL_TYPES: Record<string, string> = { gemma3_text: 'gemma3', gemma3: 'gemma3' };

/**
 * Throws naming a feature this runtime does not run, found anywhere in config.json (the top level,
 * `text_config`): mixture of experts, linear-attention layers (Qwen3-Next, Qwen3.5), mRoPE, or a
 * vision-only checkpoint. Called first, so that the error names the feature rather than the
 * architecture, and before any weight is read.
 */
export function refuseUnsupportedHfFeatures(c: Json): void {
  const parts: [string, Json][] = [['', c]];
  if (isObject(c.text_config)) parts.push(['text_config.', c.text_config]);
  for (const [at, part] of parts) {
    for (const key of ['num_local_experts', 'num_experts', 'n_routed_experts', 'moe_intermediate_size', 'num_experts_per_tok']) {
      if (part[key] !== undefined && part[key] !== null && part[key] !== 0) {
        throw new Error(`Unsupported model: mixture-of-experts (config.json ${at}${key} = ${JSON.stringify(part[key])})`);
      }
    }
    const layerTypes = Array.isArray(part.layer_types) ? (part.layer_types as unknown[]).map(String) : [];
    const linear = layerTypes.find((t) => /linear/.test(t));
    if (linear) throw new Error(`Unsupported model: linear-attention layers (config.json ${at}layer_types has "${linear}")`);
    for (const key of ['full_attention_interval', 'linear_num_key_heads', 'linear_num_value_heads', 'linear_conv_kernel_dim']) {
      if (part[key] !== undefined && part[key] !== null) {
        throw new Error(`Unsupported model: linear-attention layers (config.json ${at}${key} = ${JSON.stringify(part[key])})`);
      }
    }
    if (part.use_mrope === true) throw new Error(`Unsupported model: mRoPE (config.json ${at}use_mrope = true)`);
    for (const key of ['rope_scaling', 'rope_parameters']) {
      const r = part[key];
      if (isObject(r) && (r.mrope_section !== undefined || r.type === 'mrope' || r.rope_type === 'mrope')) {
        throw new Error(`Unsupported model: mRoPE (config.json ${at}${key}.mrope_section)`);
      }
    }
  }
  const architectures = Array.isArray(c.architectures) ? (c.architectures as unknown[]).map(String) : [];
  const visionOnly = (isObject(c.vision_config) || architectures.some((a) => /Vision(Model|Encoder)/.test(a)) || /vision/.test(String(c.model_type ?? '')))
    && !isObject(c.text_config) && c.vocab_size === undefined;
  if (visionOnly) {
    throw new Error(`Unsupported model: a vision-only checkpoint (${architectures.join(', ') || String(c.model_type)}), with no language model`);
  }
}

/** A LlamaConfig from a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3, SmolLM3, Phi-3). */
export function configFromHf(configJson: unknown): LlamaConfig {
  if (!configJson || typeof configJson !== 'object') throw new Error('config.json is not a JSON object');
  const c = configJson as Json;
  refuseUnsupportedHfFeatures(c);
  const architectures = Array.isArray(c.architectures) ? (c.architectures as unknown[]).map(String) : [];
  const modelType = typeof c.model_type === 'string' ? c.model_type : undefined;
  let architecture: string | undefined;
  if (architectures.length > 0) {
    const known = architectures.find((a) => a in HF_ARCHITECTURES);
    if (!known) {
      throw new Error(
        `Unsupported model architecture ${architectures.join(', ')}: supported are ${Object.keys(HF_ARCHITECTURES).join(', ')}`,
      );
    }
    architecture = HF_ARCHITECTURES[known];
  } else if (modelType && Object.values(HF_ARCHITECTURES).includes(modelType)) {
    architecture = modelType;
  } else if (modelType && modelType in HF_MODEL_TYPES) {
    architecture = HF_MODEL_TYPES[modelType];
  } else {
    throw new Error(`Unsupported model: config.json has no supported architectures (model_type ${modelType ?? 'missing'})`);
  }
  if (architecture === 'gemma2' || architecture === 'gemma3') return gemmaConfigFromHf(c, architecture);

  const act = c.hidden_act ?? c.hidden_activation ?? 'silu';
  const activation = HF_ACTIVATIONS[String(act)];
  if (!activation) throw new Error(`Unsupported activation hidden_act = ${JSON.stringify(act)} (supported: ${Object.keys(HF_ACTIVATIONS).join(', ')})`);
  if (c.mlp_bias === true) throw new Error('Unsupported model: mlp_bias = true (biases on the MLP projections)');
  if (architecture !== 'qwen2' && c.attention_bias === true) {
    throw new Error(`Unsupported model: attention_bias = true for a ${architecture} model (bias on o_proj)`);
  }
  // transformers 5 writes RoPE as one object, rope_parameters {rope_type, rope_theta, factor, ...},
  // in place of the top-level rope_theta and rope_scaling that earlier versions wrote.
  const ropeParameters = c.rope_parameters ?? undefined;
  if (ropeParameters !== undefined && (typeof ropeParameters !== 'object' || Array.isArray(ropeParameters))) {
    throw new Error(`config.json rope_parameters is not an object: ${JSON.stringify(ropeParameters)}`);
  }
  const rope = ropeParameters as Json | undefined;
  if (rope && Object.values(rope).some((v) => isObject(v))) {
    throw new Error(`Unsupported config.json rope_parameters per layer type: ${JSON.stringify(rope)}`);
  }

  const hiddenSize = hfNumber(c, 'hidden_size');
  const numLayers = hfNumber(c, 'num_hidden_layers');
  const numHeads = hfNumber(c, 'num_attention_heads');
  const numKvHeads = hfNumber(c, 'num_key_value_heads', numHeads);
  const headDim = hfNumber(c, 'head_dim', hiddenSize / numHeads);
  const contextLength = hfNumber(c, 'max_position_embeddings', 2048);
  // transformers: the rotated dims are int(head_dim * partial_rotary_factor).
  const partial = rope?.partial_rotary_factor ?? c.partial_rotary_factor ?? 1;
  if (typeof partial !== 'number' || !(partial > 0 && partial <= 1)) throw new Error(`config.json partial_rotary_factor must be in (0, 1] (got ${JSON.stringify(partial)})`);
  const rotaryDims = Math.floor(headDim * partial);
  if (rotaryDims % 2 !== 0 || rotaryDims === 0) throw new Error(`Unsupported partial_rotary_factor ${partial}: ${rotaryDims} rotated dims of a head of ${headDim} is not a positive even number`);
  const scalingSource = rope
    ? (rope.rope_type === undefined && rope.type === undefined ? { ...rope, rope_type: 'default' } : rope)
    : c.rope_scaling;
  const ropeScaling = hfRopeScaling(scalingSource, rope ? 'rope_parameters' : 'rope_scaling', {
    contextLength,
    originalContextLength: c.original_max_position_embeddings,
    rotaryDims,
  });

  // Sliding-window attention equals full attention for sequences up to the window, but it is kept
  // even when no smaller than max_position_embeddings: a KV cache may be made longer than that
  // (loadModel's contextLength). Qwen2 / Qwen3 / SmolLM3 configs carry a sliding_window that is off
  // unless use_sliding_window is true; Mistral and Phi-3 use theirs (transformers' Phi3Attention
  // passes config.sliding_window); HF's Llama ignores sliding_window altogether.
  const window = c.sliding_window;
  const switched = architecture === 'qwen2' || architecture === 'qwen3' || architecture === 'smollm3';
  let usesSliding = switched ? c.use_sliding_window === true : architecture === 'mistral' || architecture === 'phi3';
  // Which layers slide (transformers' layer_types): the config's list when it has one, else the
  // layers from max_window_layers on.
  let windowed: boolean[] | undefined;
  if (switched && usesSliding) {
    const types = c.layer_types;
    if (types !== undefined && types !== null) {
      if (!Array.isArray(types) || types.length !== numLayers || types.some((t) => t !== 'full_attention' && t !== 'sliding_attention')) {
        throw new Error(`config.json layer_types must be ${numLayers} of "full_attention" / "sliding_attention" (got ${JSON.stringify(types).slice(0, 200)})`);
      }
      windowed = types.map((t) => t === 'sliding_attention');
    } else {
      const firstWindowed = hfNumber(c, 'max_window_layers', 28);
      if (firstWindowed > 0 && firstWindowed < numLayers && !(Number.isSafeInteger(numLayers) && numLayers <= MAX_DESCRIBED_LAYERS)) {
        throw new Error(`Unsupported model: sliding-window attention on layers ${firstWindowed}.. of ${numLayers}`);
      }
      if (firstWindowed > 0 && Number.isSafeInteger(numLayers) && numLayers <= MAX_DESCRIBED_LAYERS) {
        windowed = Array.from({ length: numLayers }, (_, l) => l >= firstWindowed);
      }
    }
    if (windowed && !windowed.some(Boolean)) usesSliding = false;
    if (windowed?.every(Boolean)) windowed = undefined;
  }
  let slidingWindow: number | undefined;
  if (usesSliding && window !== undefined && window !== null) {
    if (typeof window !== 'number' || !Number.isInteger(window) || window <= 0) {
      throw new Error(`config.json sliding_window must be a positive integer or null (got ${JSON.stringify(window)})`);
    }
    slidingWindow = window;
  }
  const ropeTheta = rope?.rope_theta !== undefined ? hfNumber(rope, 'rope_theta') : hfNumber(c, 'rope_theta', 10000);

  // SmolLM3: no_rope_layers[l] = 1 when layer l USES RoPE (transformers' SmolLM3Attention.use_rope);
  // missing, transformers builds it from no_rope_layer_interval (every interval-th layer without).
  let usesRope: boolean[] | undefined;
  if (architecture === 'smollm3' && (c.no_rope_layers !== undefined || (Number.isSafeInteger(numLayers) && numLayers > 0 && numLayers <= MAX_DESCRIBED_LAYERS))) {
    const interval = hfNumber(c, 'no_rope_layer_interval', 4);
    const list = c.no_rope_layers ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % interval !== 0 ? 1 : 0));
    if (!Array.isArray(list) || list.length !== numLayers || list.some((v) => v !== 0 && v !== 1)) {
      throw new Error(`config.json no_rope_layers must be ${numLayers} values of 0 or 1 (got ${JSON.stringify(list)})`);
    }
    usesRope = list.map((v) => v === 1);
  }
  const family: FamilyDescription = {
    ...LLAMA_FAMILY,
    activation,
    qkNorm: architecture === 'qwen3',
    fusedQkv: architecture === 'phi3',
    fusedGateUp: architecture === 'phi3',
  };
  const config: LlamaConfig = {
    architecture,
    vocabSize: hfNumber(c, 'vocab_size'),
    hiddenSize,
    intermediateSize: hfNumber(c, 'intermediate_size'),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    contextLength,
    rmsNormEps: hfNumber(c, 'rms_norm_eps', 1e-6),
    ropeTheta,
    ropePairing: 'halves',
    tieWordEmbeddings: c.tie_word_embeddings === true,
    attentionBias: architecture === 'qwen2',
  };
  if (ropeScaling) config.ropeScaling = ropeScaling;
  if (slidingWindow !== undefined) config.slidingWindow = slidingWindow;
  setFamily(config, family, { rotaryDims, usesRope, windowed });
  validateConfig(config, 'config.json');
  return config;
}
