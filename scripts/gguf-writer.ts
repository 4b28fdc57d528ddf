// Our GGUF (v3) writer: metadata and tensor table encoded here, tensor data streamed to the file
// tensor by tensor (each tensor's bytes come from a callback that may write them in chunks), so a
// model of any size is written in bounded memory. Every tensor starts at a multiple of the
// alignment (`general.alignment`, default 32), as the format requires.
// Layout: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
import { closeSync, openSync, writeSync } from 'node:fs';

/** A GGUF metadata value with an explicit GGUF type. */
export type GgufKv =
  | { type: 'u32'; value: number }
  | { type: 'i32'; value: number }
  | { type: 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'string[]'; value: string[] }
  | { type: 'f32[]'; value: number[] }
  | { type: 'i32[]'; value: number[] };

/** One tensor's entry in the table: dims fastest-first (`ne[0]` = columns), ggml type, data size. */
export interface GgufTensorEntry {
  name: string;
  ne: number[];
  ggmlType: number;
  byteLength: number;
}

/** The ggml type numbers of the storage types the generator writes. */
export const GGML_TYPES = { f32: 0, f16: 1, q4_0: 2, q4_1: 3, q5_0: 6, q5_1: 7, q8_0: 8, q4_k: 12, q5_k: 13, q6_k: 14 } as const;

class ByteBuilder {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private readonly enc = new TextEncoder();

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v: number) { this.room(1); this.buf[this.length++] = v; }
  u32(v: number) { this.room(4); this.view.setUint32(this.length, v, true); this.length += 4; }
  i32(v: number) { this.room(4); this.view.setInt32(this.length, v, true); this.length += 4; }
  f32(v: number) { this.room(4); this.view.setFloat32(this.length, v, true); this.length += 4; }
  u64(v: number) { this.room(8); this.view.setBigUint64(this.length, BigInt(v), true); this.length += 8; }
  bytes(b: Uint8Array) { this.room(b.length); this.buf.set(b, this.length); this.length += b.length; }
  str(s: string) { const b = this.enc.encode(s); this.u64(b.length); this.bytes(b); }
  pad(align: number) { const n = (align - (this.length % align)) % align; this.room(n); this.buf.fill(0, this.length, this.length + n); this.length += n; }
  result(): Uint8Array { return this.buf.slice(0, this.length); }
}

export function ggufAlignment(kvs: Record<string, GgufKv>): number {
  const a = kvs['general.alignment'];
  return a?.type === 'u32' ? a.value : 32;
}

/**
 * The header (magic, version, counts, metadata, tensor table), padded to the alignment, and each
 * tensor's offset relative to the data section (which starts right after the header).
 */
export function encodeGgufHeader(kvs: Record<string, GgufKv>, tensors: GgufTensorEntry[]): { header: Uint8Array; offsets: number[]; dataBytes: number } {
  const align = ggufAlignment(kvs);
  const b = new ByteBuilder();
  b.bytes(new TextEncoder().encode('GGUF'));
  b.u32(3);
  b.u64(tensors.length);
  b.u64(Object.keys(kvs).length);
  for (const [key, kv] of Object.entries(kvs)) {
    b.str(key);
    switch (kv.type) {
      case 'u32': b.u32(4); b.u32(kv.value); break;
      case 'i32': b.u32(5); b.i32(kv.value); break;
      case 'f32': b.u32(6); b.f32(kv.value); break;
      case 'bool': b.u32(7); b.u8(kv.value ? 1 : 0); break;
      case 'string': b.u32(8); b.str(kv.value); break;
      case 'string[]': b.u32(9); b.u32(8); b.u64(kv.value.length); kv.value.forEach((s) => b.str(s)); break;
      case 'f32[]': b.u32(9); b.u32(6); b.u64(kv.value.length); kv.value.forEach((v) => b.f32(v)); break;
      case 'i32[]': b.u32(9); b.u32(5); b.u64(kv.value.length); kv.value.forEach((v) => b.i32(v)); break;
    }
  }
  const offsets: number[] = [];
  let rel = 0;
  for (const t of tensors) {
    offsets.push(rel);
    rel += Math.ceil(t.byteLength / align) * align;
  }
  tensors.forEach((t, i) => {
    b.str(t.name);
    b.u32(t.ne.length);
    t.ne.forEach((n) => b.u64(n));
    b.u32(t.ggmlType);
    b.u64(offsets[i]);
  });
  b.pad(align);
  return { header: b.result(), offsets, dataBytes: rel };
}

/** A tensor to stream: `write` is called once and must emit exactly `byteLength` bytes through `emit`. */
export interface GgufStreamTensor extends GgufTensorEntry {
  write(emit: (bytes: Uint8Array) => void): void;
}

/** Writes a GGUF file at `path`, streaming each tensor's data; returns the file size. */
export function writeGgufFile(path: string, kvs: Record<string, GgufKv>, tensors: GgufStreamTensor[]): number {
  const align = ggufAlignment(kvs);
  const { header, dataBytes } = encodeGgufHeader(kvs, tensors);
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, header);
    const zeros = new Uint8Array(align);
    for (const t of tensors) {
      let written = 0;
      t.write((bytes) => {
        writeSync(fd, bytes);
        written += bytes.length;
      });
      if (written !== t.byteLength) throw new Error(`GGUF writer: tensor ${t.name} wrote ${written} bytes, declared ${t.byteLength}`);
      const pad = (align - (written % align)) % align;
      if (pad) writeSync(fd, zeros, 0, pad);
    }
  } finally {
    closeSync(fd);
  }
  return header.length + dataBytes;
}

/** The same file in memory (for small test models). */
export function buildGgufBytes(kvs: Record<string, GgufKv>, tensors: (GgufTensorEntry & { data: Uint8Array })[]): Uint8Array {
  const { header, offsets, dataBytes } = encodeGgufHeader(kvs, tensors);
  const out = new Uint8Array(header.length + dataBytes);
  out.set(header, 0);
  tensors.forEach((t, i) => out.set(t.data.subarray(0, t.byteLength), header.length + offsets[i]));
  return out;
}
