// Weights onto the GPU, streamed tensor by tensor: each file is read once, front to back, in chunks
// of a few MiB, and every chunk goes to its GPU buffers with queue.writeBuffer at the right offset.
// The JS side never holds a whole file or a whole large tensor.
//
// 2-D matrices keep their storage bytes (f32; f16 / bf16 packed two per u32); 1-D tensors (norm
// weights, biases) are tiny and are converted to f32 on the CPU.
import type { GpuContext } from '../gpu/device.ts';
import type { GpuMatrix, WeightDType } from '../gpu/tensor.ts';
import type { LlamaConfig } from './config.ts';
import { DEFAULT_CHUNK_SIZE, type ByteSource, type ModelFiles } from './files.ts';
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
  loadedBytes: number;
  totalBytes: number;
  /** 'download': bytes read from the source and handed to the GPU queue (the long part);
   * 'upload': the GPU has finished taking them (reported once, at the end). */
  phase: 'download' | 'upload';
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
}

/** The tensors a Llama model uses, with the shape each must have: [name, shape, kind]. */
export function requiredTensors(config: LlamaConfig): { name: string; shape: number[]; optional?: boolean }[] {
  const { hiddenSize: h, intermediateSize: f, numHeads, numKvHeads, headDim, vocabSize } = config;
  const q = numHeads * headDim;
  const kv = numKvHeads * headDim;
  const out: { name: string; shape: number[]; optional?: boolean }[] = [
    { name: GLOBAL_TENSOR_NAMES.tokenEmbedding, shape: [vocabSize, h] },
    { name: GLOBAL_TENSOR_NAMES.outputNorm, shape: [h] },
  ];
  if (!config.tieWordEmbeddings) out.push({ name: GLOBAL_TENSOR_NAMES.lmHead, shape: [vocabSize, h] });
  for (let l = 0; l < config.numLayers; l++) {
    const n = layerTensorNames(l);
    out.push(
      { name: n.attnNorm, shape: [h] },
      { name: n.wq, shape: [q, h] },
      { name: n.wk, shape: [kv, h] },
      { name: n.wv, shape: [kv, h] },
      { name: n.wo, shape: [h, q] },
      { name: n.ffnNorm, shape: [h] },
      { name: n.wGate, shape: [f, h] },
      { name: n.wUp, shape: [f, h] },
      { name: n.wDown, shape: [h, f] },
    );
    if (config.attentionBias) out.push({ name: n.bq, shape: [q] }, { name: n.bk, shape: [kv] }, { name: n.bv, shape: [kv] });
  }
  return out;
}

/** Throws naming the first tensor that is missing or has the wrong shape. */
export function checkTensors(config: LlamaConfig, tensors: ReadonlyMap<string, ModelTensor>): void {
  for (const { name, shape } of requiredTensors(config)) {
    const t = tensors.get(name);
    if (!t) throw new Error(`The model has no tensor ${name}`);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new Error(`Tensor ${name} (${t.sourceName}) has shape [${t.shape.join(', ')}]; the config needs [${shape.join(', ')}]`);
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

/** Element values of f32 / f16 / bf16 little-endian bytes, as f32. */
export function toFloat32(bytes: Uint8Array, dtype: WeightDType): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'f32') {
    const out = new Float32Array(bytes.byteLength / 4);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
    return out;
  }
  const out = new Float32Array(bytes.byteLength / 2);
  if (dtype === 'bf16') {
    const u32 = new Uint32Array(out.buffer);
    for (let i = 0; i < out.length; i++) u32[i] = view.getUint16(2 * i, true) << 16;
    return out;
  }
  for (let i = 0; i < out.length; i++) out[i] = f16ToF32(view.getUint16(2 * i, true));
  return out;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
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
  const maxBuffer = Math.min(ctx.limits.maxStorageBufferBindingSize, ctx.limits.maxBufferSize);

  const required = requiredTensors(config);
  // Check every size before allocating anything.
  for (const { name } of required) {
    const t = tensors.get(name)!;
    const size = t.shape.length === 1 ? t.shape[0] * 4 : align4(t.byteLength);
    if (size > maxBuffer) {
      throw new Error(
        `Tensor ${name} needs a ${size}-byte GPU buffer; this device allows at most ${maxBuffer} bytes per storage buffer`,
      );
    }
  }

  const buffers: GPUBuffer[] = [];
  const matrices = new Map<string, GpuMatrix>();
  const vectors = new Map<string, GPUBuffer>();
  const jobs: { tensor: ModelTensor; sink: TensorSink }[] = [];
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
  let totalBytes = 0;
  try {
    for (const { name, shape } of required) {
      const t = tensors.get(name)!;
      totalBytes += t.byteLength;
      if (shape.length === 1) {
        const buffer = device.createBuffer({ label: name, size: shape[0] * 4, usage });
        buffers.push(buffer);
        vectors.set(name, buffer);
        jobs.push({ tensor: t, sink: new VectorSink(device.queue, buffer, t) });
      } else {
        const buffer = device.createBuffer({ label: name, size: Math.max(4, align4(t.byteLength)), usage });
        buffers.push(buffer);
        matrices.set(name, { buffer, dtype: t.dtype, rows: shape[0], cols: shape[1] });
        jobs.push({ tensor: t, sink: new MatrixSink(device.queue, buffer) });
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
              k++;
            } else break;
          }
          position = chunkEnd;
          onProgress?.({ loadedBytes: loaded, totalBytes, phase: 'download' });
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
    onProgress?.({ loadedBytes: loaded, totalBytes, phase: 'upload' });
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
