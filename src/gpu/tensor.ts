// A weight matrix on the GPU. Matrices are row-major [rows, cols] = [out_features, in_features],
// as Hugging Face stores them (and as GGUF stores them, dims listed fastest-first).

/** Storage of weight elements in the buffer: f32; f16 or bf16 packed two per u32 (unpacked to f32 in the shader). */
export type WeightDType = 'f32' | 'f16' | 'bf16';

export interface GpuMatrix {
  buffer: GPUBuffer;
  dtype: WeightDType;
  rows: number;
  cols: number;
}

/** Bytes one element takes in a storage type. */
export function bytesPerElement(dtype: WeightDType): number {
  return dtype === 'f32' ? 4 : 2;
}
