// The sinks a tensor's bytes stream into on their way to the GPU: each receives the bytes in file
// order, in pieces of any size, and writes them to its buffer(s) with queue.writeBuffer, converted
// where the storage type differs from the file's (to f32, f16 or Q8_0 / Q4_0 blocks) and holding
// at most one staging step in JS.
import type { WeightDType } from '../gpu/tensor.ts';
import { QUANT_FORMATS, isPairedQuant, isQuantized, pairQuantBlocks } from '../gpu/weight-layout.ts';
import { f16ToF32, quantizeValues, toF16Clamped } from './quantize.ts';
import type { ModelTensor } from './tensors.ts';

/** Receives a tensor's bytes in order. */
export interface TensorSink {
  write(piece: Uint8Array): void;
  finish(): void;
}

/** Feeds a split matrix's bytes to one sink per part, each getting exactly its part's bytes. */
export class SplitSink implements TensorSink {
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
export class VectorSink implements TensorSink {
  private readonly bytes: Uint8Array;
  private filled = 0;
  /** `offset` is added to every value (a norm weight's FamilyDescription.normWeightOffset: x·(1 + w) becomes x·w'). */
  constructor(private readonly queue: GPUQueue, private readonly buffer: GPUBuffer, private readonly tensor: ModelTensor, private readonly offset = 0) {
    this.bytes = new Uint8Array(tensor.byteLength);
  }
  write(piece: Uint8Array): void {
    this.bytes.set(piece, this.filled);
    this.filled += piece.length;
  }
  finish(): void {
    const f32 = toFloat32(this.bytes, this.tensor.dtype);
    if (this.offset !== 0) for (let i = 0; i < f32.length; i++) f32[i] += this.offset;
    this.queue.writeBuffer(this.buffer, 0, f32.buffer, f32.byteOffset, f32.byteLength);
  }
}

/**
 * The sink of a matrix stored as `to` whose file holds `from`: its bytes as they are (Q8_0 / Q4_0
 * blocks reordered into the GPU's pairs), or converted while streaming (`stats` counts the values
 * clamped to the f16 range).
 */
export function matrixSink(queue: GPUQueue, buffer: GPUBuffer, from: WeightDType, to: WeightDType, stats: { clamped: number }): TensorSink {
  if (to !== from) return new ConvertingSink(queue, buffer, from as 'f32' | 'f16' | 'bf16', to as 'f32' | 'f16' | 'q8_0' | 'q4_0', stats);
  return isPairedQuant(to) ? new PairedBlockSink(queue, buffer, to) : new MatrixSink(queue, buffer);
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
