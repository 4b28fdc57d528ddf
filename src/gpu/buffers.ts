// Small helpers for storage buffers: create, upload, read back. Browser-safe (no Node imports).
import type { GpuMatrix, WeightDType } from './tensor.ts';
import { QUANT_FORMATS, checkWeightShape, isPairedQuant, pairQuantBlocks, weightByteSize } from './weight-layout.ts';

/** WebGPU copies and writeBuffer work in whole 4-byte words: round sizes up. */
export function padTo4(byteSize: number): number {
  return Math.max(4, Math.ceil(byteSize / 4) * 4);
}

/** A storage buffer that can also be written (COPY_DST) and read back (COPY_SRC); size padded to 4 bytes. */
export function createStorageBuffer(device: GPUDevice, byteSize: number, label: string, extraUsage = 0): GPUBuffer {
  return device.createBuffer({
    label,
    size: padTo4(byteSize),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST | extraUsage,
  });
}

/** Writes f32 values into `buffer` at `byteOffset` (through the queue: ordered before the next submit). */
export function uploadF32(device: GPUDevice, buffer: GPUBuffer, data: Float32Array, byteOffset = 0): void {
  device.queue.writeBuffer(buffer, byteOffset, data.buffer, data.byteOffset, data.byteLength);
}

/** Writes u32 values into `buffer` at `byteOffset`. */
export function uploadU32(device: GPUDevice, buffer: GPUBuffer, data: Uint32Array, byteOffset = 0): void {
  device.queue.writeBuffer(buffer, byteOffset, data.buffer, data.byteOffset, data.byteLength);
}

/** A new storage buffer holding `data`. */
export function createF32Buffer(device: GPUDevice, data: Float32Array, label: string): GPUBuffer {
  const buffer = createStorageBuffer(device, data.byteLength, label);
  uploadF32(device, buffer, data);
  return buffer;
}

/** A new storage buffer holding `data` (token ids and the like). */
export function createU32Buffer(device: GPUDevice, data: Uint32Array, label: string): GPUBuffer {
  const buffer = createStorageBuffer(device, data.byteLength, label);
  uploadU32(device, buffer, data);
  return buffer;
}

/**
 * Uploads a row-major [rows, cols] weight matrix already in its storage layout: f32 values for
 * 'f32'; for 'f16'/'bf16' the 16-bit patterns packed two per u32 word, low half first; for a
 * quantized type its ggml blocks as bytes (rows of whole blocks; padded to 4 bytes here).
 */
export function createWeightMatrix(
  device: GPUDevice,
  data: Float32Array | Uint32Array | Uint8Array,
  dtype: WeightDType,
  rows: number,
  cols: number,
  label: string,
): GpuMatrix {
  checkWeightShape(dtype, rows, cols, label);
  const byteSize = weightByteSize(dtype, rows * cols);
  if (isPairedQuant(dtype)) {
    // The file's blocks, stored in the GPU's pairs (weight-layout.ts, pairQuantBlocks).
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    data = pairQuantBlocks(dtype, bytes, (rows * cols) / QUANT_FORMATS[dtype].blockSize);
  }
  if (data.byteLength < byteSize && data.byteLength >= byteSize - 3 && data instanceof Uint8Array) {
    const padded = new Uint8Array(byteSize); // raw blocks: pad to whole words
    padded.set(data);
    data = padded;
  }
  if (data.byteLength < byteSize) {
    throw new Error(`${label}: ${data.byteLength} bytes given, a ${dtype} [${rows}, ${cols}] matrix needs ${byteSize}`);
  }
  const buffer = createStorageBuffer(device, byteSize, label);
  device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, byteSize);
  return { buffer, dtype, rows, cols };
}

/**
 * Reads `count` f32 values (default: the whole buffer) starting at `byteOffset`, through a
 * MAP_READ staging copy. The copy is queued after all work submitted so far, so the values
 * reflect it.
 */
export async function readBufferF32(device: GPUDevice, buffer: GPUBuffer, count?: number, byteOffset = 0): Promise<Float32Array> {
  const byteSize = count === undefined ? buffer.size - byteOffset : count * 4;
  if (byteSize === 0) return new Float32Array(0);
  const staging = device.createBuffer({
    label: `${buffer.label || 'buffer'} (readback)`,
    size: byteSize,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  try {
    const encoder = device.createCommandEncoder({ label: 'readback' });
    encoder.copyBufferToBuffer(buffer, byteOffset, staging, 0, byteSize);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const values = new Float32Array(staging.getMappedRange().slice(0));
    staging.unmap();
    return values;
  } finally {
    staging.destroy();
  }
}

/** readBufferF32, read as u32. */
export async function readBufferU32(device: GPUDevice, buffer: GPUBuffer, count?: number, byteOffset = 0): Promise<Uint32Array> {
  const f = await readBufferF32(device, buffer, count, byteOffset);
  return new Uint32Array(f.buffer, f.byteOffset, f.length);
}
