// GGUF tensor names (llama.cpp) -> canonical Hugging Face names, and GGUF dims -> HF shapes. The
// canonical names of a layer follow its family's description: Gemma's post-attention norm is HF's
// post_attention_layernorm, which in a Llama block is the norm before the feed-forward block.
import { LLAMA_FAMILY, type FamilyDescription } from './config.ts';

const GLOBAL: Record<string, string> = {
  'token_embd.weight': 'model.embed_tokens.weight',
  'output_norm.weight': 'model.norm.weight',
  'output.weight': 'lm_head.weight',
};

const LAYER: Record<string, string> = {
  attn_norm: 'input_layernorm',
  attn_q: 'self_attn.q_proj',
  attn_k: 'self_attn.k_proj',
  attn_v: 'self_attn.v_proj',
  attn_qkv: 'self_attn.qkv_proj',
  attn_q_norm: 'self_attn.q_norm',
  attn_k_norm: 'self_attn.k_norm',
  attn_output: 'self_attn.o_proj',
  post_attention_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_down: 'mlp.down_proj',
  post_ffw_norm: 'post_feedforward_layernorm',
};

/**
 * The Hugging Face name of a GGUF tensor, or null for names this runtime does not know (e.g.
 * rope_freqs). `ffn_norm` is the pre-feed-forward norm: post_attention_layernorm in a Llama
 * block, pre_feedforward_layernorm in one with a post-attention norm; `ffn_up` holds gate and up
 * (gate_up_proj) where the family fuses them.
 */
export function hfNameFromGguf(name: string, family: FamilyDescription = LLAMA_FAMILY): string | null {
  const global = GLOBAL[name];
  if (global) return global;
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(name);
  if (!m) return null;
  let part = LAYER[m[2]];
  if (m[2] === 'ffn_norm') part = family.postAttentionNorm ? 'pre_feedforward_layernorm' : 'post_attention_layernorm';
  if (m[2] === 'ffn_up') part = family.fusedGateUp ? 'mlp.gate_up_proj' : 'mlp.up_proj';
  if (!part) return null;
  return `model.layers.${m[1]}.${part}.${m[3]}`;
}

/** HF shape (row-major, slowest dim first) from GGUF `ne` (fastest first): the reverse. */
export function hfShapeFromGguf(ne: readonly number[]): number[] {
  return [...ne].reverse();
}

/** Canonical HF names of one decoder layer's tensors (those of a family's block; see hfNameFromGguf for the norms). */
export function layerTensorNames(layer: number, family: FamilyDescription = LLAMA_FAMILY) {
  const p = `model.layers.${layer}.`;
  return {
    attnNorm: `${p}input_layernorm.weight`,
    wq: `${p}self_attn.q_proj.weight`,
    wk: `${p}self_attn.k_proj.weight`,
    wv: `${p}self_attn.v_proj.weight`,
    wo: `${p}self_attn.o_proj.weight`,
    bq: `${p}self_attn.q_proj.bias`,
    bk: `${p}self_attn.k_proj.bias`,
    bv: `${p}self_attn.v_proj.bias`,
    qNorm: `${p}self_attn.q_norm.weight`,
    kNorm: `${p}self_attn.k_norm.weight`,
    postAttnNorm: `${p}post_attention_layernorm.weight`,
    ffnNorm: family.postAttentionNorm ? `${p}pre_feedforward_layernorm.weight` : `${p}post_attention_layernorm.weight`,
    postFfnNorm: `${p}post_feedforward_layernorm.weight`,
    wGate: `${p}mlp.gate_proj.weight`,
    wUp: `${p}mlp.up_proj.weight`,
    wDown: `${p}mlp.down_proj.weight`,
    /** Fused in the file (FamilyDescription.fusedQkv, fusedGateUp): split by openModel. */
    wqkv: `${p}self_attn.qkv_proj.weight`,
    wGateUp: `${p}mlp.gate_up_proj.weight`,
  };
}

export const GLOBAL_TENSOR_NAMES = {
  tokenEmbedding: 'model.embed_tokens.weight',
  outputNorm: 'model.norm.weight',
  lmHead: 'lm_head.weight',
} as const;

/**
 * The causal-LM name of a tensor of an image-text checkpoint's language model, or null for the
 * others (vision tower, projector): `language_model.model.*` (checkpoints saved before
 * transformers 4.52) and `model.language_model.*` (after) are `model.*`, and
 * `language_model.lm_head.*` is `lm_head.*`; a top-level `lm_head.*` stays.
 */
export function languageModelTensorName(name: string): string | null {
  for (const prefix of ['language_model.model.', 'model.language_model.']) {
    if (name.startsWith(prefix)) return `model.${name.slice(prefix.length)}`;
  }
  if (name.startsWith('language_model.lm_head.')) return name.slice('language_model.'.length);
  if (name.startsWith('lm_head.')) return name;
  return null;
}
