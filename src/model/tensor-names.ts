// GGUF tensor names (llama.cpp) -> canonical Hugging Face names, and GGUF dims -> HF shapes.

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
  attn_output: 'self_attn.o_proj',
  ffn_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_up: 'mlp.up_proj',
  ffn_down: 'mlp.down_proj',
};

/** The Hugging Face name of a GGUF tensor, or null for names this runtime does not know (e.g. rope_freqs). */
export function hfNameFromGguf(name: string): string | null {
  const global = GLOBAL[name];
  if (global) return global;
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(name);
  if (!m) return null;
  const part = LAYER[m[2]];
  if (!part) return null;
  return `model.layers.${m[1]}.${part}.${m[3]}`;
}

/** HF shape (row-major, slowest dim first) from GGUF `ne` (fastest first): the reverse. */
export function hfShapeFromGguf(ne: readonly number[]): number[] {
  return [...ne].reverse();
}

/** Canonical HF names of one decoder layer's tensors. */
export function layerTensorNames(layer: number) {
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
    ffnNorm: `${p}post_attention_layernorm.weight`,
    wGate: `${p}mlp.gate_proj.weight`,
    wUp: `${p}mlp.up_proj.weight`,
    wDown: `${p}mlp.down_proj.weight`,
  };
}

export const GLOBAL_TENSOR_NAMES = {
  tokenEmbedding: 'model.embed_tokens.weight',
  outputNorm: 'model.norm.weight',
  lmHead: 'lm_head.weight',
} as const;
