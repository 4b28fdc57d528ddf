// A model folder whose greedy decoding says a known text: every layer adds nothing to the residual
// stream (its output projections are zero), so the final hidden state is the last token's
// embedding and the logits depend on the last token alone, a bigram table written into the
// embedding and the LM head. Token `from` gets a one-hot embedding in a dimension of its own, and
// the LM head row of `to` a large weight in that dimension, so `to` follows `from` with a logit
// lead of about 10·sqrt(hidden) over every other token (all others 0). A real tokenizer and chat
// template come with it (scripts/model-families.ts generateModel), so the reply to a real chat
// prompt is exactly the chain that starts at the prompt's last token.
import { closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { generateModel, tensorPlan, type Family } from './model-families.ts';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface BigramModelOptions {
  /** The architecture (a family of model-families.ts). */
  family: Family;
  out: string;
  /** The real tokenizer's folder and the generation_config.json to write. */
  tokenizer: { dir: string; generationConfig: Json };
  /** The model's vocabulary (its embedding and LM head rows). */
  vocabSize: number;
  /** Each chain: token i is followed by token i + 1. A token is followed by one token only. */
  chains: readonly (readonly number[])[];
  hiddenSize?: number;
}

/** The logit of the next token in a chain, before the final norm's scale (sqrt(hidden) for a one-hot state). */
const LEAD = 10;

/** Writes the folder; returns its config.json object. */
export function writeBigramModel(options: BigramModelOptions): Json {
  const hidden = options.hiddenSize ?? 32;
  const next = new Map<number, number>();
  for (const chain of options.chains) {
    for (let i = 0; i + 1 < chain.length; i++) {
      const known = next.get(chain[i]!);
      if (known !== undefined && known !== chain[i + 1]) throw new Error(`token ${chain[i]} is followed by both ${known} and ${chain[i + 1]}`);
      next.set(chain[i]!, chain[i + 1]!);
    }
  }
  if (next.size > hidden) throw new Error(`${next.size} tokens are followed by another; the hidden size ${hidden} holds at most that many`);
  const config = generateModel({
    family: options.family,
    shape: 'tiny',
    out: options.out,
    dtype: 'f32',
    overrides: { vocab_size: options.vocabSize, hidden_size: hidden, head_dim: 8, num_attention_heads: 4, num_key_value_heads: 2, intermediate_size: 32, num_hidden_layers: 1, tie_word_embeddings: false },
    tokenizer: options.tokenizer,
  });
  const dimOf = new Map([...next.keys()].map((id, d) => [id, d]));
  const values = (name: string, shape: number[]): Float32Array => {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (name.endsWith('norm.weight')) data.fill(1);
    else if (name === 'model.embed_tokens.weight') for (const [id, d] of dimOf) data[id * hidden + d] = 1;
    else if (name === 'lm_head.weight') for (const [from, to] of next) data[to * hidden + dimOf.get(from)!] = LEAD;
    return data; // every projection and bias: zero
  };
  writeSafetensors(join(options.out, 'model.safetensors'), tensorPlan(config).map((t) => ({ name: t.name, shape: t.shape, data: values(t.name, t.shape) })));
  return config;
}

/** An F32 model.safetensors of the given tensors. */
function writeSafetensors(path: string, tensors: { name: string; shape: number[]; data: Float32Array }[]): void {
  const header: Json = { __metadata__: { format: 'pt' } };
  let at = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [at, at + t.data.byteLength] };
    at += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += ' ';
  const headerBytes = new TextEncoder().encode(json);
  const fd = openSync(path, 'w');
  try {
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
    writeSync(fd, len);
    writeSync(fd, headerBytes);
    for (const t of tensors) writeSync(fd, new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  } finally {
    closeSync(fd);
  }
}
