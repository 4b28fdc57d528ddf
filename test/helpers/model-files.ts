// Test helpers: the repository's test models, and tiny GGUF / safetensors files built in memory.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildGgufBytes, type GgufKv } from '../../scripts/gguf-writer.ts';

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
