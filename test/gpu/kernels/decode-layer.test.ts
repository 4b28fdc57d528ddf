// decode_layer.wgsl's family features (kernels/decode-layer-family.ts) as compile-time variants:
// with none on, the Llama block's key, shader and state layout exactly as without them; each
// feature on, its own key part, its constants in the state, and its functions replacing the
// plain block's (each defined once). The features' math is checked against the float64 reference
// on the families' models (test/model/model-families.test.ts, gemma.test.ts).
import { describe, expect, it } from 'vitest';
import { decodeLayerKey, decodeLayerSpec, type DecodeLayerVariant } from '../../../src/gpu/kernels/decode-layer.ts';
import { decodeLayerLayout } from '../../../src/gpu/kernels/decode-layer-layout.ts';
import { decodeLayerRowsLayout } from '../../../src/gpu/kernels/decode-layer-rows.ts';
import type { DecodeLayerFeatures } from '../../../src/gpu/kernels/index.ts';

const dims = { dim: 64, qDim: 64, kvDim: 32, ffn: 96, headDim: 16, numLayers: 3 };
const variant = (features?: DecodeLayerFeatures, slots = 2): DecodeLayerVariant => ({
  dims, heads: 2, kvDType: 'f16', matrices: undefined, hasBias: false, workgroup: 4, quads: 2, slots, embed: true, logitsRows: 40, greedy: true,
  ...(features ? { features } : {}),
});
const ALL: DecodeLayerFeatures = {
  qkNorm: true, layerRope: true, layerWindow: true, attentionSoftcap: true, postNorms: true, geluTanh: true, embeddingScale: true, logitSoftcap: true, ring: true,
};
/** Names of the module-scope functions a shader defines more than once. */
const duplicates = (code: string) => {
  const names = [...code.matchAll(/^fn\s+(\w+)/gm)].map((m) => m[1]);
  return names.filter((n, i) => names.indexOf(n) !== i);
};

describe('decode_layer.wgsl family features', () => {
  it('none on: the Llama block\'s key, shader and layout', () => {
    for (const none of [undefined, {}, { qkNorm: false }]) {
      expect(decodeLayerKey(variant(none))).toBe(decodeLayerKey(variant()));
      expect(decodeLayerSpec(variant(none)).code).toBe(decodeLayerSpec(variant()).code);
      expect(decodeLayerLayout(dims, none)).toEqual(decodeLayerLayout(dims));
    }
    expect(decodeLayerKey(variant())).not.toMatch(/qk_norm|layer_rope|gelu|post_norms|softcap|emb_scale/);
    expect(decodeLayerSpec(variant()).code).not.toMatch(/POST_NORMS|LAYER_FREQ|MODEL0/);
  });

  it('each feature: its key part, its constants in the state, its functions once', () => {
    const plain = decodeLayerLayout(dims);
    const parts: [keyof DecodeLayerFeatures, string, number][] = [
      ['qkNorm', '/qk_norm', 2 * dims.headDim],
      ['layerRope', '/layer_rope', dims.headDim / 2 + 4],
      ['layerWindow', '/layer_window', 4],
      ['attentionSoftcap', '/softcap', 0],
      ['postNorms', '/post_norms', 2 * dims.dim],
      ['geluTanh', '/gelu_tanh', 0],
      ['embeddingScale', '/emb_scale', 0],
      ['logitSoftcap', '/logit_softcap', 0],
      ['ring', '/ring', 4],
    ];
    for (const [feature, part, layerFloats] of parts) {
      const f = { [feature]: true };
      expect(decodeLayerKey(variant(f))).toBe(decodeLayerKey(variant()) + part);
      const layout = decodeLayerLayout(dims, f);
      expect(layout.constsStride - plain.constsStride, feature).toBe(layerFloats);
      for (const slots of [1, 3]) expect(duplicates(decodeLayerSpec(variant(f, slots)).code), feature).toEqual([]);
    }
    // The model's constants and the post-norms' block come after every layer's, each region apart.
    const layout = decodeLayerLayout(dims, ALL);
    const l = layout.features!;
    // After the layer's [γ_attn | γ_ffn | bq | bk | bv] (2·64 + 64 + 2·32 = 256 floats).
    expect(plain.constsStride).toBe(256);
    expect([l.qNorm, l.kNorm, l.postAttn, l.postFfn, l.freq, l.ext]).toEqual([256, 272, 288, 352, 416, 424]);
    expect(l.model).toBe(layout.consts + dims.numLayers * layout.constsStride);
    expect(layout.records).toBe(l.model + 4);
    expect(layout.block).toBe(layout.records + 32 * 4);
    expect(layout.floats).toBe(layout.block! + dims.dim);
    const code = decodeLayerSpec(variant(ALL, 3)).code;
    expect(duplicates(code)).toEqual([]);
    expect(code).toContain('const QK_NORM: bool = true;');
    expect(code).toContain('gelu_tanh4(g)');
  });

  it('the rows variant (a batch of sequences): its own key part, its regions after the single layout, each function once', () => {
    for (const f of [undefined, ALL, { ring: true }]) {
      const single = variant(f);
      const rows = { ...single, rows: 8 };
      expect(decodeLayerKey(rows)).toBe(decodeLayerKey(single) + '/rows8');
      expect(decodeLayerKey({ ...rows, rowGroups: 2 })).toBe(decodeLayerKey(single) + '/rows8x2');
      const code = decodeLayerSpec(rows).code;
      expect(duplicates(code)).toEqual([]);
      expect(code).toContain('fn group_row(j: u32)');
      // Every read of a row's region is relative to the current row.
      expect(code).not.toMatch(/st\[\(?(X0|QKV0|ATT0|H0|POS0)\b/);
      const layout = decodeLayerLayout(dims, f);
      const batch = decodeLayerRowsLayout(dims, f, 8);
      expect(batch.count).toBe(layout.floats);
      expect(batch.ctrl).toBe(batch.count + 4);
      expect(batch.records).toBe(batch.ctrl + 4 * 8);
      expect(batch.x).toBe(batch.records + 8 * 32 * 4);
      expect(batch.floats).toBe(batch.x + 8 * batch.rowStride);
      expect(batch.block >= 0).toBe(!!f?.postNorms);
    }
  });
});
