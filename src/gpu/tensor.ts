// A weight matrix on the GPU. Matrices are row-major [rows, cols] = [out_features, in_features],
// as Hugging Face stores them (and as GGUF stores them, dims listed fastest-first).

/**
 * Storage of weight elements in the buffer: f32; f16 or bf16 packed two per u32 (unpacked to f32 in
 * the shader); or one of ggml's block-quantized types, kept as the file's raw blocks (the buffer is
 * those bytes, padded to a multiple of 4) and decoded in the shader (weight-formats.ts).
 */
export type WeightDType = 'f32' | 'f16' | 'bf16' | QuantDType;

/** ggml block-quantized storage types (see QUANT_FORMATS in weight-formats.ts for their layouts). */
export type QuantDType = 'q4_0' | 'q4_1' | 'q5_0' | 'q5_1' | 'q8_0' | 'q4_k' | 'q5_k' | 'q6_k';

export interface GpuMatrix {
  /** The whole matrix; for a split matrix (see `parts`), the first part's buffer. */
  buffer: GPUBuffer;
  dtype: WeightDType;
  rows: number;
  cols: number;
  /**
   * A matrix over the device's per-buffer or per-binding limit, stored as consecutive row ranges
   * (whole rows, so whole quantized blocks), each in its own buffer starting at byte 0. Absent when
   * the matrix is one buffer. The kernels dispatch once per part.
   */
  parts?: GpuMatrixPart[];
}

/** Rows firstRow .. firstRow + rows - 1 of a split matrix, in `buffer`. */
export interface GpuMatrixPart {
  buffer: GPUBuffer;
  firstRow: number;
  rows: number;
}

/** The row ranges of a matrix: its parts, or one range over the whole of `buffer`. */
export function matrixParts(m: GpuMatrix): GpuMatrixPart[] {
  return m.parts ?? [{ buffer: m.buffer, firstRow: 0, rows: m.rows }];
}
