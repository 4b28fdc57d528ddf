// Argument checks the dispatch methods share: counts, buffer sizes, weight parts, aliasing.
import { matrixParts, type GpuMatrix, type GpuMatrixPart } from '../tensor.ts';
import { checkWeightShape, weightByteSize } from '../weight-formats.ts';

export function assertCount(value: number, what: string, min = 1): void {
  if (!Number.isInteger(value) || value < min || value > 0xffffffff) {
    throw new Error(`${what} must be an integer >= ${min}, got ${value}`);
  }
}

export function assertFits(buffer: GPUBuffer, bytes: number, what: string): void {
  if (buffer.size < bytes) throw new Error(`${what}: buffer '${buffer.label}' has ${buffer.size} bytes, needs ${bytes}`);
}

/**
 * The two matrices of a matmul.wgsl SECOND pass (matmulSwiglu, matmulPair), unsplit and of one
 * shape (the callers check that): positive sizes, the storage's block shape, buffers that hold them.
 */
export function checkSecondPassWeights(kernel: string, ...pair: [GpuMatrix, string][]): void {
  for (const [W, what] of pair) {
    assertCount(W.rows, `${kernel} ${what}.rows`);
    assertCount(W.cols, `${kernel} ${what}.cols`);
    checkWeightShape(W.dtype, W.rows, W.cols, `${kernel} ${what}`);
    checkParts(W, `${kernel} ${what}`); // (unsplit: the one part is the whole buffer)
  }
}

/**
 * The row ranges of a weight matrix (one for an unsplit matrix), checked: consecutive, covering
 * every row, each buffer holding its rows.
 */
export function checkParts(W: GpuMatrix, what: string): GpuMatrixPart[] {
  const parts = matrixParts(W);
  let next = 0;
  for (const part of parts) {
    if (part.firstRow !== next || !Number.isInteger(part.rows) || part.rows < 1) {
      throw new Error(`${what}: parts must be consecutive non-empty row ranges (part at row ${part.firstRow}, expected ${next})`);
    }
    assertFits(part.buffer, weightByteSize(W.dtype, part.rows * W.cols), what);
    next += part.rows;
  }
  if (next !== W.rows) throw new Error(`${what}: parts cover ${next} of ${W.rows} rows`);
  return parts;
}

export function assertDistinct(output: GPUBuffer, inputs: (GPUBuffer | undefined)[], what: string): void {
  if (inputs.includes(output)) {
    throw new Error(`${what}: the output buffer '${output.label}' is also an input; use a separate buffer`);
  }
}

/**
 * A packed pass's segments buffer (TokenSpan.segments), checked: a u32 for each of the T tokens,
 * not one of the kernel's written buffers, and no position buffer with it (the packed variants
 * take the position from their params).
 */
export function checkSegments(segments: GPUBuffer, written: GPUBuffer[], T: number, position: GPUBuffer | undefined, what: string): void {
  if (position) throw new Error(`${what}: a packed pass (segments) takes no position buffer`);
  assertFits(segments, T * 4, `${what} segments`);
  for (const out of written) assertDistinct(out, [segments], what);
}
