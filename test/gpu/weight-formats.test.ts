// How weights are stored for the GPU (src/gpu/weight-formats.ts): the CPU reference's f16 / bf16
// conversions (test/reference/cpu-ops.ts), and every 16-bit pattern decoded by the shader's
// load_weight, read back through the embedding kernel. Quantized formats: test/gpu/kernels/quant.test.ts.
import { describe, expect, it } from 'vitest';
import { createU32Buffer, createWeightMatrix } from '../../src/gpu/buffers.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, packHalves } from '../reference/cpu-ops.ts';
import { device, kernels, output, read, track, useKernelGpu } from '../helpers/kernel-runs.ts';

useKernelGpu();

describe('f16 / bf16 conversions (CPU reference)', () => {
  it('rounds to known f16 bit patterns', () => {
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(-2)).toBe(0xc000);
    expect(f32ToF16Bits(0.1)).toBe(0x2e66);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65519)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // ties to even: rounds up to infinity
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie -> even (0)
    expect(f32ToF16Bits(1.5 * 2 ** -25)).toBe(0x0001);
    expect(f32ToF16Bits(2 ** -14)).toBe(0x0400); // smallest normal
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie -> even mantissa
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
    expect(f16BitsToF32(0x3555)).toBeCloseTo(0.333251953125, 12);
    expect(f16BitsToF32(0x7c00)).toBe(Infinity);
  });

  it('round-trips every finite f16 pattern', () => {
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00) continue; // inf / NaN
      expect(f32ToF16Bits(f16BitsToF32(h))).toBe(h);
    }
  });

  it('rounds to known bf16 bit patterns and round-trips', () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(f32ToBf16Bits(-2)).toBe(0xc000);
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80); // tie -> even
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToBf16Bits(3.4028234663852886e38)).toBe(0x7f80); // rounds up to infinity
    for (let b = 0; b < 0x10000; b += 7) {
      if ((b & 0x7f80) === 0x7f80) continue;
      expect(f32ToBf16Bits(bf16BitsToF32(b))).toBe(b);
    }
  });

  it('packs two halves per word, low half first', () => {
    expect(Array.from(packHalves(Uint16Array.of(0x1111, 0x2222, 0xffff)))).toEqual([0x22221111, 0x0000ffff]);
  });
});

describe('weight formats on the GPU', () => {
  // Every 16-bit pattern, read by the embedding kernel (one table row per high byte): checks
  // load_weight for f16 and bf16 bit for bit, including odd element indices and signs.
  for (const dtype of ['f16', 'bf16'] as const) {
    it(`${dtype}: load_weight decodes every finite bit pattern exactly`, async () => {
      const bits = new Uint16Array(0x10000);
      for (let i = 0; i < bits.length; i++) bits[i] = i;
      const fromBits = dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
      const W = createWeightMatrix(device, packHalves(bits), dtype, 256, 256, 'all patterns');
      track(W.buffer);
      const tokens = track(createU32Buffer(device, Uint32Array.from({ length: 256 }, (_, i) => i), 'tokens'));
      const out = output(0x10000);
      const batch = kernels.begin();
      batch.embedding(out, W, tokens, 256);
      batch.submit();
      const got = await read(out, 0x10000);
      const exponentMask = dtype === 'f16' ? 0x7c00 : 0x7f80;
      let mismatches = 0;
      let flushedSubnormals = 0;
      for (let h = 0; h < 0x10000; h++) {
        if ((h & exponentMask) === exponentMask) continue; // inf / NaN: no model weight is one
        const want = fromBits(h);
        if (got[h] === want) continue;
        // A GPU may flush subnormals to zero; tolerated (they are below 6e-5 for f16).
        if ((h & exponentMask) === 0 && got[h] === 0) flushedSubnormals++;
        else mismatches++;
      }
      expect(mismatches).toBe(0);
      expect(flushedSubnormals).toBeLessThanOrEqual(2 * 1023);
    });
  }
});
