// Test helpers: the repository's test models, and tiny GGUF / safetensors files built in memory.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../..', import.meta.url));
export const STORIES_GGUF = `${root}public/models/stories260K/stories260K.gguf`;
export const STORIES_HF = `${root}public/models/stories260K/hf`;
export const TINY_GGUF = `${root}test/fixtures/llama-2-tiny-random/llama-2-tiny-random.gguf`;
export const TINY_HF = `${root}test/fixtures/llama-2-tiny-random/hf`;

export function readBytes(path: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(readFileSync(path));
}

/** A GGUF metadata value with an explicit GGUF type. */
export type GgufKv =
  | { type: 'u32'; value: number }
  | { type: 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'string[]'; value: string[] }
  | { type: 'f32[]'; value: number[] }
  | { type: 'i32[]'; value: number[] };

export interface GgufTensorSpec {
  name: string;
  ne: number[];
  ggmlType: number;
  data: Uint8Array;
}

/** Writes a GGUF v3 file (alignment 32, or the u32 `general.alignment` given). */
export function buildGguf(kvs: Record<string, GgufKv>, tensors: GgufTensorSpec[]): Uint8Array {
  const align = kvs['general.alignment']?.type === 'u32' ? (kvs['general.alignment'].value as number) : 32;
  const parts: number[] = [];
  const enc = new TextEncoder();
  const u32 = (v: number) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); parts.push(...b); };
  const u64 = (v: number) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(v), true); parts.push(...b); };
  const f32 = (v: number) => { const b = new Uint8Array(4); new DataView(b.buffer).setFloat32(0, v, true); parts.push(...b); };
  const str = (s: string) => { const b = enc.encode(s); u64(b.length); parts.push(...b); };
  parts.push(...enc.encode('GGUF'));
  u32(3);
  u64(tensors.length);
  u64(Object.keys(kvs).length);
  for (const [key, kv] of Object.entries(kvs)) {
    str(key);
    switch (kv.type) {
      case 'u32': u32(4); u32(kv.value); break;
      case 'f32': u32(6); f32(kv.value); break;
      case 'bool': u32(7); parts.push(kv.value ? 1 : 0); break;
      case 'string': u32(8); str(kv.value); break;
      case 'string[]': u32(9); u32(8); u64(kv.value.length); kv.value.forEach(str); break;
      case 'f32[]': u32(9); u32(6); u64(kv.value.length); kv.value.forEach(f32); break;
      case 'i32[]': u32(9); u32(5); u64(kv.value.length); kv.value.forEach(u32); break;
    }
  }
  let rel = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    offsets.push(rel);
    rel += Math.ceil(t.data.length / align) * align;
  }
  tensors.forEach((t, i) => {
    str(t.name);
    u32(t.ne.length);
    t.ne.forEach(u64);
    u32(t.ggmlType);
    u64(offsets[i]);
  });
  const dataOffset = Math.ceil(parts.length / align) * align;
  const out = new Uint8Array(dataOffset + rel);
  out.set(parts, 0);
  tensors.forEach((t, i) => out.set(t.data, dataOffset + offsets[i]));
  return out;
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
