// Test helpers: the repository's test models, and tiny GGUF / safetensors files built in memory.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildGgufBytes, type GgufKv } from '../../scripts/gguf-writer.ts';
import type { LlamaConfig } from '../../src/model/config.ts';

export const root = fileURLToPath(new URL('../..', import.meta.url));
export const STORIES_GGUF = `${root}public/models/stories260K/stories260K.gguf`;
export const STORIES_HF = `${root}public/models/stories260K/hf`;
export const TINY_GGUF = `${root}test/fixtures/llama-2-tiny-random/llama-2-tiny-random.gguf`;
export const TINY_HF = `${root}test/fixtures/llama-2-tiny-random/hf`;

export function readBytes(path: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(readFileSync(path));
}

export type { GgufKv } from '../../scripts/gguf-writer.ts';

export interface GgufTensorSpec {
  name: string;
  ne: number[];
  ggmlType: number;
  data: Uint8Array;
}

/** Writes a GGUF v3 file in memory (alignment 32, or the u32 `general.alignment` given): our writer, scripts/gguf-writer.ts. */
export function buildGguf(kvs: Record<string, GgufKv>, tensors: GgufTensorSpec[]): Uint8Array {
  return buildGgufBytes(kvs, tensors.map((t) => ({ ...t, byteLength: t.data.length })));
}

/** Writes a safetensors file. */
export function buildSafetensors(tensors: { name: string; dtype: string; shape: number[]; data: Uint8Array }[]): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let at = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.data.length] };
    at += t.data.length;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += ' ';
  const headerBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + headerBytes.length + at);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let pos = 8 + headerBytes.length;
  for (const t of tensors) {
    out.set(t.data, pos);
    pos += t.data.length;
  }
  return out;
}

/**
 * GGUF metadata of a tiny random Llama: its dims, plus a SentencePiece-style vocabulary of
 * placeholder pieces (<unk>, <s>, </s>, then ▁t0, ▁t1, ...) so the GGUF tokenizer path can load it.
 */
export function tinyLlamaGgufKvs(c: LlamaConfig): Record<string, GgufKv> {
  const tokens = ['<unk>', '<s>', '</s>', ...Array.from({ length: c.vocabSize - 3 }, (_, i) => `▁t${i}`)];
  return {
    'general.architecture': { type: 'string', value: 'llama' },
    'llama.embedding_length': { type: 'u32', value: c.hiddenSize },
    'llama.feed_forward_length': { type: 'u32', value: c.intermediateSize },
    'llama.block_count': { type: 'u32', value: c.numLayers },
    'llama.attention.head_count': { type: 'u32', value: c.numHeads },
    'llama.attention.head_count_kv': { type: 'u32', value: c.numKvHeads },
    'llama.attention.key_length': { type: 'u32', value: c.headDim },
    'llama.attention.value_length': { type: 'u32', value: c.headDim },
    'llama.rope.dimension_count': { type: 'u32', value: c.headDim },
    'llama.context_length': { type: 'u32', value: c.contextLength },
    'llama.attention.layer_norm_rms_epsilon': { type: 'f32', value: c.rmsNormEps },
    'llama.rope.freq_base': { type: 'f32', value: c.ropeTheta },
    'tokenizer.ggml.model': { type: 'string', value: 'llama' },
    'tokenizer.ggml.tokens': { type: 'string[]', value: tokens },
    'tokenizer.ggml.scores': { type: 'f32[]', value: tokens.map((_, i) => -i) },
    'tokenizer.ggml.token_type': { type: 'i32[]', value: tokens.map((_, i) => (i === 0 ? 2 : i < 3 ? 3 : 1)) },
    'tokenizer.ggml.bos_token_id': { type: 'u32', value: 1 },
    'tokenizer.ggml.eos_token_id': { type: 'u32', value: 2 },
  };
}
