// The CPU reference of ggml's block formats (test/reference/quant.ts): hand-made blocks decode to
// values worked out by hand from ggml's layouts, and the project's quantizers
// (src/model/quantize.ts) round-trip through it within each format's step size.
import { describe, expect, it } from 'vitest';
import type { QuantDType } from '../../src/gpu/tensor.ts';
import { QUANT_FORMATS, pairQuantBlocks, weightByteSize } from '../../src/gpu/weight-formats.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { quantizeValues as quantize } from '../../src/model/quantize.ts';
import { dequantize } from '../reference/quant.ts';

const ALL: QuantDType[] = ['q8_0', 'q4_0', 'q4_1', 'q5_0', 'q5_1', 'q4_k', 'q5_k', 'q6_k'];

/** A block of `dtype` with the given bytes set (the rest 0). */
function block(dtype: QuantDType, set: Record<number, number>): Uint8Array {
  const b = new Uint8Array(QUANT_FORMATS[dtype].blockBytes);
  for (const [at, v] of Object.entries(set)) b[Number(at)] = v;
  return b;
}

/** Decoded values with -0 turned into 0, as a plain array. */
function decode(dtype: QuantDType, bytes: Uint8Array): number[] {
  return Array.from(dequantize(dtype, bytes, QUANT_FORMATS[dtype].blockSize), (v) => v + 0);
}

describe('ggml block formats: hand-made blocks (CPU reference)', () => {
  it('Q8_0: f16 d then 32 int8, w = d * q', () => {
    // d = 0.5 (f16 0x3800); q[0] = 1, q[1] = -2, q[31] = 127.
    const want = new Array(32).fill(0);
    want[0] = 0.5;
    want[1] = -1;
    want[31] = 63.5;
    expect(decode('q8_0', block('q8_0', { 0: 0x00, 1: 0x38, 2: 1, 3: 0xfe, 33: 127 }))).toEqual(want);
  });

  it('Q4_0: weight j is the low nibble of byte j, weight j + 16 the high one; w = d * (q - 8)', () => {
    // d = 2 (0x4000); byte 0 = 0x9f: w0 = 2 * (15 - 8) = 14, w16 = 2 * (9 - 8) = 2; byte 15 = 0x08: w15 = 0, w31 = -16.
    const b = block('q4_0', { 1: 0x40 });
    b.fill(0x88, 2);
    b[2] = 0x9f;
    b[17] = 0x08;
    const want = new Array(32).fill(0);
    want[0] = 14;
    want[16] = 2;
    want[31] = -16;
    expect(decode('q4_0', b)).toEqual(want);
  });

  it('Q4_1: f16 d, f16 m, nibbles; w = d * q + m', () => {
    // d = 2, m = 1; byte 15 = 0xf0: w15 = 1, w31 = 31; all else q = 0 -> 1.
    const want = new Array(32).fill(1);
    want[31] = 31;
    expect(decode('q4_1', block('q4_1', { 1: 0x40, 3: 0x3c, 19: 0xf0 }))).toEqual(want);
  });

  it('Q5_0: bit j of the u32 after d is weight j\'s fifth bit; w = d * (q - 16)', () => {
    // d = 1; bit 20 (byte 4, bit 4) set, byte 6 + 4 = 0x30: w20 = (3 | 16) - 16 = 3, w4 = -16.
    const want = new Array(32).fill(-16);
    want[20] = 3;
    expect(decode('q5_0', block('q5_0', { 1: 0x3c, 4: 0x10, 10: 0x30 }))).toEqual(want);
  });

  it('Q5_1: f16 d, f16 m, high bits, nibbles; w = d * q + m', () => {
    // d = 0.5, m = -1 (0xbc00); bit 1 set (byte 4 = 0x02), byte 8 + 1 = 0x01: w1 = 0.5 * 17 - 1 = 7.5.
    const want = new Array(32).fill(-1);
    want[1] = 7.5;
    expect(decode('q5_1', block('q5_1', { 1: 0x38, 3: 0xbc, 4: 0x02, 9: 0x01 }))).toEqual(want);
  });

  it('Q4_K: 6-bit scales and mins packed as get_scale_min_k4 reads them; w = d * sc * q - dmin * m', () => {
    // d = 1, dmin = 0.5. Scales at byte 4: sub-block 0: sc 1, m 2 (bytes 4, 8). Sub-block 1:
    // sc 3, m 4 (bytes 5, 9), and bits 6-7 of bytes 5 / 9 are the high bits of sub-block 5's scale
    // 33 (= 0b10_0001) and min 18 (= 0b01_0010), whose low nibbles are byte 4 + 9 = 0x21.
    // Nibbles at byte 16: w0 = low nibble of byte 16 (5): 1 * 5 - 0.5 * 2 = 4.
    // w32 = high nibble of byte 16 (0): -0.5 * 4 = -2. w163 (sub-block 5, l = 3) = high nibble of
    // byte 16 + 64 + 3 (7): 33 * 7 - 0.5 * 18 = 222.
    const b = block('q4_k', { 1: 0x3c, 3: 0x38, 4: 1, 5: 0x80 | 3, 8: 2, 9: 0x40 | 4, 13: 0x21, 16: 0x05, 83: 0x70 });
    const got = decode('q4_k', b);
    expect(got[0]).toBe(4);
    expect(got[1]).toBe(-1); // q = 0 in sub-block 0
    expect(got[32]).toBe(-2);
    expect(got[163]).toBe(222);
    expect(got[160]).toBe(-9);
    expect(got.filter((v, i) => ![0, 163].includes(i) && v > 0)).toEqual([]);
  });

  it('Q5_K: as Q4_K with a fifth bit: bit s of high byte l for weight l of sub-block s', () => {
    // d = 1, dmin = 0; sub-block 2 scale 2 (byte 4 + 2). w71 (s = 2, l = 7): low nibble of byte
    // 48 + 32 + 7 = 3, bit 2 of byte 16 + 7: q = 19, w = 38.
    const got = decode('q5_k', block('q5_k', { 1: 0x3c, 6: 2, 87: 0x03, 23: 0x04 }));
    const want = new Array(256).fill(0);
    want[71] = 38;
    expect(got).toEqual(want);
  });

  it('Q6_K: ql, qh, int8 scales, f16 d last; w = d * sc * (q - 32)', () => {
    // d = 0.25 at byte 208. Weight 245 = half 1, group 3, l = 21: low 4 bits = high nibble of
    // ql[64 + 32 + 21], high 2 bits = bits 6-7 of qh[128 + 32 + 21], scale = scales[8 + 6 + 1] = -3.
    // q = (10 | 2 << 4) - 32 = 10: w = 0.25 * -3 * 10 = -7.5. Weight 229 (l = 5) shares the
    // group but takes scales[14] = 2: q = 0 - 32, w = -16.
    const got = decode('q6_k', block('q6_k', { 209: 0x34, 117: 0xa0, 181: 0x80, 207: 0xfd, 206: 2 }));
    const want = new Array(256).fill(0);
    for (let l = 0; l < 16; l++) want[224 + l] = 0.25 * 2 * -32;
    for (let l = 16; l < 32; l++) want[224 + l] = 0.25 * -3 * -32;
    want[245] = -7.5;
    expect(got).toEqual(want);
  });
});

describe('ggml block formats: quantize -> dequantize round trip (CPU reference)', () => {
  // Worst error relative to the block's largest magnitude: half a step of the format's levels
  // (Q4_0 / Q5_0: a whole step at the clamped top end, as ggml's; plus the 6/8-bit scale
  // rounding of the K-quants).
  const bounds: Record<QuantDType, number> = {
    q8_0: 0.5 / 127 + 1e-3, q4_0: 1 / 8 + 1e-3, q4_1: 1 / 15 + 1e-3, q5_0: 1 / 16 + 1e-3, q5_1: 1 / 31 + 1e-3,
    q4_k: 0.15, q5_k: 0.08, q6_k: 0.05,
  };
  for (const dtype of ALL) {
    it(`${dtype}: valid blocks, error within the step size`, () => {
      const { blockSize, blockBytes } = QUANT_FORMATS[dtype];
      const n = blockSize * 6;
      const rand = mulberry32(42);
      const x = new Float32Array(n);
      for (let i = 0; i < n; i++) x[i] = (rand() * 2 - 1) * (1 + Math.floor(i / blockSize)) * 0.1;
      x.fill(0, 0, blockSize); // an all-zero block
      const bytes = quantize(dtype, x);
      expect(bytes.length).toBe((n / blockSize) * blockBytes);
      expect(weightByteSize(dtype, n)).toBe(Math.ceil(bytes.length / 4) * 4);
      const y = dequantize(dtype, bytes, n);
      for (let b = 0; b < n / blockSize; b++) {
        let amax = 0;
        let err = 0;
        for (let i = b * blockSize; i < (b + 1) * blockSize; i++) {
          amax = Math.max(amax, Math.abs(x[i]));
          err = Math.max(err, Math.abs(x[i] - y[i]));
        }
        expect(err).toBeLessThanOrEqual(bounds[dtype] * amax);
      }
      // Quantizing the dequantized values is (nearly) exact: the blocks are self-consistent.
      const again = dequantize(dtype, quantize(dtype, y), n);
      let drift = 0;
      for (let i = 0; i < n; i++) drift = Math.max(drift, Math.abs(again[i] - y[i]));
      expect(drift).toBeLessThanOrEqual(bounds[dtype] * 0.6 * 1);
      // Into a reused (dirty) buffer, as the loader quantizes chunk after chunk: the same bytes.
      const dirty = new Uint8Array(bytes.length + 7).fill(0xa5);
      expect(Buffer.compare(Buffer.from(quantize(dtype, x, dirty)), Buffer.from(bytes))).toBe(0);
    });
  }

  it('rejects a length that is not whole blocks', () => {
    expect(() => quantize('q8_0', new Float32Array(33))).toThrow(/q8_0/);
    expect(() => weightByteSize('q4_k', 300)).toThrow(/256/);
  });
});

describe("Q8_0 / Q4_0 on the GPU: pairs of blocks (pairQuantBlocks)", () => {
  for (const dtype of ['q8_0', 'q4_0'] as const) {
    const { blockBytes } = QUANT_FORMATS[dtype];
    const quantBytes = blockBytes - 2;
    for (const blocks of [1, 2, 3, 4]) {
      it(`${dtype}, ${blocks} block(s): both scales then both blocks' quants, a pair per ${2 * blockBytes} bytes`, () => {
        // File block b: scale bytes (10b + 1, 10b + 2), quant byte k = (b * 50 + k + 3) & 255.
        const file = new Uint8Array(blocks * blockBytes);
        for (let b = 0; b < blocks; b++) {
          file[b * blockBytes] = 10 * b + 1;
          file[b * blockBytes + 1] = 10 * b + 2;
          for (let k = 0; k < quantBytes; k++) file[b * blockBytes + 2 + k] = (b * 50 + k + 3) & 255;
        }
        const gpu = pairQuantBlocks(dtype, file, blocks);
        expect(gpu.length).toBe(weightByteSize(dtype, blocks * 32));
        const want = new Uint8Array(gpu.length);
        for (let b = 0; b < blocks; b++) {
          const pair = Math.floor(b / 2) * 2 * blockBytes;
          const half = b % 2;
          want[pair + 2 * half] = 10 * b + 1;
          want[pair + 2 * half + 1] = 10 * b + 2;
          for (let k = 0; k < quantBytes; k++) want[pair + 4 + half * quantBytes + k] = (b * 50 + k + 3) & 255;
        }
        expect(Array.from(gpu)).toEqual(Array.from(want));
      });
    }
  }
});
