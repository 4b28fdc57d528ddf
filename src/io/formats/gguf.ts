// GGUF (v2, v3) header reader. The header (metadata, including the tokenizer's vocabulary, and
// the tensor table) is parsed incrementally from a ByteSource, reading chunks as the parser needs
// them; the tensor data that follows is not read here.
// Layout: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
import type { ByteSource } from '../files.ts';

export type GgufValue = number | bigint | boolean | string | GgufValue[];
export type GgufMetadata = Record<string, GgufValue>;

/** Storage types this runtime reads. */
export type GgufTensorType = 'F32' | 'F16' | 'BF16' | 'Q4_0' | 'Q4_1' | 'Q5_0' | 'Q5_1' | 'Q8_0' | 'Q4_K' | 'Q5_K' | 'Q6_K';

export interface GgufTensorInfo {
  name: string;
  /** Dimensions fastest-first as GGUF lists them (`ne[0]` = columns). */
  ne: number[];
  /** ggml type number (0 F32, 1 F16, 30 BF16, 8 Q8_0, ...: GGML_TYPE_NAMES). */
  ggmlType: number;
  type: GgufTensorType;
  /** Absolute byte offset of the tensor's data in the file. */
  offset: number;
  byteLength: number;
}

export interface GgufHeader {
  version: number;
  metadata: GgufMetadata;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Absolute offset of the tensor data section. */
  dataOffset: number;
}

/** ggml type numbers and names (for messages); the ones this runtime reads are in SUPPORTED. */
export const GGML_TYPE_NAMES: Record<number, string> = {
  0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 6: 'Q5_0', 7: 'Q5_1', 8: 'Q8_0', 9: 'Q8_1',
  10: 'Q2_K', 11: 'Q3_K', 12: 'Q4_K', 13: 'Q5_K', 14: 'Q6_K', 15: 'Q8_K',
  16: 'IQ2_XXS', 17: 'IQ2_XS', 18: 'IQ3_XXS', 19: 'IQ1_S', 20: 'IQ4_NL', 21: 'IQ3_S', 22: 'IQ2_S',
  23: 'IQ4_XS', 24: 'I8', 25: 'I16', 26: 'I32', 27: 'I64', 28: 'F64', 29: 'IQ1_M', 30: 'BF16',
  34: 'TQ1_0', 35: 'TQ2_0', 39: 'MXFP4',
};

/** The ggml types read, with their blocks: `bytes` per `block` elements (a row is whole blocks). */
const SUPPORTED: Record<number, { type: GgufTensorType; block: number; bytes: number }> = {
  0: { type: 'F32', block: 1, bytes: 4 },
  1: { type: 'F16', block: 1, bytes: 2 },
  30: { type: 'BF16', block: 1, bytes: 2 },
  2: { type: 'Q4_0', block: 32, bytes: 18 },
  3: { type: 'Q4_1', block: 32, bytes: 20 },
  6: { type: 'Q5_0', block: 32, bytes: 22 },
  7: { type: 'Q5_1', block: 32, bytes: 24 },
  8: { type: 'Q8_0', block: 32, bytes: 34 },
  12: { type: 'Q4_K', block: 256, bytes: 144 },
  13: { type: 'Q5_K', block: 256, bytes: 176 },
  14: { type: 'Q6_K', block: 256, bytes: 210 },
};
const SUPPORTED_NAMES = Object.values(SUPPORTED).map((s) => s.type).join(', ');

const enum ValueType {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
}

const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

/** The value types that hold integers (general.alignment must be one). */
const INTEGER_TYPES = new Set<number>([ValueType.U8, ValueType.I8, ValueType.U16, ValueType.I16, ValueType.U32, ValueType.I32, ValueType.U64, ValueType.I64]);

/** The fewest bytes one array item of a value type takes: a string is at least its u64 length, an array its type and length. */
function minItemBytes(type: number): number | undefined {
  if (type === ValueType.STRING) return 8;
  if (type === ValueType.ARRAY) return 12;
  return SCALAR_SIZE[type];
}

/** No real string (a token, a chat template) comes near this; a larger length is a broken file. */
const MAX_STRING_BYTES = 64 << 20;
/** Far more items than any vocabulary or merge list; JS arrays cannot reach 2^32 items anyway. */
const MAX_ARRAY_ITEMS = 1 << 26;
/** ggml uses 32; a larger power of two than this is not a real alignment. */
const MAX_ALIGNMENT = 1 << 24;

/** Reads a ByteSource front to back, fetching chunks as the parser asks for bytes. */
class ChunkedReader {
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private bufStart = 0; // file offset of buf[0]
  private pos = 0; // index into buf
  // ignoreBOM: keep a leading U+FEFF (Llama's vocabulary has a BOM token) instead of dropping it.
  private readonly decoder = new TextDecoder('utf-8', { ignoreBOM: true });

  constructor(private readonly source: ByteSource, private readonly chunkSize: number) {}

  get offset(): number {
    return this.bufStart + this.pos;
  }

  /** Bytes of the file after the position. */
  get left(): number {
    return this.source.size - this.offset;
  }

  /** True when `n` bytes are buffered at the position. */
  has(n: number): boolean {
    return this.pos + n <= this.buf.length;
  }

  async fill(n: number): Promise<void> {
    if (this.has(n)) return;
    const start = this.offset;
    const end = Math.min(this.source.size, start + Math.max(n, this.chunkSize));
    if (start + n > this.source.size) {
      throw new Error(`${this.source.name}: the GGUF header is truncated (needs ${start + n} bytes, file has ${this.source.size})`);
    }
    const keep = this.buf.subarray(this.pos);
    const fresh = await this.source.read(start + keep.length, end - start - keep.length);
    const next = new Uint8Array(end - start);
    next.set(keep, 0);
    next.set(fresh, keep.length);
    this.buf = next;
    this.view = new DataView(next.buffer, next.byteOffset, next.byteLength);
    this.bufStart = start;
    this.pos = 0;
  }

  async need(n: number): Promise<void> {
    if (!this.has(n)) await this.fill(n);
  }

  u8(): number { return this.view.getUint8(this.pos++); }
  i8(): number { return this.view.getInt8(this.pos++); }
  u16(): number { const v = this.view.getUint16(this.pos, true); this.pos += 2; return v; }
  i16(): number { const v = this.view.getInt16(this.pos, true); this.pos += 2; return v; }
  u32(): number { const v = this.view.getUint32(this.pos, true); this.pos += 4; return v; }
  i32(): number { const v = this.view.getInt32(this.pos, true); this.pos += 4; return v; }
  f32(): number { const v = this.view.getFloat32(this.pos, true); this.pos += 4; return v; }
  f64(): number { const v = this.view.getFloat64(this.pos, true); this.pos += 8; return v; }
  u64Big(): bigint { const v = this.view.getBigUint64(this.pos, true); this.pos += 8; return v; }
  i64Big(): bigint { const v = this.view.getBigInt64(this.pos, true); this.pos += 8; return v; }
  /** A u64 that must fit a JS number exactly (counts, lengths, offsets). */
  u64(what: string): number {
    const v = this.u64Big();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${this.source.name}: GGUF ${what} is too large (${v})`);
    return Number(v);
  }
  bytes(n: number): Uint8Array { const v = this.buf.subarray(this.pos, this.pos + n); this.pos += n; return v; }
  text(n: number): string { return this.decoder.decode(this.bytes(n)); }
}

/** Parses the GGUF header of `source`. Tensors of types not in SUPPORTED throw, naming the tensor and the type. */
export async function readGgufHeader(source: ByteSource, options: { chunkSize?: number } = {}): Promise<GgufHeader> {
  const r = new ChunkedReader(source, options.chunkSize ?? 1 << 20);
  await r.need(24);
  const magic = r.text(4);
  if (magic !== 'GGUF') throw new Error(`${source.name} is not a GGUF file (magic ${JSON.stringify(magic)})`);
  const version = r.u32();
  // A big-endian file (written for s390x) has the version's bytes swapped: 3 reads as 50331648.
  const swapped = ((version & 0xff) << 24 | (version & 0xff00) << 8 | (version >>> 8) & 0xff00 | version >>> 24) >>> 0;
  if (version !== swapped && swapped >= 1 && swapped <= 3) {
    throw new Error(`${source.name} is a big-endian GGUF file (version ${swapped}); only little-endian GGUF files are supported`);
  }
  if (version !== 2 && version !== 3) {
    throw new Error(`${source.name}: GGUF version ${version} is not supported (only versions 2 and 3)`);
  }
  const tensorCount = r.u64('tensor count');
  const kvCount = r.u64('metadata count');
  // Each entry takes at least a u64 name length and a u32 type (a tensor: also a u64 offset), so
  // counts that cannot fit in the file are errors now, not loops that run until the file ends.
  if (kvCount * 12 > r.left) throw new Error(`${source.name}: GGUF metadata count ${kvCount} does not fit in the file (${source.size} bytes); is it truncated?`);
  if (tensorCount * 24 > r.left) throw new Error(`${source.name}: GGUF tensor count ${tensorCount} does not fit in the file (${source.size} bytes); is it truncated?`);

  const readString = async (what: string): Promise<string> => {
    if (!r.has(8)) await r.fill(8);
    const n = r.u64(`${what} length`);
    if (n > r.left) {
      throw new Error(`${source.name}: GGUF ${what} has a length of ${n} bytes, more than the ${r.left} left in the file; is it truncated?`);
    }
    if (n > MAX_STRING_BYTES) throw new Error(`${source.name}: GGUF ${what} has a length of ${n} bytes (at most ${MAX_STRING_BYTES} are allowed)`);
    if (!r.has(n)) await r.fill(n);
    return r.text(n);
  };

  const readScalar = (type: number): GgufValue => {
    switch (type) {
      case ValueType.U8: return r.u8();
      case ValueType.I8: return r.i8();
      case ValueType.U16: return r.u16();
      case ValueType.I16: return r.i16();
      case ValueType.U32: return r.u32();
      case ValueType.I32: return r.i32();
      case ValueType.F32: return r.f32();
      case ValueType.BOOL: return r.u8() !== 0;
      case ValueType.F64: return r.f64();
      case ValueType.U64: case ValueType.I64: {
        const v = type === ValueType.U64 ? r.u64Big() : r.i64Big();
        return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
      }
      default: throw new Error(`${source.name}: unknown GGUF value type ${type}`);
    }
  };

  const readValue = async (type: number, key: string): Promise<GgufValue> => {
    if (type === ValueType.STRING) return readString(key);
    if (type === ValueType.ARRAY) {
      await r.need(12);
      const itemType = r.u32();
      const n = r.u64(`${key} array length`);
      const minBytes = minItemBytes(itemType);
      if (minBytes === undefined) throw new Error(`${source.name}: unknown GGUF value type ${itemType} for the items of key ${key}`);
      // Before allocating: a length the rest of the file cannot hold is a broken file.
      if (n * minBytes > r.left) {
        throw new Error(`${source.name}: GGUF key ${key} has an array of ${n} items, more than the ${r.left} bytes left in the file can hold; is it truncated?`);
      }
      if (n > MAX_ARRAY_ITEMS) throw new Error(`${source.name}: GGUF key ${key} has an array of ${n} items (at most ${MAX_ARRAY_ITEMS} are allowed)`);
      const out: GgufValue[] = new Array(n);
      const size = SCALAR_SIZE[itemType];
      if (size !== undefined) {
        for (let i = 0; i < n; ) {
          // Scalars: fill a run of them at once.
          const run = Math.min(n - i, Math.max(1, Math.floor((1 << 20) / size)));
          await r.need(run * size);
          for (let j = 0; j < run; j++) out[i++] = readScalar(itemType);
        }
      } else {
        for (let i = 0; i < n; i++) out[i] = await readValue(itemType, `${key}[${i}]`);
      }
      return out;
    }
    const size = SCALAR_SIZE[type];
    if (size === undefined) throw new Error(`${source.name}: unknown GGUF value type ${type} for key ${key}`);
    await r.need(size);
    return readScalar(type);
  };

  // No prototype: a key such as '__proto__' is stored as a key, not as the object's prototype.
  const metadata: GgufMetadata = Object.create(null);
  let alignmentType: number | undefined;
  for (let i = 0; i < kvCount; i++) {
    const key = await readString('metadata key');
    // llama.cpp rejects a file with a key twice; here the second would silently win.
    if (key in metadata) throw new Error(`${source.name}: GGUF metadata key ${key} appears twice`);
    await r.need(4);
    const type = r.u32();
    if (key === 'general.alignment') alignmentType = type;
    metadata[key] = await readValue(type, key);
  }
  const alignment = readAlignment(source.name, metadata['general.alignment'], alignmentType);

  const raw: { name: string; ne: number[]; ggmlType: number; relOffset: number }[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = await readString('tensor name');
    if (names.has(name)) throw new Error(`${source.name}: GGUF tensor ${name} appears twice in the tensor table`);
    names.add(name);
    await r.need(4);
    const nDims = r.u32();
    if (nDims > 4) throw new Error(`${source.name}: tensor ${name} has ${nDims} dimensions`);
    await r.need(8 * nDims + 12);
    const ne: number[] = [];
    for (let d = 0; d < nDims; d++) ne.push(r.u64(`dimension of ${name}`));
    const ggmlType = r.u32();
    const relOffset = r.u64(`offset of ${name}`);
    raw.push({ name, ne, ggmlType, relOffset });
  }
  const dataOffset = Math.ceil(r.offset / alignment) * alignment;

  const tensors: GgufTensorInfo[] = raw.map(({ name, ne, ggmlType, relOffset }) => {
    const supported = SUPPORTED[ggmlType];
    if (!supported) {
      const typeName = GGML_TYPE_NAMES[ggmlType] ?? `unknown type ${ggmlType}`;
      throw new Error(
        `${source.name}: tensor ${name} has GGML type ${typeName} (${ggmlType}); the supported types are ${SUPPORTED_NAMES}`,
      );
    }
    if (ne.length > 0 && ne[0] % supported.block !== 0) {
      throw new Error(`${source.name}: tensor ${name} (${supported.type}) has rows of ${ne[0]} elements, not a multiple of its ${supported.block}-element blocks`);
    }
    if (relOffset % alignment !== 0) throw new Error(`${source.name}: tensor ${name} is not aligned to ${alignment} bytes`);
    const elements = ne.reduce((a, b) => a * b, 1);
    const byteLength = (elements / supported.block) * supported.bytes;
    const offset = dataOffset + relOffset;
    if (offset + byteLength > source.size) {
      throw new Error(`${source.name}: tensor ${name} (bytes ${offset}..${offset + byteLength}) lies past the end of the file (${source.size} bytes); is the file truncated?`);
    }
    return { name, ne, ggmlType, type: supported.type, offset, byteLength };
  });
  return { version, metadata, tensors, alignment, dataOffset };
}

/** general.alignment (default 32): an integer-typed power of two, as ggml requires, up to MAX_ALIGNMENT. */
function readAlignment(file: string, value: GgufValue | undefined, type: number | undefined): number {
  if (value === undefined) return 32;
  const valid = type !== undefined && INTEGER_TYPES.has(type) && typeof value === 'number' && value >= 1 && value <= MAX_ALIGNMENT
    && 2 ** Math.round(Math.log2(value)) === value;
  if (!valid) {
    throw new Error(`${file}: invalid general.alignment ${typeof value === 'string' ? JSON.stringify(value) : String(value)} (must be an integer power of two up to ${MAX_ALIGNMENT})`);
  }
  return value;
}
