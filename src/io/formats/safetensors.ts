// safetensors reader: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range (relative to the end of the header), then the data. Only the header
// is read here; tensor bytes are streamed later. Sharded checkpoints list their shards in
// model.safetensors.index.json (`weight_map`: tensor name -> shard file).
import { readJsonFile, type ByteSource, type ModelFiles } from '../files.ts';

/** The dtypes whose tensors the runtime can load. */
export type SafetensorsDType = 'F32' | 'F16' | 'BF16';

export interface SafetensorsTensorInfo {
  name: string;
  /** Any of the format's dtypes: a checkpoint may hold tensors the model never uses (I64 buffers, F8 scales). */
  dtype: string;
  /** Row-major shape ([rows, cols] for a matrix). */
  shape: number[];
  /** The shard file holding the tensor. */
  file: string;
  /** Absolute byte offset in `file`. */
  offset: number;
  byteLength: number;
}

export interface SafetensorsHeader {
  file: string;
  metadata: Record<string, string>;
  tensors: SafetensorsTensorInfo[];
  /** Absolute offset where the data section begins (8 + header length). */
  dataOffset: number;
}

/** Bytes per element of each dtype the format defines. */
const DTYPE_BYTES: Record<string, number> = {
  BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1, I16: 2, U16: 2, F16: 2, BF16: 2, I32: 4, U32: 4, F32: 4, I64: 8, U64: 8, F64: 8,
};

export function isLoadableDType(dtype: string): dtype is SafetensorsDType {
  return dtype === 'F32' || dtype === 'F16' || dtype === 'BF16';
}

/** Headers over 100 MB are certainly not real (the format's own reference rejects them too). */
const MAX_HEADER_BYTES = 100_000_000;

export async function readSafetensorsHeader(source: ByteSource): Promise<SafetensorsHeader> {
  const file = source.name;
  if (source.size < 8) throw new Error(`${file} is too small to be a safetensors file (${source.size} bytes)`);
  const lenBytes = await source.read(0, 8);
  const headerLength = Number(new DataView(lenBytes.buffer, lenBytes.byteOffset, 8).getBigUint64(0, true));
  if (headerLength > MAX_HEADER_BYTES || 8 + headerLength > source.size) {
    throw new Error(`${file} is not a valid safetensors file (header length ${headerLength}, file ${source.size} bytes)`);
  }
  const dataOffset = 8 + headerLength;
  const headerText = new TextDecoder().decode(await source.read(8, headerLength));
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(headerText) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${file}: the safetensors header is not valid JSON: ${(e as Error).message}`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw new Error(`${file}: the safetensors header is not a JSON object`);
  }
  // JSON.parse keeps the last of two equal keys: a second entry for a tensor would replace the
  // first without a word (the format's reference implementation rejects it).
  const duplicate = firstDuplicateKey(headerText);
  if (duplicate !== null) throw new Error(`${file}: the safetensors header lists tensor ${duplicate} twice`);
  // No prototype: a '__proto__' key is a key like any other.
  const metadata: Record<string, string> = Object.create(null);
  const tensors: SafetensorsTensorInfo[] = [];
  for (const [name, value] of Object.entries(header)) {
    if (name === '__metadata__') {
      if (value !== null && typeof value === 'object') for (const [k, v] of Object.entries(value)) metadata[k] = v as string;
      continue;
    }
    const entry = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (!entry || typeof entry.dtype !== 'string' || !Array.isArray(entry.shape) || !Array.isArray(entry.data_offsets)) {
      throw new Error(`${file}: malformed header entry for tensor ${name}`);
    }
    const dtype = entry.dtype;
    const shape = entry.shape as unknown[];
    const offsets = entry.data_offsets as unknown[];
    if (!shape.every(isCount)) {
      throw new Error(`${file}: tensor ${name} has shape ${JSON.stringify(shape)}; dimensions must be non-negative integers`);
    }
    if (offsets.length !== 2 || !offsets.every(isCount) || offsets[1] < offsets[0]) {
      throw new Error(`${file}: tensor ${name} has data_offsets ${JSON.stringify(offsets)}; they must be two non-negative integers [begin, end] with end >= begin`);
    }
    const [begin, end] = offsets;
    const elements = shape.reduce((a, b) => a * b, 1);
    // A dtype newer than this table (F8_E8M0, F4, ...): its size is not checked; it is never loaded.
    const byteLength = Object.hasOwn(DTYPE_BYTES, dtype) ? elements * DTYPE_BYTES[dtype] : end - begin;
    if (end - begin !== byteLength) {
      throw new Error(`${file}: tensor ${name} has data_offsets [${begin}, ${end}] that do not match ${dtype} ${JSON.stringify(shape)}`);
    }
    if (dataOffset + end > source.size) {
      throw new Error(`${file}: tensor ${name} lies past the end of the file (${source.size} bytes); is the file truncated?`);
    }
    tensors.push({ name, dtype, shape, file, offset: dataOffset + begin, byteLength });
  }
  return { file, metadata, tensors, dataOffset };
}

/** A dimension or byte offset: a non-negative integer that a JS number holds exactly. */
function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/**
 * The first key that the top-level object of the JSON text `text` has twice, or null. The text
 * is known to parse; nested objects are skipped (their keys are not tensor names).
 */
function firstDuplicateKey(text: string): string | null {
  const seen = new Set<string>();
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; text[i] !== '"'; i++) if (text[i] === '\\') i++;
      if (depth !== 1) continue;
      // A string at depth 1 followed by ':' is a key of the top-level object.
      let j = i + 1;
      while (/\s/.test(text[j] ?? '')) j++;
      if (text[j] !== ':') continue;
      const key = JSON.parse(text.slice(start, i + 1)) as string;
      if (seen.has(key)) return key;
      seen.add(key);
    } else if (c === '{' || c === '[') {
      depth++;
    } else if (c === '}' || c === ']') {
      depth--;
    }
  }
  return null;
}

const INDEX_FILE = 'model.safetensors.index.json';

/**
 * The shard file of tensor `tensor` in the index's weight_map, checked to be a plain relative
 * path inside the model folder: it becomes part of a URL or a disk path, so '//host/x',
 * '../../other-repo/x' or '/x' would read a file of another host, repository or folder.
 */
function shardName(tensor: string, shard: unknown): string {
  const entry = `weight_map[${JSON.stringify(tensor)}] = ${JSON.stringify(shard) ?? String(shard)}`;
  if (typeof shard !== 'string' || shard === '') {
    throw new Error(`${INDEX_FILE}: ${entry} is not a file name`);
  }
  if (shard.startsWith('/') || /[\\:]/.test(shard) || shard.split('/').some((part) => part === '' || part === '..')) {
    throw new Error(`${INDEX_FILE}: ${entry} is not a file inside the model folder (no leading '/', '..', '\\', ':' or empty path parts)`);
  }
  return shard;
}

/**
 * The tensors of a checkpoint: `model.safetensors`, or the shards listed in
 * `model.safetensors.index.json`. Throws naming the missing file when neither exists. The shard
 * sources it opens are added to `opened` when given (to stream from them later).
 */
export async function readSafetensorsCheckpoint(files: ModelFiles, opened?: Map<string, ByteSource>): Promise<SafetensorsTensorInfo[]> {
  const index = await readJsonFile<{ weight_map?: unknown }>(files, INDEX_FILE, { optional: true });
  if (index !== null) {
    const rawMap = index?.weight_map;
    if (!rawMap || typeof rawMap !== 'object' || Array.isArray(rawMap)) throw new Error(`${INDEX_FILE} has no weight_map`);
    const weightMap: Record<string, string> = Object.create(null);
    for (const [name, shard] of Object.entries(rawMap)) weightMap[name] = shardName(name, shard);
    const shardNames = [...new Set(Object.values(weightMap))];
    const out: SafetensorsTensorInfo[] = [];
    for (const shard of shardNames) {
      const source = await files.open(shard);
      if (!source) throw new Error(`Missing shard ${shard} (listed in model.safetensors.index.json)`);
      opened?.set(shard, source);
      const header = await readSafetensorsHeader(source);
      const inShard = new Map(header.tensors.map((t) => [t.name, t]));
      for (const [name, file] of Object.entries(weightMap)) {
        if (file !== shard) continue;
        const info = inShard.get(name);
        if (!info) throw new Error(`Tensor ${name} is listed in model.safetensors.index.json under ${shard} but is not in that file`);
        out.push(info);
      }
    }
    return out;
  }
  const single = await files.open('model.safetensors');
  if (!single) throw new Error(`Missing model.safetensors (or model.safetensors.index.json) in ${files.id}`);
  opened?.set('model.safetensors', single);
  return (await readSafetensorsHeader(single)).tensors;
}
