// Weights onto the GPU, streamed tensor by tensor: each file is read once, front to back, in chunks
// of a few MiB, and every chunk goes to its GPU buffers with queue.writeBuffer at the right offset.
// The JS side never holds a whole file or a whole large tensor.
//
// What is uploaded and in what shape is tensors.ts; where each tensor goes (its storage type, its
// buffer size, its row parts) is planned in weight-storage.ts; the conversion on the way is in
// weight-sinks.ts. 2-D matrices are stored per the `storage` option (see WeightStorage): GGUF's
// quantized blocks always as they are (decoded in the kernels); f32 / f16 / bf16 matrices either
// keep their bytes ('source') or are converted chunk by chunk while streaming: to f16 (the
// loader's default for Hugging Face models), to f32, or quantized to Q8_0 / Q4_0 blocks of 32
// weights along a row. 1-D tensors (norm weights, biases) are tiny and are converted to f32 on the
// CPU (they must be f32, f16 or bf16, as GGUF files store them).
import type { GpuContext } from '../gpu/device.ts';
import type { GpuMatrix, GpuMatrixPart } from '../gpu/tensor.ts';
import { checkWeightShape, isQuantized, weightByteSize, weightRowBytes } from '../gpu/weight-layout.ts';
import { DEFAULT_CHUNK_SIZE, type ByteSource, type ModelFiles } from '../io/files.ts';
import { familyOf, type LlamaConfig } from './config.ts';
import { F16_MAX } from './quantize.ts';
import { GLOBAL_TENSOR_NAMES, layerTensorNames } from './tensor-names.ts';
import { checkTensors, requiredTensors, type ModelTensor } from './tensors.ts';
import { align4, checkTensorFits, planWeightStorage, type WeightStorage } from './weight-storage.ts';
import { matrixSink, SplitSink, VectorSink, type TensorSink } from './weight-sinks.ts';
// The upload's entry: importers of the tensors, the storage plan and the conversions find them here.
export { f16ToF32 } from './quantize.ts';
export { checkTensors, requiredTensors, weightBytes, type ModelTensor } from './tensors.ts';
export {
  WEIGHT_STORAGES,
  checkTensorFits,
  planWeightStorage,
  storageDType,
  type TensorStorage,
  type WeightStorage,
  type WeightStoragePlan,
} from './weight-storage.ts';
export { toFloat32 } from './weight-sinks.ts';

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
  /** Per-head RMSNorm weights of q and k ([headDim]; FamilyDescription.qkNorm). */
  qNorm?: GPUBuffer;
  kNorm?: GPUBuffer;
  /** Norm of the attention block's output (FamilyDescription.postAttentionNorm). */
  postAttnNorm?: GPUBuffer;
  ffnNorm: GPUBuffer;
  /** Norm of the feed-forward block's output (FamilyDescription.postFeedForwardNorm). */
  postFfnNorm?: GPUBuffer;
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
  const family = familyOf(config);
  // Norm weights get the family's offset folded in here (x·(1 + w) uploaded as x·w'); biases do not.
  const isNorm = (name: string) => /(norm|layernorm)\.weight$/.test(name);
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
        jobs.push({ tensor: t, sink: new VectorSink(device.queue, buffer, t, isNorm(name) ? family.normWeightOffset : 0) });
      } else {
        const sinkFor = (buffer: GPUBuffer): TensorSink => matrixSink(device.queue, buffer, t.dtype, target.dtype, stats);
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
    const n = layerTensorNames(l, family);
    layers.push({
      attnNorm: vectors.get(n.attnNorm)!,
      wq: matrices.get(n.wq)!,
      wk: matrices.get(n.wk)!,
      wv: matrices.get(n.wv)!,
      wo: matrices.get(n.wo)!,
      bq: vectors.get(n.bq),
      bk: vectors.get(n.bk),
      bv: vectors.get(n.bv),
      qNorm: family.qkNorm ? vectors.get(n.qNorm) : undefined,
      kNorm: family.qkNorm ? vectors.get(n.kNorm) : undefined,
      postAttnNorm: family.postAttentionNorm ? vectors.get(n.postAttnNorm) : undefined,
      ffnNorm: vectors.get(n.ffnNorm)!,
      postFfnNorm: family.postFeedForwardNorm ? vectors.get(n.postFfnNorm) : undefined,
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

