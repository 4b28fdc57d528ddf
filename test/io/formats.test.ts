import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { filesFromPath } from '../../src/node/files.ts';
import { filesFromFileList, filesFromMemory, filesFromUrl, memorySource, type ModelFiles } from '../../src/io/files.ts';
import { readGgufHeader } from '../../src/io/formats/gguf.ts';
import { readSafetensorsCheckpoint, readSafetensorsHeader } from '../../src/io/formats/safetensors.ts';
import { modelLayers } from '../../src/model/config.ts';
import { configFromGguf } from '../../src/model/config-gguf.ts';
import { configFromHf } from '../../src/model/config-hf.ts';
import { hfNameFromGguf, hfShapeFromGguf } from '../../src/model/tensor-names.ts';
import { openModel } from '../../src/engine/open-model.ts';
import {
  buildGguf,
  buildSafetensors,
  readBytes,
  STORIES_GGUF,
  STORIES_HF,
  TINY_GGUF,
  TINY_HF,
} from '../helpers/model-files.ts';

async function ggufHeaderOf(path: string, chunkSize?: number) {
  const files = filesFromPath(path);
  const source = (await files.open(files.ggufFile!))!;
  return { source, header: await readGgufHeader(source, { chunkSize }) };
}

const hfJson = (dir: string, name: string) => JSON.parse(readFileSync(`${dir}/${name}`, 'utf8'));

describe('GGUF header', () => {
  it('reads stories260K: metadata, 48 F32 tensors at aligned offsets', async () => {
    // A small chunk size makes the reader refill many times, across values and strings.
    const { source, header } = await ggufHeaderOf(STORIES_GGUF, 4096);
    expect(source.size).toBe(1185376);
    expect(header.version).toBe(3);
    const m = header.metadata;
    expect(m['general.architecture']).toBe('llama');
    expect(m['llama.embedding_length']).toBe(64);
    expect(m['llama.block_count']).toBe(5);
    expect(m['llama.feed_forward_length']).toBe(172);
    expect(m['llama.attention.head_count']).toBe(8);
    expect(m['llama.attention.head_count_kv']).toBe(4);
    expect(m['llama.context_length']).toBe(2048);
    expect(m['llama.attention.layer_norm_rms_epsilon']).toBeCloseTo(1e-5, 10);
    expect(m['tokenizer.ggml.model']).toBe('llama');
    expect(m['tokenizer.ggml.padding_token_id']).toBe(4294967295);
    const tokens = m['tokenizer.ggml.tokens'] as string[];
    expect(tokens.length).toBe(512);
    expect(tokens.slice(0, 4)).toEqual(['<unk>', '<s>', '</s>', '<0x00>']);
    expect(tokens[259]).toBe('▁t');
    expect((m['tokenizer.ggml.scores'] as number[])[261]).toBe(-2);
    expect((m['tokenizer.ggml.token_type'] as number[]).slice(0, 4)).toEqual([2, 3, 3, 6]);

    expect(header.tensors.length).toBe(48);
    expect(header.alignment).toBe(32);
    expect(header.dataOffset % 32).toBe(0);
    expect(header.tensors.every((t) => t.type === 'F32' && t.ggmlType === 0)).toBe(true);
    const byName = new Map(header.tensors.map((t) => [t.name, t]));
    expect(byName.get('token_embd.weight')).toMatchObject({ ne: [64, 512], offset: header.dataOffset, byteLength: 64 * 512 * 4 });
    expect(byName.get('output_norm.weight')).toMatchObject({ ne: [64], offset: header.dataOffset + 131072, byteLength: 256 });
    expect(byName.get('blk.0.ffn_down.weight')).toMatchObject({ ne: [172, 64], offset: header.dataOffset + 355840 });
    const last = header.tensors[header.tensors.length - 1];
    expect(last.name).toBe('blk.4.ffn_norm.weight');
    expect(last.offset + last.byteLength).toBe(source.size);
  });

  it('reads llama-2-tiny-random: 32000-token vocabulary, F16 matrices and F32 norms', async () => {
    const { source, header } = await ggufHeaderOf(TINY_GGUF);
    const m = header.metadata;
    expect(m['general.name']).toBe('LLaMA v2');
    expect(m['general.file_type']).toBe(1);
    const tokens = m['tokenizer.ggml.tokens'] as string[];
    expect(tokens.length).toBe(32000);
    expect(tokens[9038]).toBe('▁Once');
    expect((m['tokenizer.ggml.scores'] as number[]).length).toBe(32000);
    expect(header.tensors.length).toBe(12);
    const byName = new Map(header.tensors.map((t) => [t.name, t]));
    expect(byName.get('token_embd.weight')).toMatchObject({ type: 'F16', ggmlType: 1, ne: [8, 32000], byteLength: 8 * 32000 * 2 });
    expect(byName.get('blk.0.attn_norm.weight')).toMatchObject({ type: 'F32', ne: [8] });
    expect(byName.get('blk.0.ffn_down.weight')).toMatchObject({ type: 'F16', ne: [32, 8], offset: header.dataOffset + 513536 });
    const output = byName.get('output.weight')!;
    expect(output.offset + output.byteLength).toBe(source.size);
  });

  it('names the tensor and the type of an unsupported tensor type', async () => {
    const file = buildGguf({ 'general.architecture': { type: 'string', value: 'llama' } }, [
      { name: 'token_embd.weight', ne: [32, 2], ggmlType: 0, data: new Uint8Array(256) },
      { name: 'blk.0.attn_q.weight', ne: [256, 1], ggmlType: 10, data: new Uint8Array(84) },
    ]);
    await expect(readGgufHeader(memorySource('q.gguf', file))).rejects.toThrow(/blk\.0\.attn_q\.weight.*Q2_K/);
  });

  it('honours general.alignment and rejects a truncated file', async () => {
    const arch = { type: 'string', value: 'llama' } as const;
    const tensors = [
      { name: 'a', ne: [3], ggmlType: 0, data: new Uint8Array(new Float32Array([1, 2, 3]).buffer) },
      { name: 'b', ne: [2], ggmlType: 1, data: new Uint8Array([0, 0x3c, 0, 0x40]) },
      { name: 'c', ne: [2, 1], ggmlType: 30, data: new Uint8Array([0x80, 0x3f, 0, 0x40]) },
    ];
    const good = buildGguf({ 'general.architecture': arch }, tensors);
    const header = await readGgufHeader(memorySource('a.gguf', good));
    expect(header.dataOffset % 32).toBe(0);
    expect(header.tensors.map((t) => t.offset - header.dataOffset)).toEqual([0, 32, 64]);
    expect(header.tensors.map((t) => t.type)).toEqual(['F32', 'F16', 'BF16']);
    expect(header.tensors[1].byteLength).toBe(4);
    const wide = buildGguf({ 'general.architecture': arch, 'general.alignment': { type: 'u32', value: 64 } }, tensors);
    const wideHeader = await readGgufHeader(memorySource('a.gguf', wide));
    expect(wideHeader.alignment).toBe(64);
    expect(wideHeader.dataOffset % 64).toBe(0);
    expect(wideHeader.tensors.map((t) => t.offset - wideHeader.dataOffset)).toEqual([0, 64, 128]);
    for (const [value, ok] of [[4, true], [1, true], [24, false]] as const) {
      const file = buildGguf({ 'general.architecture': arch, 'general.alignment': { type: 'u32', value } }, tensors);
      if (ok) expect((await readGgufHeader(memorySource('a.gguf', file))).alignment).toBe(value);
      else await expect(readGgufHeader(memorySource('a.gguf', file))).rejects.toThrow(/general\.alignment/);
    }
    await expect(readGgufHeader(memorySource('a.gguf', good.slice(0, header.dataOffset + 66)))).rejects.toThrow(/truncated/);
    await expect(readGgufHeader(memorySource('a.gguf', good.slice(0, 40)))).rejects.toThrow(/truncated/);
    await expect(readGgufHeader(memorySource('x.gguf', new TextEncoder().encode('not a gguf file at all....')))).rejects.toThrow(/not a GGUF/);
  });
});

describe('safetensors', () => {
  it('reads the header of stories260K (F32, tied: no lm_head) and llama-2-tiny-random (F16)', async () => {
    const stories = (await filesFromPath(STORIES_HF).open('model.safetensors'))!;
    const header = await readSafetensorsHeader(stories);
    const byName = new Map(header.tensors.map((t) => [t.name, t]));
    expect(header.tensors.length).toBe(2 + 5 * 9);
    expect(byName.has('lm_head.weight')).toBe(false);
    expect(byName.get('model.embed_tokens.weight')).toMatchObject({ dtype: 'F32', shape: [512, 64], byteLength: 512 * 64 * 4 });
    expect(byName.get('model.layers.0.mlp.down_proj.weight')).toMatchObject({ dtype: 'F32', shape: [64, 172] });
    for (const t of header.tensors) expect(t.offset).toBeGreaterThanOrEqual(header.dataOffset);

    const tiny = await readSafetensorsHeader((await filesFromPath(TINY_HF).open('model.safetensors'))!);
    const tinyByName = new Map(tiny.tensors.map((t) => [t.name, t]));
    expect(tinyByName.get('lm_head.weight')).toMatchObject({ dtype: 'F16', shape: [32000, 8] });
  });

  it('reads a sharded checkpoint through model.safetensors.index.json', async () => {
    const f32 = (values: number[]) => new Uint8Array(new Float32Array(values).buffer);
    const shard1 = buildSafetensors([{ name: 'a.weight', dtype: 'F32', shape: [2, 2], data: f32([1, 2, 3, 4]) }]);
    const shard2 = buildSafetensors([
      { name: 'b.weight', dtype: 'BF16', shape: [2], data: new Uint8Array([0x80, 0x3f, 0, 0x40]) },
      { name: 'c.bias', dtype: 'F16', shape: [1], data: new Uint8Array([0, 0x3c]) },
    ]);
    const index = { metadata: { total_size: 24 }, weight_map: { 'a.weight': 'm-00001-of-00002.safetensors', 'b.weight': 'm-00002-of-00002.safetensors', 'c.bias': 'm-00002-of-00002.safetensors' } };
    const files = filesFromMemory('sharded', {
      'model.safetensors.index.json': JSON.stringify(index),
      'm-00001-of-00002.safetensors': shard1,
      'm-00002-of-00002.safetensors': shard2,
    });
    const tensors = await readSafetensorsCheckpoint(files);
    const byName = new Map(tensors.map((t) => [t.name, t]));
    expect(byName.get('a.weight')).toMatchObject({ file: 'm-00001-of-00002.safetensors', dtype: 'F32', shape: [2, 2], byteLength: 16 });
    expect(byName.get('b.weight')).toMatchObject({ file: 'm-00002-of-00002.safetensors', dtype: 'BF16' });
    const c = byName.get('c.bias')!;
    expect([...shard2.subarray(c.offset, c.offset + c.byteLength)]).toEqual([0, 0x3c]);

    const missing = filesFromMemory('sharded', { 'model.safetensors.index.json': JSON.stringify(index), 'm-00001-of-00002.safetensors': shard1 });
    await expect(readSafetensorsCheckpoint(missing)).rejects.toThrow(/m-00002-of-00002\.safetensors/);
    await expect(readSafetensorsCheckpoint(filesFromMemory('none', {}))).rejects.toThrow(/model\.safetensors/);
  });

  it('reads tensors of every dtype of the format (sizes checked where the dtype is known)', async () => {
    const file = buildSafetensors([
      { name: 'ok', dtype: 'F32', shape: [1], data: new Uint8Array(4) },
      { name: 'model.position_ids', dtype: 'I64', shape: [1], data: new Uint8Array(8) },
    ]);
    const header = await readSafetensorsHeader(memorySource('model.safetensors', file));
    expect(header.tensors.map((t) => [t.name, t.dtype, t.byteLength])).toEqual([['ok', 'F32', 4], ['model.position_ids', 'I64', 8]]);
    const newer = buildSafetensors([{ name: 'scale', dtype: 'F8_E8M0', shape: [4], data: new Uint8Array(4) }]);
    expect((await readSafetensorsHeader(memorySource('model.safetensors', newer))).tensors[0]).toMatchObject({ dtype: 'F8_E8M0', byteLength: 4 });
    const short = buildSafetensors([{ name: 'w', dtype: 'I64', shape: [2], data: new Uint8Array(8) }]);
    await expect(readSafetensorsHeader(memorySource('model.safetensors', short))).rejects.toThrow(/w has data_offsets/);
  });

  it('a checkpoint may hold tensors of other dtypes that the model does not use; one it needs is named', async () => {
    const bytes = readBytes(`${STORIES_HF}/model.safetensors`);
    const header = await readSafetensorsHeader(memorySource('model.safetensors', bytes));
    const tensors = header.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: bytes.subarray(t.offset, t.offset + t.byteLength) }));
    const config = JSON.parse(new TextDecoder().decode(readBytes(`${STORIES_HF}/config.json`)));
    const folder = (list: typeof tensors, configJson: Record<string, unknown> = config) =>
      filesFromMemory('hf', {
        'config.json': JSON.stringify(configJson),
        'tokenizer.json': readBytes(`${STORIES_HF}/tokenizer.json`),
        'model.safetensors': buildSafetensors(list),
      });
    const extra = await openModel(folder([...tensors, { name: 'model.position_ids', dtype: 'I64', shape: [1], data: new Uint8Array(8) }]));
    expect(extra.tensors.has('model.position_ids')).toBe(false);
    expect(extra.tensors.size).toBe(tensors.length);
    const retyped = tensors.map((t) => (t.name === 'model.norm.weight' ? { ...t, dtype: 'I32' } : t));
    await expect(openModel(folder(retyped))).rejects.toThrow(/model\.norm\.weight has dtype I32/);
    // Without tie_word_embeddings, a missing lm_head means tied; one it cannot load is named instead.
    const { tie_word_embeddings: _, ...untold } = config;
    expect((await openModel(folder(tensors, untold))).config.tieWordEmbeddings).toBe(true);
    const lmHead = { name: 'lm_head.weight', dtype: 'I32', shape: [512, 64], data: new Uint8Array(512 * 64 * 4) };
    await expect(openModel(folder([...tensors, lmHead], untold))).rejects.toThrow(/lm_head\.weight has dtype I32/);
  });
});

describe('config', () => {
  it('reads the same dims from both layouts; RoPE pairing and tying differ as documented', async () => {
    for (const [gguf, hf] of [[STORIES_GGUF, STORIES_HF], [TINY_GGUF, TINY_HF]]) {
      const { header } = await ggufHeaderOf(gguf);
      const fromGguf = configFromGguf(header.metadata, undefined, header.tensors.map((t) => t.name));
      const fromHf = configFromHf(hfJson(hf, 'config.json'));
      expect(fromGguf.ropePairing).toBe('adjacent');
      expect(fromHf.ropePairing).toBe('halves');
      const { ropePairing: _a, tieWordEmbeddings: _b, contextLength: _c, ...restGguf } = fromGguf;
      const { ropePairing: _d, tieWordEmbeddings: _e, contextLength: _f, ...restHf } = fromHf;
      expect(restGguf).toEqual(restHf);
      expect(fromGguf.contextLength).toBe(fromHf.contextLength);
    }
    const stories = configFromHf(hfJson(STORIES_HF, 'config.json'));
    expect(stories).toMatchObject({
      architecture: 'llama', vocabSize: 512, hiddenSize: 64, intermediateSize: 172, numLayers: 5, numHeads: 8,
      numKvHeads: 4, headDim: 8, contextLength: 2048, ropeTheta: 10000, tieWordEmbeddings: true, attentionBias: false,
    });
    // The stories260K GGUF carries output.weight, so it is not tied there.
    const { header } = await ggufHeaderOf(STORIES_GGUF);
    expect(configFromGguf(header.metadata, undefined, header.tensors.map((t) => t.name)).tieWordEmbeddings).toBe(false);
    expect(configFromGguf(header.metadata, undefined, ['token_embd.weight']).tieWordEmbeddings).toBe(true);
  });

  it('reads Qwen2 and Mistral configs and defaults', () => {
    const base = { hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 100, rms_norm_eps: 1e-6 };
    const qwen = configFromHf({ ...base, architectures: ['Qwen2ForCausalLM'], num_key_value_heads: 2, tie_word_embeddings: true, rope_theta: 1e6, sliding_window: 32, use_sliding_window: false, max_position_embeddings: 4096 });
    expect(qwen).toMatchObject({ architecture: 'qwen2', attentionBias: true, numKvHeads: 2, headDim: 16, ropeTheta: 1e6, contextLength: 4096, tieWordEmbeddings: true });
    const mistral = configFromHf({ ...base, architectures: ['MistralForCausalLM'], sliding_window: 1024, max_position_embeddings: 32768 });
    expect(mistral).toMatchObject({ architecture: 'mistral', numKvHeads: 4, ropeTheta: 10000, contextLength: 32768, slidingWindow: 1024, tieWordEmbeddings: false });
    expect(qwen.slidingWindow).toBeUndefined();
    expect(configFromHf({ ...base, architectures: ['LlamaForCausalLM'], head_dim: 32 }).headDim).toBe(32);
  });

  it('names what is unsupported', () => {
    const base = { hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 100 };
    expect(() => configFromHf({ ...base, architectures: ['GemmaForCausalLM'] })).toThrow(/GemmaForCausalLM/);
    expect(() => configFromHf({ ...base, architectures: ['LlamaForCausalLM'], rope_scaling: { rope_type: 'yarn', factor: 4 } })).toThrow(/rope_scaling.*yarn|yarn.*rope_scaling/);
    expect(() => configFromHf({ ...base, architectures: ['LlamaForCausalLM'], rope_scaling: { rope_type: 'llama3', factor: 32 } })).toThrow(/low_freq_factor/);
    expect(() => configFromHf({ ...base, architectures: ['MistralForCausalLM'], num_local_experts: 8 })).toThrow(/mixture-of-experts/);
    expect(() => configFromHf({ ...base, architectures: ['LlamaForCausalLM'], hidden_act: 'gelu' })).toThrow(/gelu/);
    const gguf = { 'general.architecture': 'llama', 'llama.embedding_length': 64, 'llama.block_count': 2, 'llama.feed_forward_length': 128, 'llama.attention.head_count': 4, 'llama.context_length': 512 };
    expect(configFromGguf(gguf, 100)).toMatchObject({ vocabSize: 100, numKvHeads: 4, headDim: 16, ropeTheta: 10000, ropePairing: 'adjacent' });
    expect(() => configFromGguf({ ...gguf, 'general.architecture': 'gemma2' }, 100)).toThrow(/gemma2/);
    expect(() => configFromGguf({ ...gguf, 'llama.expert_count': 8 }, 100)).toThrow(/mixture-of-experts/);
    expect(() => configFromGguf({ ...gguf, 'llama.rope.scaling.type': 'yarn' }, 100)).toThrow(/yarn/);
    // Fewer rotated dims than the head rotate only those (llama.cpp's n_rot); an odd count or more than the head is refused.
    expect(modelLayers(configFromGguf({ ...gguf, 'llama.rope.dimension_count': 8 }, 100))[0].rope?.rotaryDims).toBe(8);
    expect(() => configFromGguf({ ...gguf, 'llama.rope.dimension_count': 7 }, 100)).toThrow(/partial RoPE/);
    expect(() => configFromGguf({ ...gguf, 'llama.rope.dimension_count': 32 }, 100)).toThrow(/partial RoPE/);
  });
});

describe('tensor names', () => {
  it('maps GGUF names to Hugging Face names and shapes', () => {
    expect(hfNameFromGguf('token_embd.weight')).toBe('model.embed_tokens.weight');
    expect(hfNameFromGguf('output_norm.weight')).toBe('model.norm.weight');
    expect(hfNameFromGguf('output.weight')).toBe('lm_head.weight');
    expect(hfNameFromGguf('blk.3.attn_norm.weight')).toBe('model.layers.3.input_layernorm.weight');
    expect(hfNameFromGguf('blk.0.attn_q.weight')).toBe('model.layers.0.self_attn.q_proj.weight');
    expect(hfNameFromGguf('blk.0.attn_k.bias')).toBe('model.layers.0.self_attn.k_proj.bias');
    expect(hfNameFromGguf('blk.12.attn_output.weight')).toBe('model.layers.12.self_attn.o_proj.weight');
    expect(hfNameFromGguf('blk.1.ffn_norm.weight')).toBe('model.layers.1.post_attention_layernorm.weight');
    expect(hfNameFromGguf('blk.1.ffn_gate.weight')).toBe('model.layers.1.mlp.gate_proj.weight');
    expect(hfNameFromGguf('blk.1.ffn_up.weight')).toBe('model.layers.1.mlp.up_proj.weight');
    expect(hfNameFromGguf('blk.1.ffn_down.weight')).toBe('model.layers.1.mlp.down_proj.weight');
    expect(hfNameFromGguf('rope_freqs.weight')).toBeNull();
    expect(hfShapeFromGguf([64, 172])).toEqual([172, 64]);
  });

  it('GGUF and safetensors tensors of stories260K hold the same bytes after name mapping', async () => {
    const gguf = await openModel(filesFromPath(STORIES_GGUF));
    const hf = await openModel(filesFromPath(STORIES_HF));
    const ggufBytes = readBytes(STORIES_GGUF);
    const hfBytes = readBytes(`${STORIES_HF}/model.safetensors`);
    // Not permuted (Wq/Wk rows are, for RoPE pairing): these must match byte for byte.
    const names = ['model.embed_tokens.weight', 'model.norm.weight'];
    for (let l = 0; l < 5; l++) {
      for (const p of ['mlp.down_proj', 'mlp.up_proj', 'mlp.gate_proj', 'self_attn.v_proj', 'self_attn.o_proj', 'input_layernorm', 'post_attention_layernorm']) {
        names.push(`model.layers.${l}.${p}.weight`);
      }
    }
    for (const name of names) {
      const a = gguf.tensors.get(name)!;
      const b = hf.tensors.get(name)!;
      expect(a.shape, name).toEqual(b.shape);
      expect(a.byteLength).toBe(b.byteLength);
      expect(Buffer.compare(ggufBytes.subarray(a.offset, a.offset + a.byteLength), hfBytes.subarray(b.offset, b.offset + b.byteLength)), name).toBe(0);
    }
    // Wq is permuted (same bytes, different row order): same multiset of rows, different order.
    const q1 = gguf.tensors.get('model.layers.0.self_attn.q_proj.weight')!;
    const q2 = hf.tensors.get('model.layers.0.self_attn.q_proj.weight')!;
    expect(Buffer.compare(ggufBytes.subarray(q1.offset, q1.offset + q1.byteLength), hfBytes.subarray(q2.offset, q2.offset + q2.byteLength))).not.toBe(0);
  });
});

describe('openModel', () => {
  it('opens both layouts of both models', async () => {
    for (const path of [STORIES_GGUF, STORIES_HF, TINY_GGUF, TINY_HF]) {
      const model = await openModel(filesFromPath(path));
      expect(model.format).toBe(path.endsWith('.gguf') ? 'gguf' : 'safetensors');
      expect(model.tokenizer.encode('Once upon a time')).toEqual(
        model.config.vocabSize === 512 ? [1, 403, 407, 261, 378] : [1, 9038, 2501, 263, 931],
      );
      expect(model.totalBytes).toBeGreaterThan(0);
    }
    expect((await openModel(filesFromPath(STORIES_GGUF))).id).toBe('stories260K');
    expect((await openModel(filesFromPath(STORIES_HF))).id).toBe('hf');
    const stories = await openModel(filesFromPath(STORIES_HF));
    expect(stories.totalBytes).toBe((512 * 64 + 64 + 5 * (64 * 64 * 2 + 32 * 64 * 2 + 64 * 2 + 172 * 64 * 3)) * 4);
  });

  it('names a missing file', async () => {
    const dir = (name: string) => readBytes(`${STORIES_HF}/${name}`);
    const all = {
      'config.json': dir('config.json'),
      'tokenizer.json': dir('tokenizer.json'),
      'model.safetensors': dir('model.safetensors'),
    };
    await expect(openModel(filesFromMemory('m', { ...all, 'config.json': undefined as never }))).rejects.toThrow(/config\.json/);
    const { 'tokenizer.json': _t, ...noTokenizer } = all;
    await expect(openModel(filesFromMemory('m', noTokenizer))).rejects.toThrow(/tokenizer\.json/);
    const { 'model.safetensors': _m, ...noWeights } = all;
    await expect(openModel(filesFromMemory('m', noWeights))).rejects.toThrow(/model\.safetensors/);
    // tokenizer_config.json and generation_config.json are optional.
    const model = await openModel(filesFromMemory('m', all));
    expect(model.tokenizer.bosId).toBe(1);
    expect(model.tokenizer.eosIds).toEqual([2]);
    await expect(openModel(filesFromPath('/nonexistent/model.gguf'))).rejects.toThrow(/model\.gguf/);
  });

  it('rejects an unsupported GGUF architecture before reading weights', async () => {
    const bytes = readBytes(STORIES_GGUF);
    // Same length: 'llama' -> 'gemma' in the general.architecture value.
    const text = new TextDecoder('latin1').decode(bytes.subarray(0, 16384));
    const at = text.indexOf('general.architecture') + 'general.architecture'.length + 4 + 8;
    const patched = bytes.slice();
    patched.set(new TextEncoder().encode('gemma'), at);
    await expect(openModel(filesFromMemory('x', { 'x.gguf': patched }, 'x.gguf'))).rejects.toThrow(/gemma/);
  });
});

/** A fetch over in-memory files that honours HEAD and Range, counting requests. */
function mockFetch(files: Record<string, Uint8Array>, options: { head?: boolean; ranges?: boolean; spaFallback?: boolean } = {}) {
  const calls: { url: string; method: string; range: string | null }[] = [];
  const fetchImpl = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = String(input);
    const method = init?.method ?? 'GET';
    const range = new Headers(init?.headers).get('range');
    calls.push({ url, method, range });
    const name = decodeURIComponent(new URL(url).pathname.split('/').pop()!);
    const bytes = files[name];
    if (!bytes && options.spaFallback) return new Response('<!doctype html><title>app</title>', { status: 200, headers: { 'content-type': 'text/html' } });
    if (!bytes) return new Response('not found', { status: 404 });
    if (method === 'HEAD') {
      if (options.head === false) return new Response(null, { status: 405 });
      return new Response(null, { status: 200, headers: { 'content-length': String(bytes.length) } });
    }
    const m = range?.match(/bytes=(\d+)-(\d+)/);
    if (m && options.ranges !== false) {
      const start = Number(m[1]);
      const end = Math.min(Number(m[2]), bytes.length - 1);
      // Deliver in small pieces, as a network would.
      const body = bytes.slice(start, end + 1);
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          for (let at = 0; at < body.length; at += 1000) controller.enqueue(body.slice(at, at + 1000));
          controller.close();
        },
      });
      return new Response(stream, { status: 206, headers: { 'content-range': `bytes ${start}-${end}/${bytes.length}` } });
    }
    return new Response(bytes.slice(), { status: 200, headers: { 'content-length': String(bytes.length) } });
  }) as typeof fetch;
  return { fetchImpl, calls };
}

describe('sources', () => {
  const hfNames = ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'model.safetensors'];
  const hfFiles = Object.fromEntries(hfNames.map((n) => [n, readBytes(`${STORIES_HF}/${n}`)]));

  it('filesFromUrl: a folder URL and a GGUF URL; ranged reads; stream() is one request', async () => {
    const { fetchImpl, calls } = mockFetch({ ...hfFiles, 'stories260K.gguf': readBytes(STORIES_GGUF) });
    const folder = filesFromUrl('https://example.com/models/stories260K/hf', fetchImpl);
    expect(folder.id).toBe('hf');
    expect(folder.ggufFile).toBeUndefined();
    expect(await folder.open('missing.json')).toBeNull();
    const model = await openModel(folder);
    expect(model.config.hiddenSize).toBe(64);
    const source = (await folder.open('model.safetensors'))!;
    expect(source.size).toBe(hfFiles['model.safetensors'].length);
    expect([...(await source.read(1000, 10))]).toEqual([...hfFiles['model.safetensors'].subarray(1000, 1010)]);

    calls.length = 0;
    const pieces: Uint8Array[] = [];
    for await (const piece of source.stream(100, 100_000, 30_000)) pieces.push(piece);
    expect(calls.length).toBe(1);
    expect(calls[0].range).toBe('bytes=100-100099');
    expect(pieces.map((p) => p.length)).toEqual([30_000, 30_000, 30_000, 10_000]);
    expect(Buffer.compare(Buffer.concat(pieces), hfFiles['model.safetensors'].subarray(100, 100_100))).toBe(0);

    const gguf = filesFromUrl('https://example.com/models/stories260K.gguf?download=1', fetchImpl);
    expect(gguf.id).toBe('stories260K');
    expect(gguf.ggufFile).toBe('stories260K.gguf');
    expect((await openModel(gguf)).format).toBe('gguf');

    expect(filesFromUrl('https://huggingface.co/org/SmolLM2-135M/resolve/main/').id).toBe('SmolLM2-135M');
  });

  it('filesFromUrl: sizes from Content-Range when HEAD is refused; a server without Range support', async () => {
    const { fetchImpl } = mockFetch(hfFiles, { head: false });
    const source = (await filesFromUrl('https://example.com/m/', fetchImpl).open('config.json'))!;
    expect(source.size).toBe(hfFiles['config.json'].length);
    expect(JSON.parse(new TextDecoder().decode(await source.read(0, source.size))).hidden_size).toBe(64);

    // A dev server's SPA fallback answers missing files with index.html: they count as missing.
    const spa = mockFetch(hfFiles, { spaFallback: true });
    expect(await filesFromUrl('https://example.com/m/', spa.fetchImpl).open('model.safetensors.index.json')).toBeNull();
    const spaNoHead = mockFetch(hfFiles, { spaFallback: true, head: false });
    expect(await filesFromUrl('https://example.com/m/', spaNoHead.fetchImpl).open('generation.json')).toBeNull();
    expect((await openModel(filesFromUrl('https://example.com/m/', spa.fetchImpl))).format).toBe('safetensors');

    const noRanges = mockFetch(hfFiles, { ranges: false });
    const s2 = (await filesFromUrl('https://example.com/m/', noRanges.fetchImpl).open('model.safetensors'))!;
    expect([...(await s2.read(5000, 8))]).toEqual([...hfFiles['model.safetensors'].subarray(5000, 5008)]);
  });

  it('filesFromFileList: a lone GGUF File, and a picked folder', async () => {
    const gguf = filesFromFileList([new File([readBytes(STORIES_GGUF)], 'stories260K.gguf')]);
    expect(gguf.id).toBe('stories260K');
    expect(gguf.ggufFile).toBe('stories260K.gguf');
    expect((await openModel(gguf)).format).toBe('gguf');

    const picked = hfNames.map((n) => {
      const f = new File([hfFiles[n]], n);
      Object.defineProperty(f, 'webkitRelativePath', { value: `stories/${n}` });
      return f;
    });
    const folder: ModelFiles = filesFromFileList(picked);
    expect(folder.id).toBe('stories');
    const model = await openModel(folder);
    expect(model.format).toBe('safetensors');
    const source = (await folder.open('model.safetensors'))!;
    const pieces: Uint8Array[] = [];
    for await (const p of source.stream(8, 5000, 2048)) pieces.push(p);
    expect(pieces.map((p) => p.length)).toEqual([2048, 2048, 904]);
    expect(Buffer.compare(Buffer.concat(pieces), hfFiles['model.safetensors'].subarray(8, 5008))).toBe(0);
  });

  it('filesFromPath: reads and streams at offsets; a missing file is null', async () => {
    const files = filesFromPath(STORIES_HF);
    expect(await files.open('nope.json')).toBeNull();
    const source = (await files.open('model.safetensors'))!;
    const bytes = readBytes(`${STORIES_HF}/model.safetensors`);
    expect([...(await source.read(777, 3))]).toEqual([...bytes.subarray(777, 780)]);
    await expect(source.read(bytes.length - 2, 3)).rejects.toThrow(RangeError);
    const pieces: Uint8Array[] = [];
    for await (const p of source.stream(3, 10_001, 4096)) pieces.push(p);
    expect(Buffer.compare(Buffer.concat(pieces), bytes.subarray(3, 10_004))).toBe(0);
  });
});
