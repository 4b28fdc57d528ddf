// Pipeline keys of the kernel variants the model families and packed embedding passes add: each
// feature on is a key of its own, and with every feature off the keys are those of before, so the
// defaults compile and cache the same pipelines. No GPU needed.
import { describe, expect, it } from 'vitest';
import { attentionKey, attentionSpec, decodeAttentionKey, type AttentionVariant, type DecodeAttentionVariant } from '../../../src/gpu/kernels/attention.ts';
import { PACKED_ROPE_KEY, packedRopeSpec, positionalKey, positionalSpec, rmsNormKey } from '../../../src/gpu/kernels/elementwise.ts';
import { fusedKey, type FusedVariant } from '../../../src/gpu/kernels/fused-matvec.ts';
import { weightKernelKey } from '../../../src/gpu/kernels/weights.ts';

describe('pipeline keys', () => {
  it('attention: the soft-capped variant has a key of its own; the default key is unchanged', () => {
    const v: AttentionVariant = { entry: 'per_thread', headDim: 64, kvDType: 'f16', heads: 2, queries: 1, threads: 64 };
    expect(attentionKey(v)).toBe('attention/per_thread/hd64/kv_f16/pos_uniform/g2/q1/w64');
    expect(attentionKey({ ...v, softcap: false })).toBe(attentionKey(v));
    expect(attentionKey({ ...v, softcap: true })).toBe(`${attentionKey(v)}/softcap`);
  });

  it('decode attention: softcap, RoPE params and the q/k norm each a key part, in every combination distinct', () => {
    const v: DecodeAttentionVariant = { headDim: 128, kvDType: 'f16', position: 'buffer', split: true, threads: 64, heads: 1 };
    expect(decodeAttentionKey(v)).toBe('decode_attention/hd128/kv_f16/pos_buffer/split/t64/g1');
    const keys = new Set<string>();
    for (const softcap of [false, true]) for (const rope of [false, true]) for (const qkNorm of [false, true]) {
      keys.add(decodeAttentionKey({ ...v, softcap, rope, qkNorm }));
    }
    expect(keys.size).toBe(8);
    expect(keys.has(decodeAttentionKey(v))).toBe(true);
  });

  it('a sliding-window layer\'s ring: a key part /ring<rows> on the attention, decode attention and K/V write variants only', () => {
    const v: AttentionVariant = { entry: 'split_combine', headDim: 64, kvDType: 'f16' };
    expect(attentionKey({ ...v, ring: 1023 })).toBe(`${attentionKey(v)}/ring1023`);
    const d: DecodeAttentionVariant = { headDim: 256, kvDType: 'f32', position: 'buffer', split: false, threads: 8, heads: 1, qkNorm: true };
    expect(decodeAttentionKey({ ...d, ring: 1023 })).toBe(`${decodeAttentionKey(d)}/ring1023`);
    expect(positionalKey('write_kv', 'buffer')).toBe('write_kv/pos_buffer');
    expect(positionalKey('write_kv', 'buffer', 1023)).toBe('write_kv/pos_buffer/ring1023');
  });

  it('a packed pass (TokenSpan.segments): attention\'s /packed key part and rope\'s own key; the plain sources do not read segments', () => {
    const v: AttentionVariant = { entry: 'per_thread', headDim: 64, kvDType: 'f16', heads: 2, queries: 3, threads: 64 };
    expect(attentionKey({ ...v, packed: false })).toBe(attentionKey(v));
    expect(attentionKey({ ...v, packed: true })).toBe(`${attentionKey(v)}/packed`);
    expect(attentionSpec({ ...v, packed: false }).code).toBe(attentionSpec(v).code);
    expect(attentionSpec(v).code).not.toContain('token_segment');
    expect(attentionSpec({ ...v, packed: true }).code).toContain('token_segment[pos - start_pos()]');
    expect(() => attentionSpec({ ...v, packed: true, ring: 64 })).toThrow(/packed/);
    expect(() => attentionSpec({ ...v, packed: true, position: 'buffer' })).toThrow(/packed/);
    expect(PACKED_ROPE_KEY).not.toBe(positionalKey('rope', 'uniform'));
    expect(positionalSpec('rope', 'uniform').code).not.toContain('token_segment');
    expect(packedRopeSpec().code).toContain('f32(start_pos() + t - token_segment[t])');
  });

  it('rmsNorm in place, GeGLU matmul and fused matvec: keys of their own', () => {
    expect(rmsNormKey({ entry: 'per_row', aligned: true })).toBe('rmsnorm/per_row/vec4');
    expect(rmsNormKey({ entry: 'per_row', aligned: true, inPlace: true })).toBe('rmsnorm/per_row/vec4/in_place');
    const matmul = { hasBias: false, aligned: true, swiglu: true };
    expect(weightKernelKey('matmul', 'f16', { ...matmul, activation: 'silu' })).toBe(weightKernelKey('matmul', 'f16', matmul));
    expect(weightKernelKey('matmul', 'f16', { ...matmul, activation: 'gelu_tanh' })).toBe(`${weightKernelKey('matmul', 'f16', matmul)}/gelu_tanh`);
    const fused: FusedVariant = {
      mode: 'swiglu',
      norm: true,
      aligned: true,
      plan: { team: 1, reduction: 'none' },
      shape: { quads: 1, workgroup: 64 },
      segments: [{ dtype: 'f16', hasBias: false, runs: false }, { dtype: 'f16', hasBias: false, runs: false }],
    };
    expect(fusedKey({ ...fused, activation: 'silu' })).toBe(fusedKey(fused));
    expect(fusedKey({ ...fused, activation: 'gelu_tanh' })).toBe(`${fusedKey(fused)}/gelu_tanh`);
  });
});
