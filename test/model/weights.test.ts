import { beforeAll, describe, expect, it } from 'vitest';
import type { GpuContext } from '../../src/gpu/device.ts';
import { testGpu } from '../helpers/gpu.ts';
import { filesFromMemory } from '../../src/io/files.ts';
import { openModel, uploadLlamaWeights, type LoadProgress } from '../../src/engine/open-model.ts';
import { checkTensors, f16ToF32, requiredTensors, toFloat32 } from '../../src/model/weights.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { buildSafetensors, readBytes, STORIES_GGUF, STORIES_HF, TINY_GGUF, TINY_HF } from '../helpers/model-files.ts';

async function readBuffer(ctx: GpuContext, buffer: GPUBuffer): Promise<Uint8Array> {
  const { device } = ctx;
  const staging = device.createBuffer({ size: buffer.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, buffer.size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Uint8Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  return out;
}

const same = (a: Uint8Array, b: Uint8Array) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;


describe('weight upload', () => {
  let ctx: GpuContext;
  beforeAll(async () => {
    ctx = await testGpu();
  });

  for (const layout of [
    { name: 'stories260K GGUF', path: STORIES_GGUF, file: STORIES_GGUF },
    { name: 'stories260K safetensors', path: STORIES_HF, file: `${STORIES_HF}/model.safetensors` },
    { name: 'llama-2-tiny-random GGUF (F16)', path: TINY_GGUF, file: TINY_GGUF },
    { name: 'llama-2-tiny-random safetensors (F16)', path: TINY_HF, file: `${TINY_HF}/model.safetensors` },
  ]) {
    it(`uploads ${layout.name}: buffers hold the file's bytes`, async () => {
      const model = await openModel(filesFromPath(layout.path));
      const bytes = readBytes(layout.file);
      const events: LoadProgress[] = [];
      // An odd chunk size: chunk edges fall inside tensors at offsets that are not multiples of 4.
      const weights = await uploadLlamaWeights(ctx, model, (p) => events.push({ ...p }), { chunkSize: 4093 });
      try {
        const { config } = model;
        expect(weights.layers.length).toBe(config.numLayers);
        const fileBytes = (name: string) => {
          const t = model.tensors.get(name)!;
          return bytes.subarray(t.offset, t.offset + t.byteLength);
        };
        const expectMatrix = async (m: { buffer: GPUBuffer; dtype: string; rows: number; cols: number }, name: string) => {
          const t = model.tensors.get(name)!;
          expect(m.dtype).toBe(t.dtype);
          expect([m.rows, m.cols]).toEqual(t.shape);
          const gpu = await readBuffer(ctx, m.buffer);
          expect(same(gpu.subarray(0, t.byteLength), fileBytes(name)), name).toBe(true);
        };
        const expectVector = async (buffer: GPUBuffer, name: string) => {
          const t = model.tensors.get(name)!;
          const gpu = new Float32Array((await readBuffer(ctx, buffer)).buffer);
          expect([...gpu], name).toEqual([...toFloat32(fileBytes(name), t.dtype)]);
        };
        await expectMatrix(weights.tokenEmbedding, 'model.embed_tokens.weight');
        await expectVector(weights.outputNorm, 'model.norm.weight');
        if (config.tieWordEmbeddings) expect(weights.lmHead).toBe(weights.tokenEmbedding);
        else await expectMatrix(weights.lmHead, 'lm_head.weight');
        const last = config.numLayers - 1;
        const layer = weights.layers[last];
        const p = `model.layers.${last}.`;
        await expectMatrix(layer.wq, `${p}self_attn.q_proj.weight`);
        await expectMatrix(layer.wk, `${p}self_attn.k_proj.weight`);
        await expectMatrix(layer.wv, `${p}self_attn.v_proj.weight`);
        await expectMatrix(layer.wo, `${p}self_attn.o_proj.weight`);
        await expectMatrix(layer.wGate, `${p}mlp.gate_proj.weight`);
        await expectMatrix(layer.wUp, `${p}mlp.up_proj.weight`);
        await expectMatrix(layer.wDown, `${p}mlp.down_proj.weight`);
        await expectVector(layer.attnNorm, `${p}input_layernorm.weight`);
        await expectVector(layer.ffnNorm, `${p}post_attention_layernorm.weight`);
        expect(layer.bq).toBeUndefined();

        // Progress: 'download' counts up to totalBytes, then one 'upload' at totalBytes.
        expect(events.length).toBeGreaterThan(2);
        const downloads = events.filter((e) => e.phase === 'download');
        for (let i = 1; i < downloads.length; i++) expect(downloads[i].loadedBytes).toBeGreaterThanOrEqual(downloads[i - 1].loadedBytes);
        expect(downloads[downloads.length - 1].loadedBytes).toBe(model.totalBytes);
        const totalTensors = requiredTensors(config).length;
        expect(events[events.length - 1]).toEqual({
          phase: 'upload', loadedBytes: model.totalBytes, totalBytes: model.totalBytes, loadedTensors: totalTensors, totalTensors,
        });
        for (let i = 1; i < downloads.length; i++) expect(downloads[i].loadedTensors).toBeGreaterThanOrEqual(downloads[i - 1].loadedTensors);
        expect(downloads[downloads.length - 1].loadedTensors).toBe(totalTensors);
      } finally {
        weights.destroy();
      }
    });
  }

  it('uploads a sharded BF16/F16 Qwen2-style checkpoint: biases and norms converted to f32', async () => {
    // vocab 6, hidden 4, 2 heads of 2, 1 KV head, FFN 3, 1 layer.
    let seed = 1;
    const random = (n: number, bytesPer: number) => {
      const out = new Uint8Array(n * bytesPer);
      for (let i = 0; i < out.length; i++) out[i] = (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
      // Keep the exponent bits tame so values are finite (f16 exponent 31 would be Inf/NaN).
      for (let i = bytesPer - 1; i < out.length; i += bytesPer) out[i] &= 0x3b;
      return out;
    };
    const t = (name: string, dtype: 'BF16' | 'F16' | 'F32', shape: number[]) => ({
      name, dtype, shape, data: random(shape.reduce((a, b) => a * b, 1), dtype === 'F32' ? 4 : 2),
    });
    const shard1 = [
      t('model.embed_tokens.weight', 'BF16', [6, 4]),
      t('model.layers.0.input_layernorm.weight', 'BF16', [4]),
      t('model.layers.0.self_attn.q_proj.weight', 'BF16', [4, 4]),
      t('model.layers.0.self_attn.q_proj.bias', 'BF16', [4]),
      t('model.layers.0.self_attn.k_proj.weight', 'F16', [2, 4]),
      t('model.layers.0.self_attn.k_proj.bias', 'F16', [2]),
      t('model.layers.0.self_attn.v_proj.weight', 'BF16', [2, 4]),
      t('model.layers.0.self_attn.v_proj.bias', 'F32', [2]),
    ];
    const shard2 = [
      t('model.layers.0.self_attn.o_proj.weight', 'BF16', [4, 4]),
      t('model.layers.0.post_attention_layernorm.weight', 'F16', [4]),
      t('model.layers.0.mlp.gate_proj.weight', 'BF16', [3, 4]),
      t('model.layers.0.mlp.up_proj.weight', 'BF16', [3, 4]),
      t('model.layers.0.mlp.down_proj.weight', 'BF16', [4, 3]),
      t('model.norm.weight', 'BF16', [4]),
    ];
    const weightMap: Record<string, string> = {};
    for (const x of shard1) weightMap[x.name] = 'model-00001-of-00002.safetensors';
    for (const x of shard2) weightMap[x.name] = 'model-00002-of-00002.safetensors';
    const config = {
      architectures: ['Qwen2ForCausalLM'], hidden_size: 4, intermediate_size: 3, num_hidden_layers: 1,
      num_attention_heads: 2, num_key_value_heads: 1, vocab_size: 6, tie_word_embeddings: true,
      rms_norm_eps: 1e-6, rope_theta: 1e6, max_position_embeddings: 64,
    };
    const vocab = Object.fromEntries(['a', 'b', 'c', 'd', 'e', 'f'].map((c, i) => [c, i]));
    const tokenizerJson = {
      version: '1.0', added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null,
      model: { type: 'BPE', vocab, merges: [], unk_token: null },
    };
    const files = filesFromMemory('tiny-qwen', {
      'config.json': JSON.stringify(config),
      'tokenizer.json': JSON.stringify(tokenizerJson),
      'model.safetensors.index.json': JSON.stringify({ weight_map: weightMap }),
      'model-00001-of-00002.safetensors': buildSafetensors(shard1),
      'model-00002-of-00002.safetensors': buildSafetensors(shard2),
    });
    const model = await openModel(files);
    expect(model.config).toMatchObject({ architecture: 'qwen2', attentionBias: true, tieWordEmbeddings: true });
    expect(model.tokenizer.addBos).toBe(false);
    const events: LoadProgress[] = [];
    const weights = await uploadLlamaWeights(ctx, model, (p) => events.push(p), { chunkSize: 7 });
    try {
      const byName = new Map([...shard1, ...shard2].map((x) => [x.name, x]));
      const emb = await readBuffer(ctx, weights.tokenEmbedding.buffer);
      expect(weights.tokenEmbedding).toMatchObject({ dtype: 'bf16', rows: 6, cols: 4 });
      expect(same(emb, byName.get('model.embed_tokens.weight')!.data)).toBe(true);
      expect(weights.lmHead).toBe(weights.tokenEmbedding);
      const down = await readBuffer(ctx, weights.layers[0].wDown.buffer);
      expect(same(down, byName.get('model.layers.0.mlp.down_proj.weight')!.data)).toBe(true);
      const k = await readBuffer(ctx, weights.layers[0].wk.buffer);
      expect(weights.layers[0].wk.dtype).toBe('f16');
      expect(same(k, byName.get('model.layers.0.self_attn.k_proj.weight')!.data)).toBe(true);

      const asF32 = async (b: GPUBuffer) => [...new Float32Array((await readBuffer(ctx, b)).buffer)];
      const bq = byName.get('model.layers.0.self_attn.q_proj.bias')!.data;
      const bqExpected = [0, 1, 2, 3].map((i) => new Float32Array(new Uint32Array([(bq[2 * i] | (bq[2 * i + 1] << 8)) << 16]).buffer)[0]);
      expect(await asF32(weights.layers[0].bq!)).toEqual(bqExpected);
      const bk = byName.get('model.layers.0.self_attn.k_proj.bias')!.data;
      expect(await asF32(weights.layers[0].bk!)).toEqual([0, 1].map((i) => f16ToF32(bk[2 * i] | (bk[2 * i + 1] << 8))));
      const bv = byName.get('model.layers.0.self_attn.v_proj.bias')!.data;
      expect(await asF32(weights.layers[0].bv!)).toEqual([...new Float32Array(bv.slice().buffer)]);
      expect(events[events.length - 1]).toEqual({
        phase: 'upload', loadedBytes: model.totalBytes, totalBytes: model.totalBytes, loadedTensors: 14, totalTensors: 14,
      });
    } finally {
      weights.destroy();
    }
  });

  it('names a tensor with the wrong shape, and a tensor too large for the device, before uploading', async () => {
    const model = await openModel(filesFromPath(STORIES_GGUF));
    const tensors = new Map(model.tensors);
    const down = tensors.get('model.layers.2.mlp.down_proj.weight')!;
    tensors.set(down.name, { ...down, shape: [172, 64] });
    await expect(uploadLlamaWeights(ctx, { ...model, tensors })).rejects.toThrow(/model\.layers\.2\.mlp\.down_proj\.weight/);
    // Under the size of one row (64 f32 weights): not even split into rows would it fit.
    const tiny = { ...ctx, limits: { ...ctx.limits, maxStorageBufferBindingSize: 200 } };
    await expect(uploadLlamaWeights(tiny, model)).rejects.toThrow(/model\.embed_tokens\.weight.*131072/);
  });

  it('refuses a bias the forward pass would not add (a Llama GGUF with q_proj biases), naming it', async () => {
    const model = await openModel(filesFromPath(STORIES_GGUF));
    expect(() => checkTensors(model.config, model.tensors)).not.toThrow();
    const tensors = new Map(model.tensors);
    const q = tensors.get('model.layers.0.self_attn.q_proj.weight')!;
    const name = 'model.layers.0.self_attn.q_proj.bias';
    tensors.set(name, { ...q, name, sourceName: 'blk.0.attn_q.bias', shape: [q.shape[0]] });
    expect(() => checkTensors(model.config, tensors)).toThrow(/blk\.0\.attn_q\.bias/);
  });

  it('converts f16 and bf16 to f32', () => {
    expect(f16ToF32(0x3c00)).toBe(1);
    expect(f16ToF32(0xc000)).toBe(-2);
    expect(f16ToF32(0x0001)).toBe(2 ** -24);
    expect(f16ToF32(0x7c00)).toBe(Infinity);
    expect([...toFloat32(new Uint8Array([0x80, 0x3f, 0x00, 0xc0]), 'bf16')]).toEqual([1, -2]);
  });
});
