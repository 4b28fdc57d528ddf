// Every kernel's parameter packer against its shader's `struct Params`: the same fields in the same
// order, of the same types, at the byte offsets WGSL's uniform layout gives them. The structs are
// read from the .wgsl sources (no GPU needed).
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ATTENTION_PARAMS, DECODE_ATTENTION_PARAMS } from '../../../src/gpu/kernels/attention.ts';
import { BATCH_DECODE_ATTENTION_PARAMS } from '../../../src/gpu/kernels/attention-batch.ts';
import { DECODE_LAYER_PARAMS } from '../../../src/gpu/kernels/decode-layer.ts';
import { KV_WRITE_PARAMS, RESIDUAL_PARAMS, RMSNORM_PARAMS, ROPE_PARAMS, SOFTCAP_PARAMS, SWIGLU_PARAMS } from '../../../src/gpu/kernels/elementwise.ts';
import { FUSED_MATVEC_PARAMS } from '../../../src/gpu/kernels/fused-matvec.ts';
import { BATCH_GREEDY_PARAMS } from '../../../src/gpu/kernels/batch-rows.ts';
import { paramStruct, type ParamStruct, type ParamType } from '../../../src/gpu/uniforms.ts';
import { EMBEDDING_PARAMS, MATMUL_PARAMS, MATVEC_PARAMS } from '../../../src/gpu/kernels/weights.ts';
import { SAMPLE_ROW_PARAMS, SAMPLE_SEQUENCE_PARAMS, SAMPLE_STEP_PARAMS } from '../../../src/sampling/sample-layout.ts';

type AnyStruct = ParamStruct<Record<string, ParamType>>;

/** [what, packer, shader file, the struct's name when not Params] */
const PACKERS: [string, AnyStruct, string, string?][] = [
  ['embedding', EMBEDDING_PARAMS, 'embedding.wgsl'],
  ['matmul (and matmul_tiled)', MATMUL_PARAMS, 'matmul_output.wgsl'],
  ['matvec', MATVEC_PARAMS, 'matvec.wgsl'],
  ['rmsnorm', RMSNORM_PARAMS, 'rmsnorm.wgsl'],
  ['rope', ROPE_PARAMS, 'rope.wgsl'],
  ['swiglu', SWIGLU_PARAMS, 'swiglu.wgsl'],
  ['residual', RESIDUAL_PARAMS, 'residual.wgsl'],
  ['softcap', SOFTCAP_PARAMS, 'softcap.wgsl'],
  ['kv cache write', KV_WRITE_PARAMS, 'kv_cache.wgsl'],
  ['attention (and split_combine)', ATTENTION_PARAMS, 'attention.wgsl'],
  ['decode attention', DECODE_ATTENTION_PARAMS, 'decode_attention_pass.wgsl'],
  ['batched decode attention', BATCH_DECODE_ATTENTION_PARAMS, 'decode_attention_batch.wgsl'],
  ['batched greedy pick', BATCH_GREEDY_PARAMS, 'batch_greedy.wgsl'],
  ['fused matvec', FUSED_MATVEC_PARAMS, 'fused_matvec.wgsl'],
  ['decode layer', DECODE_LAYER_PARAMS, 'decode_layer.wgsl'],
  ['sampler sequence', SAMPLE_SEQUENCE_PARAMS, 'sample.wgsl', 'Sequence'],
  ['sampler step', SAMPLE_STEP_PARAMS, 'sample.wgsl', 'Step'],
  ['sampler row', SAMPLE_ROW_PARAMS, 'sample.wgsl', 'RowStep'],
];

const shader = (file: string) => readFileSync(new URL(`../../../shaders/${file}`, import.meta.url), 'utf8');

/** The fields of `struct name { ... }` in WGSL source, comments removed. */
function structFields(source: string, name: string): { name: string; type: string }[] {
  const code = source.replace(/\/\/[^\n]*/g, '');
  const body = new RegExp(`struct\\s+${name}\\s*\\{([^}]*)\\}`).exec(code)?.[1];
  if (body === undefined) throw new Error(`no struct ${name}`);
  return [...body.matchAll(/(\w+)\s*:\s*(\w+(?:<(?:[^<>]|<[^<>]*>)*>)?)/g)].map((m) => ({ name: m[1], type: m[2].replace(/\s+/g, '') }));
}

/** WGSL's alignment and size of a type in the uniform address space (scalars, vec4<u32>, arrays, the source's structs). */
function layoutOf(type: string, source: string): { align: number; size: number; words: 'u32' | 'f32' | 'mixed' } {
  if (type === 'u32' || type === 'f32') return { align: 4, size: 4, words: type };
  if (type === 'vec4<u32>') return { align: 16, size: 16, words: 'u32' };
  const array = /^array<(.+),(\w+)>$/.exec(type);
  if (array) {
    const element = layoutOf(array[1], source);
    const stride = Math.ceil(element.size / element.align) * element.align;
    // Uniform buffers: arrays align to 16 and their stride must be a multiple of 16.
    if (stride % 16 !== 0) throw new Error(`${type}: a uniform array's stride must be a multiple of 16`);
    return { align: Math.max(16, element.align), size: stride, words: element.words };
  }
  // A struct of the source.
  const fields = structFields(source, type);
  let offset = 0;
  let align = 16;
  let words: 'u32' | 'f32' | 'mixed' | undefined;
  for (const f of fields) {
    const l = layoutOf(f.type, source);
    offset = Math.ceil(offset / l.align) * l.align + l.size;
    align = Math.max(align, l.align);
    words = words === undefined || words === l.words ? l.words : 'mixed';
  }
  return { align, size: Math.ceil(offset / align) * align, words: words ?? 'mixed' };
}

/** The struct's fields as the packer should see them: name, ParamType, byte offset. */
function wgslParams(source: string, struct = 'Params'): { name: string; type: ParamType; offset: number }[] {
  let offset = 0;
  return structFields(source, struct).map((f) => {
    const l = layoutOf(f.type, source);
    offset = Math.ceil(offset / l.align) * l.align;
    const field = { name: f.name, type: (f.type.startsWith('array<') ? `${l.words}[]` : f.type) as ParamType, offset };
    offset += f.type.startsWith('array<') ? 0 : l.size; // (an array is the last field)
    return field;
  });
}

/** Where `packer` disagrees with the struct `struct` of `source` (empty when it agrees). */
function mismatches(packer: AnyStruct, source: string, struct?: string): string[] {
  const want = wgslParams(source, struct);
  const got = packer.fields;
  const problems: string[] = [];
  if (got.length !== want.length) problems.push(`${got.length} fields, the shader has ${want.length}`);
  for (let i = 0; i < Math.max(got.length, want.length); i++) {
    const [g, w] = [got[i], want[i]];
    if (!g || !w || g.name !== w.name || g.type !== w.type || g.offset !== w.offset) {
      problems.push(`field ${i}: packer ${g ? `${g.name}: ${g.type} @${g.offset}` : '-'}, shader ${w ? `${w.name}: ${w.type} @${w.offset}` : '-'}`);
    }
  }
  return problems;
}

describe('kernel parameter packers match their shaders', () => {
  for (const [name, packer, file, struct] of PACKERS) {
    it(`${name} (${file})`, () => {
      expect(mismatches(packer, shader(file), struct)).toEqual([]);
    });

    it(`${name}: pack puts each named value at its field's offset`, () => {
      const values: Record<string, number | number[]> = {};
      packer.fields.forEach((f, i) => (values[f.name] = f.type === 'u32[]' ? [100 + i, 200 + i] : i + 1));
      const packed = packer.pack(values);
      for (const [i, f] of packer.fields.entries()) {
        const word = packed[f.offset / 4];
        if (f.type === 'u32[]') expect(packed.slice(f.offset / 4)).toEqual([100 + i, 200 + i]);
        else if (f.type === 'f32') expect(word).toEqual({ f32: i + 1 });
        else expect(word).toBe(i + 1);
      }
    });
  }

  it('every uniform struct of every shader has a packer here', () => {
    const declared = readdirSync(new URL('../../../shaders/', import.meta.url))
      .filter((file) => file.endsWith('.wgsl'))
      .flatMap((file) => [...shader(file).matchAll(/var<uniform>\s+\w+\s*:\s*(?:array<\s*)?(\w+)/g)].map((m) => `${file} ${m[1]}`));
    // A uniform array of structs (sample.wgsl's seqs) is checked as its element struct.
    const checked = PACKERS.map(([, , file, struct]) => `${file} ${struct ?? 'Params'}`);
    expect(declared.length).toBeGreaterThanOrEqual(14);
    expect(declared.filter((d) => !checked.includes(d))).toEqual([]);
  });

  it('a packer with two fields swapped, one missing or one of the wrong type does not match', () => {
    const source = shader('rmsnorm.wgsl');
    expect(mismatches(paramStruct({ T: 'u32', dim: 'u32', eps: 'f32' }), source)).toEqual([]);
    expect(mismatches(paramStruct({ dim: 'u32', T: 'u32', eps: 'f32' }), source)).not.toEqual([]);
    expect(mismatches(paramStruct({ T: 'u32', dim: 'u32' }), source)).not.toEqual([]);
    expect(mismatches(paramStruct({ T: 'u32', dim: 'u32', eps: 'u32' }), source)).not.toEqual([]);
    // An array that would start before its 16-byte alignment in the shader.
    const fused = shader('fused_matvec.wgsl');
    expect(mismatches(paramStruct({ cols: 'u32', total_blocks: 'u32', eps: 'f32', seg: 'u32[]' }), fused)).toEqual([]);
    expect(mismatches(paramStruct({ cols: 'u32', total_blocks: 'u32', seg: 'u32[]' }), fused)).not.toEqual([]);
  });
});
