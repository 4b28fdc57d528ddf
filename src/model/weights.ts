// Weights onto the GPU, streamed tensor by tensor: each file is read once, front to back, in chunks
// of a few MiB, and every chunk goes to its GPU buffers with queue.writeBuffer at the right offset.
// The JS side never holds a whole file or a whole large tensor.
//
// 2-D matrices are stored per the `storage` option (see WeightStorage): GGUF's quantized blocks
// always as they are (decoded in the kernels); f32 / f16 / bf16 matrices either keep their bytes
// ('source') or are converted chunk by chunk while streaming: to f16 (the loader's default for
// Hugging Face models), to f32, or quantized to Q8_0 / Q4_0 blocks of 32 weights along a row.
// 1-D tensors (norm weights, biases) are tiny and are converted to f32 on the CPU (they must be
// f32, f16 or bf16, as GGUF files store them).
import type { GpuMatrix, GpuMatrixPart, WeightDType } from '../gpu/tensor.ts';
import type { LlamaConfig } from './config.ts';
import { maxBufferBytes, type BufferLimits, type GpuContext } from '../gpu/device.ts';
import { QUANT_FORMATS, checkWeightShape, isPairedQuant, isQuantized, pairQuantBlocks, splitMatrixRows, weightByteSize, weightRowBytes } from '../gpu/weight-layout.ts';
import { F16_MAX, f16ToF32, quantizeValues, toF16Clamped } from './quantize.ts';
export { f16ToF32 } from './quantize.ts'; // with the other f16 conversions; still importable from here
import { DEFAULT_CHUNK_SIZE, type ByteSource, type ModelFiles } from '../io/files.ts';
import { GLOBAL_TENSOR_NAMES, layerTensorNames } from './tensor-names.ts';

/** One tensor of the model, under its canonical Hugging Face name, wherever it is stored. */
export interface ModelTensor {
  /** Canonical HF name (`model.layers.0.self_attn.q_proj.weight`). */
  name: string;
  /** The name in the file (the GGUF name for GGUF). */
  sourceName: string;
  /** Row-major shape, HF order ([rows, cols] for a matrix). */
  shape: number[];
  dtype: WeightDType;
  /** The file holding it (a name ModelFiles.open answers to). */
  file: string;
  /** Absolute byte offset in `file`. */
  offset: number;
  byteLength: number;
}

/** What the weight upload needs to know about an opened model. */
export interface WeightSource {
  config: LlamaConfig;
  files: ModelFiles;
  tensors: ReadonlyMap<string, ModelTensor>;
  /** Sources already opened by openModel (reused so that URLs are not probed twice). */
  sources?: ReadonlyMap<string, ByteSource>;
}

export interface LoadProgress {
  /** Bytes of the source files read so far (tensor data only). */
  loadedBytes: number;
  totalBytes: number;
  /** Tensors completely read and handed to the GPU queue. */
  loadedTensors: number;
  totalTensors: number;
  /** 'download': bytes read from the source and handed to the GPU queue (the long part);
   * 'upload': the GPU has finished taking them (reported once, at the end). */
  phase: 'download' | 'upload';
}

/**
 * How f32 / f16 / bf16 matrices (Hugging Face weights) are kept on the GPU:
 * - 'f16': packed f16 (f32 and bf16 converted while streaming; values beyond ±65504 are clamped
 *   to it, with one warning giving their count);
 * - 'f32': f32 (twice the memory of f16; exact for f32 and bf16 files);
 * - 'source': the file's own type, bytes as they are;
 * - 'q8_0' / 'q4_0': quantized at load to ggml's Q8_0 (8.5 bits a weight) or Q4_0 (4.5 bits)
 *   blocks of 32 weights of a row. A matrix whose rows are not a multiple of 32 falls back to f16.
 * Block-quantized GGUF tensors always keep their file type; vectors are always f32.
 */
export type WeightStorage = 'f16' | 'f32' | 'source' | 'q8_0' | 'q4_0';

export const WEIGHT_STORAGES: readonly WeightStorage[] = ['f16', 'f32', 'source', 'q8_0', 'q4_0'];

/** Where one tensor lives on the GPU. */
export interface TensorStorage {
  dtype: WeightDType;
  /** Size of its GPU buffer (of all its buffers, for a split matrix). */
  bytes: number;
  /**
   * A matrix larger than the device's per-buffer / per-binding limit is split into buffers of whole
   * rows (GpuMatrix.parts): the rows and buffer size of each, in order. Absent: one buffer.
   */
  parts?: { rows: number; bytes: number }[];
}

/** The storage of every tensor a model uploads, by canonical name, and the total bytes. */
export interface WeightStoragePlan {
  tensors: Map<string, TensorStorage>;
  totalBytes: number;
}

/** The GPU storage type of tensor `t` under `storage` (see WeightStorage). */
export function storageDType(t: ModelTensor, storage: WeightStorage): WeightDType {
  if (t.shape.length === 1) return 'f32';
  if (isQuantized(t.dtype) || storage === 'source') return t.dtype;
  if (storage === 'q8_0' || storage === 'q4_0') return t.shape[1] % 32 === 0 ? storage : 'f16';
  return storage;
}

/**
 * Storage type and buffer size of each tensor a Llama model uploads (throws on an unknown `storage`).
 * With the device's `limits`, matrices over them are planned as split into parts of whole rows
 * (TensorStorage.parts), as uploadLlamaWeights stores them.
 */
export function planWeightStorage(
  config: LlamaConfig,
  tensors: ReadonlyMap<string, ModelTensor>,
  storage: WeightStorage = 'source',
  limits?: BufferLimits,
): WeightStoragePlan {
  if (!WEIGHT_STORAGES.includes(storage)) {
    throw new Error(`Unknown weight storage ${JSON.stringify(storage)}; expected one of ${WEIGHT_STORAGES.join(', ')}`);
  }
  const out = new Map<string, TensorStorage>();
  let totalBytes = 0;
  for (const { name } of requiredTensors(config)) {
    const t = tensors.get(name);
    if (!t) continue;
    const dtype = storageDType(t, storage);
    const elements = t.shape.reduce((a, b) => a * b, 1);
    let bytes = Math.max(4, t.shape.length === 1 ? elements * 4 : dtype === t.dtype ? align4(t.byteLength) : weightByteSize(dtype, elements));
    const parts = limits && t.shape.length === 2 && bytes > maxBufferBytes(limits)
      ? splitMatrixRows(dtype, t.shape[0], t.shape[1], maxBufferBytes(limits))
      : undefined;
    if (parts) {
      bytes = parts.reduce((sum, p) => sum + p.bytes, 0);
      out.set(name, { dtype, bytes, parts });
    } else {
      out.set(name, { dtype, bytes });
    }
    totalBytes += bytes;
  }
  return { tensors: out, totalBytes };
}

export type LoadProgressCallback = (p: LoadProgress) => void;

export interface LlamaLayerWeights {
  attnNorm: GPUBuffer;
  wq: GpuMatrix;
  wk: GpuMatrix;
  wv: GpuMatrix;
  wo: GpuMatrix;
  bq?: GPUBuffer;
  bk?: GPUBuffer;
  bv?: GPUBuffer;
  ffnNorm: GPUBuffer;
  wGate: GpuMatrix;
  wUp: GpuMatrix;
  wDown: GpuMatrix;
}

export interface LlamaWeights {
  tokenEmbedding: GpuMatrix;
  layers: LlamaLayerWeights[];
  outputNorm: GPUBuffer;
  /** The same object as tokenEmbedding when the embeddings are tied. */
  lmHead: GpuMatrix;
  destroy(): void;
}

export interface UploadOptions {
  /** Bytes per read from the source (default 4 MiB). */
  chunkSize?: number;
  /** Wait for the GPU queue after this many bytes were written, bounding staging memory (default 64 MiB). */
  flushBytes?: number;
  /** How f32 / f16 / bf16 matrices are stored (default 'source': as in the file). */
  storage?: WeightStorage;
  /** Receives warnings (values clamped to the f16 range); default console.warn. */
  onWarning?: (message: string) => void;
}

/** Feeds a split matrix's bytes to one sink per part, each getting exactly its part's bytes. */
class SplitSink implements TensorSink {
  private index = 0;
  private left: number;
  constructor(private readonly parts: { sink: TensorSink; bytes: number }[]) {
    this.left = parts[0].bytes;
  }

  write(piece: Uint8Array): void {
    let at = 0;
    while (at < piece.length) {
      if (this.left === 0) {
        if (this.index === this.parts.length - 1) throw new Error('SplitSink: more bytes than the parts hold');
        this.parts[this.index].sink.finish();
        this.index++;
        this.left = this.parts[this.index].bytes;
      }
      const n = Math.min(this.left, piece.length - at);
      this.parts[this.index].sink.write(piece.subarray(at, at + n));
      at += n;
      this.left -= n;
    }
  }

  finish(): void {
    // Parts the stream never reached (cannot happen for a complete tensor) are finished too.
    for (let i = this.index; i < this.parts.length; i++) this.parts[i].sink.finish();
    this.index = this.parts.length - 1;
  }
}

/**
 * The tensors a Llama model uses, with the shape each must have: [name, shape, kind]. With
 * `available` (how many tensors the file has), a config that needs more throws before the list
 * is built: a layer count of 1e9 would otherwise build billions of entries first.
 */
export function requiredTensors(config: LlamaConfig, available?: number): { name: string; shape: number[]; optional?: boolean }[] {
  const { hiddenSize: h, intermediateSize: f, numHeads, numKvHeads, headDim, vocabSize } = config;
  const q = numHeads * headDim;
  const kv = numKvHeads * headDim;
  type Required = { name: string; shape: number[]; optional?: boolean };
  const global: Required[] = [
    { name: GLOBAL_TENSOR_NAMES.tokenEmbedding, shape: [vocabSize, h] },
    { name: GLOBAL_TENSOR_NAMES.outputNorm, shape: [h] },
  ];
  if (!config.tieWordEmbeddings) global.push({ name: GLOBAL_TENSOR_NAMES.lmHead, shape: [vocabSize, h] });
  const layer = (l: number): Required[] => {
    const n = layerTensorNames(l);
    const tensors: Required[] = [
      { name: n.attnNorm, shape: [h] },
      { name: n.wq, shape: [q, h] },
      { name: n.wk, shape: [kv, h] },
      { name: n.wv, shape: [kv, h] },
      { name: n.wo, shape: [h, q] },
      { name: n.ffnNorm, shape: [h] },
      { name: n.wGate, shape: [f, h] },
      { name: n.wUp, shape: [f, h] },
      { name: n.wDown, shape: [h, f] },
    ];
    if (config.attentionBias) tensors.push({ name: n.bq, shape: [q] }, { name: n.bk, shape: [kv] }, { name: n.bv, shape: [kv] });
    return tensors;
  };
  const needed = global.length + config.numLayers * layer(0).length;
  if (available !== undefined && needed > available) {
    throw new Error(
      `The model has ${available} tensors, fewer than the ${needed} that ${config.numLayers} layers need: is the layer count (num_hidden_layers, block_count) right?`,
    );
  }
  const out = [...global];
  for (let l = 0; l < config.numLayers; l++) out.push(...layer(l));
  return out;
}

/**
 * Throws naming the first tensor that is missing or has the wrong shape, or a bias the forward
 * pass would not add (e.g. a GGUF of a model with biases converted as plain 'llama': running it
 * without them would give wrong text, not an error).
 */
export function checkTensors(config: LlamaConfig, tensors: ReadonlyMap<string, ModelTensor>): void {
  const required = requiredTensors(config, tensors.size);
  for (const { name, shape } of required) {
    const t = tensors.get(name);
    if (!t) throw new Error(`The model has no tensor ${name}`);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new Error(`Tensor ${name} (${t.sourceName}) has shape [${t.shape.join(', ')}]; the config needs [${shape.join(', ')}]`);
    }
  }
  const used = new Set(required.map((r) => r.name));
  for (const [name, t] of tensors) {
    if (name.endsWith('.bias') && !used.has(name)) {
      throw new Error(`Unsupported model: it has a bias ${t.sourceName} that a ${config.architecture} model of this config does not use`);
    }
  }
}

/** Sum of the byte sizes of the tensors a Llama model uploads. */
export function weightBytes(config: LlamaConfig, tensors: ReadonlyMap<string, ModelTensor>): number {
  let total = 0;
  for (const { name } of requiredTensors(config)) total += tensors.get(name)?.byteLength ?? 0;
  return total;
}

const align4 = (n: number) => Math.ceil(n / 4) * 4;

/** Receives a tensor's bytes in order. */
interface TensorSink {
  write(piece: Uint8Array): void;
  finish(): void;
}

/** Writes a matrix's raw bytes straight into its buffer; writes are 4-byte multiples at 4-byte offsets. */
class MatrixSink implements TensorSink {
  private written = 0;
  private readonly carry = new Uint8Array(4);
  private carryLength = 0;
  constructor(private readonly queue: GPUQueue, private readonly buffer: GPUBuffer) {}

  write(piece: Uint8Array): void {
    let at = 0;
    if (this.carryLength > 0) {
      const n = Math.min(4 - this.carryLength, piece.length);
      this.carry.set(piece.subarray(0, n), this.carryLength);
      this.carryLength += n;
      at = n;
      if (this.carryLength < 4) return;
      this.queue.writeBuffer(this.buffer, this.written, this.carry, 0, 4);
      this.written += 4;
      this.carryLength = 0;
    }
    const rest = piece.length - at;
    const aligned = rest - (rest % 4);
    if (aligned > 0) {
      // (Sources yield plain ArrayBuffer-backed views; the cast only satisfies the DOM typings.)
      this.queue.writeBuffer(this.buffer, this.written, piece as Uint8Array<ArrayBuffer>, at, aligned);
      this.written += aligned;
    }
    if (rest > aligned) {
      this.carry.set(piece.subarray(at + aligned), 0);
      this.carryLength = rest - aligned;
    }
  }

  finish(): void {
    if (this.carryLength > 0) {
      this.carry.fill(0, this.carryLength); // the buffer is padded to a multiple of 4 bytes
      this.queue.writeBuffer(this.buffer, this.written, this.carry, 0, 4);
      this.written += 4;
      this.carryLength = 0;
    }
  }
}

/**
 * A sink that gathers the streamed pieces into a staging array of `stagingBytes` and hands each
 * full one (and the rest at finish) to flush(), which writes it at the next output offset.
 */
abstract class StagedSink implements TensorSink {
  /** Allocated at the first write and dropped at finish: only the tensor being streamed holds one. */
  private pending: Uint8Array | null = null;
  private filled = 0;
  protected written = 0;
  constructor(private readonly stagingBytes: number) {}

  write(piece: Uint8Array): void {
    const pending = (this.pending ??= new Uint8Array(this.stagingBytes));
    let at = 0;
    while (at < piece.length) {
      const n = Math.min(piece.length - at, pending.length - this.filled);
      pending.set(piece.subarray(at, at + n), this.filled);
      this.filled += n;
      at += n;
      if (this.filled === pending.length) {
        this.filled = 0;
        this.flush(pending);
      }
    }
  }

  finish(): void {
    if (this.pending && this.filled > 0) this.flush(this.pending.subarray(0, this.filled));
    this.pending = null;
    this.filled = 0;
  }

  /** Writes `staged` (the staging array, or its filled start at finish) at offset `written`. */
  protected abstract flush(staged: Uint8Array): void;
}

/**
 * Writes a Q8_0 / Q4_0 matrix's file blocks into its buffer in the GPU's pairs of blocks
 * (pairQuantBlocks): pieces are gathered into whole pairs, each written where its two file blocks
 * would be; an odd last block is written at finish.
 */
class PairedBlockSink extends StagedSink {
  constructor(private readonly queue: GPUQueue, private readonly buffer: GPUBuffer, private readonly dtype: 'q8_0' | 'q4_0') {
    super(PAIRS_PER_WRITE * 2 * QUANT_FORMATS[dtype].blockBytes);
  }

  protected flush(staged: Uint8Array): void {
    const paired = pairQuantBlocks(this.dtype, staged, Math.floor(staged.length / QUANT_FORMATS[this.dtype].blockBytes), convertScratch.paired);
    this.queue.writeBuffer(this.buffer, this.written, paired as Uint8Array<ArrayBuffer>, 0, paired.length);
    this.written += paired.length;
  }
}

/** Pairs of blocks PairedBlockSink gathers per write (its output fits convertScratch.paired). */
const PAIRS_PER_WRITE = 1024;

/** Elements converted per step by ConvertingSink: a multiple of the 32-weight blocks. */
const CONVERT_ELEMENTS = 1 << 16;

/**
 * Converts an f32 / f16 / bf16 matrix while it streams: source bytes are gathered into a staging
 * array of CONVERT_ELEMENTS elements (whole Q8_0 / Q4_0 blocks, since rows are multiples of 32),
 * which is converted and written at the next output offset. Holds at most one step in JS.
 */
class ConvertingSink extends StagedSink {
  private readonly srcBytes: number;
  constructor(
    private readonly queue: GPUQueue,
    private readonly buffer: GPUBuffer,
    private readonly from: 'f32' | 'f16' | 'bf16',
    private readonly to: 'f32' | 'f16' | 'q8_0' | 'q4_0',
    private readonly stats: { clamped: number },
  ) {
    const srcBytes = from === 'f32' ? 4 : 2;
    super(CONVERT_ELEMENTS * srcBytes);
    this.srcBytes = srcBytes;
  }

  protected flush(staged: Uint8Array): void {
    const values = toFloat32(staged.subarray(0, staged.length - (staged.length % this.srcBytes)), this.from, convertScratch.values);
    let out: Uint8Array;
    if (this.to === 'f32') {
      out = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    } else if (this.to === 'f16') {
      const halves = convertScratch.halves.subarray(0, values.length + (values.length & 1)); // whole u32 words
      halves[halves.length - 1] = 0;
      this.stats.clamped += toF16Clamped(values, halves);
      out = new Uint8Array(halves.buffer, halves.byteOffset, halves.byteLength);
    } else {
      // Whole pairs of blocks but in the last step (CONVERT_ELEMENTS is an even number of blocks).
      const blocks = quantizeValues(this.to, values, convertScratch.blocks);
      out = pairQuantBlocks(this.to, blocks, values.length / QUANT_FORMATS[this.to].blockSize, convertScratch.paired);
    }
    // (writeBuffer copies the data at once, so the scratch arrays are free again on return.)
    this.queue.writeBuffer(this.buffer, this.written, out as Uint8Array<ArrayBuffer>, 0, out.length);
    this.written += out.length;
  }
}

/** Scratch arrays of ConvertingSink's and PairedBlockSink's steps, shared: steps run one at a time, synchronously. */
const convertScratch = {
  values: new Float32Array(CONVERT_ELEMENTS),
  halves: new Uint16Array(CONVERT_ELEMENTS),
  blocks: new Uint8Array((CONVERT_ELEMENTS / 32) * 34),
  paired: new Uint8Array((CONVERT_ELEMENTS / 32) * 34),
};

/** Collects a small 1-D tensor, converts it to f32 and writes it. */
class VectorSink implements TensorSink {
  private readonly bytes: Uint8Array;
  private filled = 0;
  constructor(private readonly queue: GPUQueue, private readonly buffer: GPUBuffer, private readonly tensor: ModelTensor) {
    this.bytes = new Uint8Array(tensor.byteLength);
  }
  write(piece: Uint8Array): void {
    this.bytes.set(piece, this.filled);
    this.filled += piece.length;
  }
  finish(): void {
    const f32 = toFloat32(this.bytes, this.tensor.dtype);
    this.queue.writeBuffer(this.buffer, 0, f32.buffer, f32.byteOffset, f32.byteLength);
  }
}

/** Element values of f32 / f16 / bf16 little-endian bytes, as f32 (into `out` when given: at least as long). */
export function toFloat32(bytes: Uint8Array, dtype: WeightDType, out?: Float32Array): Float32Array {
  if (isQuantized(dtype)) throw new Error(`toFloat32: ${dtype} is a block-quantized type`);
  const n = Math.floor(bytes.byteLength / (dtype === 'f32' ? 4 : 2));
  const result = out ? out.subarray(0, n) : new Float32Array(n);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'f32') {
    // A byte copy on little-endian hosts (all that run WebGPU); element by element otherwise.
    if (LITTLE_ENDIAN) new Uint8Array(result.buffer, result.byteOffset, 4 * n).set(bytes.subarray(0, 4 * n));
    else for (let i = 0; i < n; i++) result[i] = view.getFloat32(4 * i, true);
    return result;
  }
  if (dtype === 'bf16') {
    const u32 = new Uint32Array(result.buffer, result.byteOffset, n);
    for (let i = 0; i < n; i++) u32[i] = view.getUint16(2 * i, true) << 16;
    return result;
  }
  const table = (f16Table ??= Float32Array.from({ length: 65536 }, (_, h) => f16ToF32(h)));
  for (let i = 0; i < n; i++) result[i] = table[view.getUint16(2 * i, true)];
  return result;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** f32 value of every f16 bit pattern (256 KiB, built on first use). */
let f16Table: Float32Array | undefined;

/**
 * Throws unless a tensor's buffers fit the device's per-buffer and per-binding limits. A matrix
 * planned with the limits is split into parts of whole rows (TensorStorage.parts), so only one
 * whose single row is over the limit (or a plan made without the limits) is refused.
 */
export function checkTensorFits(name: string, storage: TensorStorage, limits: BufferLimits): void {
  const maxBuffer = maxBufferBytes(limits);
  const largest = storage.parts ? Math.max(...storage.parts.map((p) => p.bytes)) : storage.bytes;
  if (largest > maxBuffer) {
    const which = limits.maxStorageBufferBindingSize <= limits.maxBufferSize ? 'maxStorageBufferBindingSize' : 'maxBufferSize';
    throw new Error(
      `Tensor ${name} needs a ${storage.bytes}-byte GPU buffer (${storage.dtype}); this device allows at most ${maxBuffer} bytes per storage buffer (${which})`,
    );
  }
}

/** Tensors closer than this in a file are read in one streamed range (the gap is read and dropped). */
const MAX_GAP = 1 << 20;

/**
 * Uploads a Llama model's weights. Each file is streamed once (tensors in file order); the
 * progress callback gets 'download' after every chunk and one final 'upload' at totalBytes.
 */
export async function uploadLlamaWeights(
  ctx: GpuContext,
  model: WeightSource,
  onProgress?: LoadProgressCallback,
  options: UploadOptions = {},
): Promise<LlamaWeights> {
  const { device } = ctx;
  const { config, tensors } = model;
  checkTensors(config, tensors);
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  const flushBytes = options.flushBytes ?? 64 << 20;
  const plan = planWeightStorage(config, tensors, options.storage ?? 'source', ctx.limits);

  const required = requiredTensors(config);
  // Check every storage type and size before allocating anything.
  for (const { name } of required) {
    const t = tensors.get(name)!;
    if (t.shape.length === 1 && isQuantized(t.dtype)) {
      throw new Error(`Tensor ${name} (${t.sourceName}) is a vector stored as ${t.dtype}; vectors must be f32, f16 or bf16`);
    }
    if (t.shape.length === 2 && isQuantized(t.dtype)) {
      checkWeightShape(t.dtype, t.shape[0], t.shape[1], `Tensor ${name} (${t.sourceName})`);
      const expected = weightByteSize(t.dtype, t.shape[0] * t.shape[1]);
      if (align4(t.byteLength) !== expected) {
        throw new Error(`Tensor ${name} (${t.sourceName}) has ${t.byteLength} bytes; a ${t.dtype} [${t.shape.join(', ')}] matrix has ${expected}`);
      }
    }
    checkTensorFits(name, plan.tensors.get(name)!, ctx.limits);
  }

  const buffers: GPUBuffer[] = [];
  const matrices = new Map<string, GpuMatrix>();
  const vectors = new Map<string, GPUBuffer>();
  const jobs: { tensor: ModelTensor; sink: TensorSink }[] = [];
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
  const stats = { clamped: 0 };
  let totalBytes = 0;
  const totalTensors = required.length;
  let loadedTensors = 0;
  try {
    for (const { name, shape } of required) {
      const t = tensors.get(name)!;
      const target = plan.tensors.get(name)!;
      totalBytes += t.byteLength;
      if (shape.length === 1) {
        const buffer = device.createBuffer({ label: name, size: shape[0] * 4, usage });
        buffers.push(buffer);
        vectors.set(name, buffer);
        jobs.push({ tensor: t, sink: new VectorSink(device.queue, buffer, t) });
      } else {
        const sinkFor = (buffer: GPUBuffer): TensorSink => target.dtype === t.dtype
          ? isPairedQuant(target.dtype) ? new PairedBlockSink(device.queue, buffer, target.dtype) : new MatrixSink(device.queue, buffer)
          : new ConvertingSink(device.queue, buffer, t.dtype as 'f32' | 'f16' | 'bf16', target.dtype as 'f32' | 'f16' | 'q8_0' | 'q4_0', stats);
        if (!target.parts) {
          const buffer = device.createBuffer({ label: name, size: target.bytes, usage });
          buffers.push(buffer);
          matrices.set(name, { buffer, dtype: target.dtype, rows: shape[0], cols: shape[1] });
          jobs.push({ tensor: t, sink: sinkFor(buffer) });
        } else {
          // Over the device's buffer limits: one buffer per row range, fed the source rows it holds.
          const sourceRowBytes = weightRowBytes(t.dtype, shape[1]);
          const parts: GpuMatrixPart[] = [];
          const partSinks: { sink: TensorSink; bytes: number }[] = [];
          let firstRow = 0;
          for (const [i, p] of target.parts.entries()) {
            const buffer = device.createBuffer({ label: `${name} [part ${i}: rows ${firstRow}..${firstRow + p.rows - 1}]`, size: p.bytes, usage });
            buffers.push(buffer);
            parts.push({ buffer, firstRow, rows: p.rows });
            partSinks.push({ sink: sinkFor(buffer), bytes: p.rows * sourceRowBytes });
            firstRow += p.rows;
          }
          matrices.set(name, { buffer: parts[0].buffer, dtype: target.dtype, rows: shape[0], cols: shape[1], parts });
          jobs.push({ tensor: t, sink: new SplitSink(partSinks) });
        }
      }
    }

    let loaded = 0;
    let sinceFlush = 0;
    const byFile = new Map<string, typeof jobs>();
    for (const job of jobs) {
      const list = byFile.get(job.tensor.file) ?? [];
      list.push(job);
      byFile.set(job.tensor.file, list);
    }
    for (const [file, list] of byFile) {
      list.sort((a, b) => a.tensor.offset - b.tensor.offset);
      const source = model.sources?.get(file) ?? (await model.files.open(file));
      if (!source) throw new Error(`Missing file ${file}`);
      // Runs of tensors that are (nearly) contiguous in the file: one stream each.
      let i = 0;
      while (i < list.length) {
        let j = i + 1;
        let end = list[i].tensor.offset + list[i].tensor.byteLength;
        while (j < list.length && list[j].tensor.offset >= end && list[j].tensor.offset - end <= MAX_GAP) {
          end = list[j].tensor.offset + list[j].tensor.byteLength;
          j++;
        }
        const start = list[i].tensor.offset;
        let position = start; // file offset of the next byte the stream yields
        let k = i; // the first tensor not finished yet
        for await (const chunk of source.stream(start, end - start, chunkSize)) {
          const chunkEnd = position + chunk.length;
          while (k < j) {
            const { tensor, sink } = list[k];
            const tEnd = tensor.offset + tensor.byteLength;
            const from = Math.max(position, tensor.offset);
            const to = Math.min(chunkEnd, tEnd);
            if (from >= chunkEnd) break; // starts in a later chunk
            if (to > from) {
              sink.write(chunk.subarray(from - position, to - position));
              loaded += to - from;
              sinceFlush += to - from;
            }
            if (tEnd <= chunkEnd) {
              sink.finish();
              loadedTensors++;
              k++;
            } else break;
          }
          position = chunkEnd;
          onProgress?.({ loadedBytes: loaded, totalBytes, loadedTensors, totalTensors, phase: 'download' });
          if (sinceFlush >= flushBytes) {
            sinceFlush = 0;
            await device.queue.onSubmittedWorkDone();
          }
        }
        if (k < j) throw new Error(`${file}: the stream ended before tensor ${list[k].tensor.sourceName} was complete`);
        i = j;
      }
    }
    await device.queue.onSubmittedWorkDone();
    if (stats.clamped > 0) {
      (options.onWarning ?? console.warn)(
        `${stats.clamped} weight${stats.clamped === 1 ? '' : 's'} beyond the f16 range were clamped to ±${F16_MAX} when converting to f16`,
      );
    }
    onProgress?.({ loadedBytes: loaded, totalBytes, loadedTensors, totalTensors, phase: 'upload' });
  } catch (e) {
    for (const b of buffers) b.destroy();
    throw e;
  }

  const layers: LlamaLayerWeights[] = [];
  for (let l = 0; l < config.numLayers; l++) {
    const n = layerTensorNames(l);
    layers.push({
      attnNorm: vectors.get(n.attnNorm)!,
      wq: matrices.get(n.wq)!,
      wk: matrices.get(n.wk)!,
      wv: matrices.get(n.wv)!,
      wo: matrices.get(n.wo)!,
      bq: vectors.get(n.bq),
      bk: vectors.get(n.bk),
      bv: vectors.get(n.bv),
      ffnNorm: vectors.get(n.ffnNorm)!,
      wGate: matrices.get(n.wGate)!,
      wUp: matrices.get(n.wUp)!,
      wDown: matrices.get(n.wDown)!,
    });
  }
  const tokenEmbedding = matrices.get(GLOBAL_TENSOR_NAMES.tokenEmbedding)!;
  let destroyed = false;
  return {
    tokenEmbedding,
    layers,
    outputNorm: vectors.get(GLOBAL_TENSOR_NAMES.outputNorm)!,
    lmHead: config.tieWordEmbeddings ? tokenEmbedding : matrices.get(GLOBAL_TENSOR_NAMES.lmHead)!,
    destroy() {
      if (destroyed) return;
      destroyed = true;
      for (const b of buffers) b.destroy();
    },
  };
}
