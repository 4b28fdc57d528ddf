// GGUF versions of the generated random models (scripts/gguf-from-hf.ts, our writer and
// quantizers) against their Hugging Face folders: for every family, F32 / F16 GGUFs give the same
// logits and tokens as the folder they came from (so the Q/K permutation, the metadata, rope_freqs and the
// tokenizer.ggml.* keys are right), and quantized GGUFs match the CPU reference on the weights
// read back from the file and dequantized (test/reference/quant.ts).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { LlamaGenerator } from '../../src/engine/generator.ts';
import type { QuantDType } from '../../src/gpu/tensor.ts';
import { familyOf, modelLayers, type LlamaConfig } from '../../src/model/config.ts';
import { memorySource } from '../../src/io/files.ts';
import { openModel, uploadLlamaWeights } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/files.ts';
import { testGpu } from '../helpers/gpu.ts';
import { readBufferU32 } from '../../src/gpu/buffers.ts';
import { pairQuantBlocks, QUANT_FORMATS } from '../../src/gpu/weight-formats.ts';
import { readGgufHeader } from '../../src/io/formats/gguf.ts';
import { hfNameFromGguf } from '../../src/model/tensor-names.ts';
import { ggufTensorStorage, writeGgufFromHf, type GgufOutType } from '../../scripts/gguf-from-hf.ts';
import { FAMILIES, generateModel, type Family } from '../../scripts/model-families.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { f16BitsToF32 } from '../reference/cpu-ops.ts';
import { dequantize } from '../reference/quant.ts';
import { maxAbs, maxAbsDiff } from '../helpers/compare.ts';
import { cpuLlamaWeights, tempModels } from '../helpers/temp-models.ts';

const models = tempModels();

function argmaxRows(logits: Float32Array, vocab: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < logits.length / vocab; r++) {
    let best = 0;
    for (let i = 1; i < vocab; i++) if (logits[r * vocab + i] > logits[r * vocab + best]) best = i;
    out.push(best);
  }
  return out;
}

/** Greedy decoding from `prompt` for `steps` tokens; returns all logits (prefill and steps) and the tokens. */
async function greedy(generator: LlamaGenerator, prompt: number[], steps: number): Promise<{ logits: Float32Array[]; tokens: number[] }> {
  const model = generator.model;
  const cache = model.createKvCache(32);
  try {
    const logits: Float32Array[] = [await model.forward(prompt, 0, cache, { allLogits: true })];
    const tokens: number[] = [];
    const vocab = model.config.vocabSize;
    for (let s = 0; s < steps; s++) {
      const last = logits[logits.length - 1];
      const next = argmaxRows(last.subarray(last.length - vocab), vocab)[0];
      tokens.push(next);
      logits.push(await model.forward([next], prompt.length + s, cache));
    }
    return { logits, tokens };
  } finally {
    cache.destroy();
  }
}

/** The weights of a GGUF as CPU arrays: read back through our GGUF reader, dequantized on the CPU. */
async function cpuWeightsOfGguf(path: string, config: LlamaConfig): Promise<{ weights: CpuLlamaWeights; types: Set<string> }> {
  const bytes = new Uint8Array(readFileSync(path));
  const header = await readGgufHeader(memorySource('model.gguf', bytes));
  const byName = new Map<string, Float32Array>();
  const types = new Set<string>();
  for (const t of header.tensors) {
    const hf = hfNameFromGguf(t.name, familyOf(config));
    if (!hf) continue;
    types.add(t.type);
    const n = t.ne.reduce((a, b) => a * b, 1);
    const data = bytes.subarray(t.offset, t.offset + t.byteLength);
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    let values: Float32Array;
    if (t.type === 'F32') values = Float32Array.from({ length: n }, (_, i) => view.getFloat32(i * 4, true));
    else if (t.type === 'F16') values = Float32Array.from({ length: n }, (_, i) => f16BitsToF32(view.getUint16(i * 2, true)));
    else values = dequantize(t.type.toLowerCase() as QuantDType, data, n);
    byName.set(hf, values);
  }
  const weights = cpuLlamaWeights(config, byName);
  return { weights, types };
}

describe('the GGUF writer', () => {
  it('writes the metadata llama.cpp writes, aligned tensors, and the tokenizer.ggml.* keys', async () => {
    const dir = models.dir('webgpu-llama-gguf-meta-');
    generateModel({ family: 'llama3', shape: 'tiny', out: dir, seed: 3 });
    const path = join(dir, 'model.gguf');
    const { bytes, storage } = await writeGgufFromHf(dir, path, 'q8_0');
    const file = new Uint8Array(readFileSync(path));
    expect(file.length).toBe(bytes);
    const header = await readGgufHeader(memorySource('model.gguf', file));
    const m = header.metadata;
    expect(m['general.architecture']).toBe('llama');
    expect(header.alignment).toBe(32);
    expect(header.dataOffset % 32).toBe(0);
    for (const t of header.tensors) expect((t.offset - header.dataOffset) % 32, t.name).toBe(0);
    const last = header.tensors.at(-1)!;
    expect(file.length).toBe(header.dataOffset + Math.ceil((last.offset - header.dataOffset + last.byteLength) / 32) * 32);
    expect(m['llama.embedding_length']).toBe(32);
    expect(m['llama.attention.key_length']).toBe(16);
    expect(m['llama.rope.freq_base']).toBe(500000);
    expect(m['tokenizer.ggml.model']).toBe('gpt2');
    // llama.cpp's name for GPT-2's pre-tokenizer (it refuses 'gpt2': "unknown pre-tokenizer type")
    expect(m['tokenizer.ggml.pre']).toBe('gpt-2');
    expect((m['tokenizer.ggml.tokens'] as string[]).length).toBe(300);
    expect(m['tokenizer.ggml.bos_token_id']).toBe(295);
    expect(m['tokenizer.ggml.eot_token_id']).toBe(299);
    expect(m['tokenizer.ggml.add_bos_token']).toBe(true);
    // Llama 3 rope scaling as rope_freqs.weight; tied: no output.weight.
    expect(header.tensors[0]).toMatchObject({ name: 'rope_freqs.weight', type: 'F32', ne: [8] });
    expect(header.tensors.some((t) => t.name === 'output.weight')).toBe(false);
    expect(storage['blk.0.attn_q.weight']).toBe('q8_0');
    expect(storage['blk.0.attn_norm.weight']).toBe('f32');
  });

  it("Q8_0 / Q4_0 tensors stream into the GPU's pairs of blocks whatever the read chunk edges", async () => {
    for (const type of ['q8_0', 'q4_0'] as const) {
      const dir = models.dir(`webgpu-llama-gguf-chunks-${type}-`);
      // W_gate of 2112 x 32 weights: 2112 blocks, more than one staging array of the upload
      // (2048 blocks), so a full one is written before the rest.
      generateModel({ family: 'llama3', shape: 'tiny', out: dir, seed: 5, overrides: { intermediate_size: 2112 } });
      const path = join(dir, 'model.gguf');
      await writeGgufFromHf(dir, path, type);
      const file = new Uint8Array(readFileSync(path));
      const header = await readGgufHeader(memorySource('model.gguf', file));
      const gate = header.tensors.find((t) => t.name === 'blk.0.ffn_gate.weight')!;
      expect(gate.type).toBe(type.toUpperCase());
      const blocks = gate.byteLength / QUANT_FORMATS[type].blockBytes;
      expect(blocks).toBe(2112);
      const expected = pairQuantBlocks(type, file.subarray(gate.offset, gate.offset + gate.byteLength), blocks);
      const opened = await openModel(filesFromPath(path));
      const ctx = await testGpu();
      const read = async (chunkSize: number) => {
        const weights = await uploadLlamaWeights(ctx, opened, undefined, { chunkSize });
        try {
          expect(weights.layers[0].wGate.dtype).toBe(type);
          return new Uint8Array((await readBufferU32(ctx.device, weights.layers[0].wGate.buffer)).buffer);
        } finally {
          weights.destroy();
        }
      };
      // 4093: edges inside blocks, scales and pairs; 1 << 22: whole tensors.
      for (const chunkSize of [4093, 1 << 22]) {
        const got = await read(chunkSize);
        expect(Buffer.compare(Buffer.from(got.subarray(0, expected.length)), Buffer.from(expected)), `chunks of ${chunkSize}`).toBe(0);
      }
    }
  });

  it("picks llama.cpp's storage per tensor: the Q4_K_M mix and the fallbacks for partial blocks", () => {
    const L = 16;
    expect(ggufTensorStorage('q4_k_m', 'output.weight', [2048, 128256], L, false)).toBe('q6_k');
    expect(ggufTensorStorage('q4_k_m', 'token_embd.weight', [2048, 128256], L, true)).toBe('q6_k');
    expect(ggufTensorStorage('q4_k_m', 'token_embd.weight', [2048, 128256], L, false)).toBe('q4_k');
    // use_more_bits: the first and last eighth of the layers, and every third between.
    const moreBits = Array.from({ length: L }, (_, i) => ggufTensorStorage('q4_k_m', `blk.${i}.attn_v.weight`, [2048, 512], L, true));
    expect(moreBits.map((s, i) => (s === 'q6_k' ? i : -1)).filter((i) => i >= 0)).toEqual([0, 1, 4, 7, 10, 13, 14, 15]);
    expect(ggufTensorStorage('q4_k_m', 'blk.4.ffn_down.weight', [8192, 2048], L, true)).toBe('q6_k');
    expect(ggufTensorStorage('q4_k_m', 'blk.4.attn_q.weight', [2048, 2048], L, true)).toBe('q4_k');
    // Rows not a multiple of 256: Q4_K -> Q5_0, Q6_K -> Q8_0; not a multiple of 32 either: F16.
    expect(ggufTensorStorage('q4_k', 'blk.0.attn_q.weight', [896, 896], 24, true)).toBe('q5_0');
    expect(ggufTensorStorage('q6_k', 'blk.0.attn_q.weight', [896, 896], 24, true)).toBe('q8_0');
    expect(ggufTensorStorage('q4_k', 'blk.0.ffn_down.weight', [56, 32], 2, false)).toBe('f16');
    expect(ggufTensorStorage('q4_0', 'blk.0.ffn_down.weight', [56, 32], 2, false)).toBe('f16');
    expect(ggufTensorStorage('q4_0', 'blk.0.attn_norm.weight', [32], 2, false)).toBe('f32');
    expect(ggufTensorStorage('f16', 'blk.0.attn_q.weight', [32, 32], 2, false)).toBe('f16');
  });
});

const TEXT = 'Once upon a time, there was a tiny model.';

describe('GGUF (F32, F16) and Hugging Face layouts of the same random model agree', () => {
  for (const family of FAMILIES) {
    it(family, async () => {
      const dir = models.dir(`webgpu-llama-gguf-${family}-`);
      // bf16 weights: exact in f32 and (at these magnitudes) in f16, so all three hold the same values.
      // SmolLM3: llama.cpp's fixed NoPE pattern (every 4th layer), which GGUF cannot say otherwise.
      generateModel({ family, shape: 'tiny', out: dir, seed: 11, overrides: family === 'smollm3' ? { no_rope_layers: [1, 1, 1, 0] } : undefined });
      const hf = await models.load(dir);
      const config = hf.model.config;
      const prompt = hf.tokenizer.encode(TEXT).slice(0, 8);
      const expected = await greedy(hf, prompt, 3);
      const scale = maxAbs(expected.logits[0]);
      for (const type of ['f32', 'f16'] as GgufOutType[]) {
        const path = join(dir, `model-${type}.gguf`);
        await writeGgufFromHf(dir, path, type);
        const gguf = await models.load(path);
        const c = gguf.model.config;
        expect(c.ropePairing).toBe(['qwen2', 'qwen3', 'phi3', 'phi4'].includes(family) ? 'halves' : 'adjacent');
        // Everything but RoPE's description (GGUF: adjacent pairs on permuted rows, rope_freqs for
        // Llama 3 scaling), the context cap and the epsilon (an f32 in GGUF) is the same.
        // The family's description is compared apart: its layers' RoPE carries LongRoPE's attention
        // factor, an f32 in GGUF.
        const skip = { ropePairing: undefined, ropeScaling: undefined, ropeFreqFactors: undefined, contextLength: undefined, rmsNormEps: undefined, family: undefined };
        expect({ ...familyOf(c), layers: undefined }).toEqual({ ...familyOf(config), layers: undefined });
        // Layer by layer: rotated dims, base, and (but for Mistral, below) the window.
        // llama.cpp runs Mistral (converted as llama) and phi3 files without a window.
        const windowless = family === 'mistral' || family === 'phi3' || family === 'phi4';
        const layerKey = (l: ReturnType<typeof modelLayers>[number]) => [l.rope?.rotaryDims, l.rope?.theta, windowless ? 0 : l.slidingWindow];
        expect(modelLayers(c).map(layerKey)).toEqual(modelLayers(config).map(layerKey));
        if (config.ropeScaling?.type === 'longrope') {
          // GGUF holds LongRoPE's factors and attention factor as f32.
          const f32 = (xs: number[]) => xs.map(Math.fround);
          expect(c.ropeScaling).toMatchObject({ type: 'longrope', shortFactor: f32(config.ropeScaling.shortFactor), longFactor: f32(config.ropeScaling.longFactor) });
          expect(c.ropeScaling?.type === 'longrope' && c.ropeScaling.attentionFactor).toBe(Math.fround(config.ropeScaling.attentionFactor));
        }
        if (family === 'mistral') {
          // As llama.cpp converts Mistral: architecture llama, no sliding-window key (the tokens
          // compared here, 8 + 3, stay inside the window of 32, where both attend alike).
          expect(config).toMatchObject({ architecture: 'mistral', slidingWindow: 32 });
          expect(c.architecture).toBe('llama');
          expect(c.slidingWindow).toBeUndefined();
          expect(prompt.length + 3).toBeLessThanOrEqual(config.slidingWindow!);
          Object.assign(skip, { architecture: undefined, slidingWindow: undefined });
        }
        if (family === 'phi3' || family === 'phi4') {
          // The tokens compared here, 8 + 3, stay inside Phi-3's window, where both attend alike.
          expect(modelLayers(c).every((l) => l.slidingWindow === undefined)).toBe(true);
          expect(prompt.length + 3).toBeLessThanOrEqual(Math.min(...modelLayers(config).map((l) => l.slidingWindow ?? Infinity)));
          Object.assign(skip, { slidingWindow: undefined });
        }
        expect({ ...c, ...skip }).toEqual({ ...config, ...skip });
        expect(c.rmsNormEps).toBe(Math.fround(config.rmsNormEps));
        if (family === 'llama3') expect(c.ropeFreqFactors?.length).toBe(config.headDim / 2);
        // The GGUF's tokenizer (tokenizer.ggml.*) encodes as the folder's tokenizer.json.
        expect(gguf.tokenizer.encode(TEXT)).toEqual(hf.tokenizer.encode(TEXT));
        expect(gguf.tokenizer.bosId).toBe(hf.tokenizer.bosId);
        expect([...gguf.tokenizer.eosIds].sort()).toEqual([...hf.tokenizer.eosIds].sort());
        const got = await greedy(gguf, prompt, 3);
        expect(got.tokens).toEqual(expected.tokens);
        expect(argmaxRows(got.logits[0], c.vocabSize)).toEqual(argmaxRows(expected.logits[0], config.vocabSize));
        got.logits.forEach((l, i) => expect(maxAbsDiff(l, expected.logits[i])).toBeLessThan(1e-4 * Math.max(1, scale)));
      }
    });
  }
});

describe('quantized GGUFs vs the CPU reference on their dequantized weights', () => {
  // llama2 at dims of 256 (so Q4_K rows are whole super-blocks; tiny dims would all fall back to
  // Q5_0 / F16), qwen2 at its tiny shape (exercising the fallbacks and biases).
  const cases: { family: Family; overrides?: Record<string, unknown>; types: GgufOutType[]; expectTypes: Record<string, string[]> }[] = [
    {
      family: 'llama2',
      overrides: { hidden_size: 256, intermediate_size: 256, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, vocab_size: 512 },
      types: ['q8_0', 'q4_0', 'q4_k', 'q4_k_m'],
      expectTypes: { q8_0: ['Q8_0', 'F32'], q4_0: ['Q4_0', 'F32'], q4_k: ['Q4_K', 'F32'], q4_k_m: ['Q4_K', 'Q6_K', 'F32'] },
    },
    {
      family: 'qwen2',
      types: ['q8_0', 'q4_k'],
      expectTypes: { q8_0: ['Q8_0', 'F16', 'F32'], q4_k: ['Q5_0', 'F16', 'F32'] }, // ffn_down rows of 72: F16
    },
    // The families of issue 30: q/k norms (F32 vectors), fused attn_qkv / ffn_up split at load
    // from quantized blocks, partial LongRoPE (its factors F32 tensors), llama.cpp's NoPE layers.
    { family: 'qwen3', types: ['q8_0'], expectTypes: { q8_0: ['Q8_0', 'F16', 'F32'] } }, // ffn_down rows of 48: F16
    { family: 'phi3', types: ['q4_0'], expectTypes: { q4_0: ['Q4_0', 'F16', 'F32'] } }, // ffn_down rows of 40: F16
    { family: 'phi4', types: ['q8_0'], expectTypes: { q8_0: ['Q8_0', 'F16', 'F32'] } },
    { family: 'smollm3', overrides: { no_rope_layers: [1, 1, 1, 0] }, types: ['q8_0'], expectTypes: { q8_0: ['Q8_0', 'F16', 'F32'] } },
  ];
  for (const { family, overrides, types, expectTypes } of cases) {
    it(`${family}: ${types.join(', ')}`, async () => {
      const dir = models.dir(`webgpu-llama-gguf-q-${family}-`);
      generateModel({ family, shape: 'tiny', out: dir, seed: 12, overrides });
      for (const type of types) {
        const path = join(dir, `model-${type}.gguf`);
        await writeGgufFromHf(dir, path, type);
        const generator = await models.load(path);
        const model = generator.model;
        const config = model.config;
        const { weights, types: stored } = await cpuWeightsOfGguf(path, config);
        expect([...stored].sort()).toEqual([...expectTypes[type]].sort());
        const reference = new CpuLlama(config, weights, 32);
        const prompt = Array.from({ length: 9 }, (_, i) => (i * 37 + 5) % config.vocabSize);
        const cache = model.createKvCache(32);
        try {
          const gpu = await model.forward(prompt, 0, cache, { allLogits: true });
          const cpu = reference.forward(prompt, 0);
          const scale = maxAbs(cpu);
          expect(maxAbsDiff(gpu, cpu), `${family} ${type}`).toBeLessThan(2e-4 * Math.max(1, scale));
          const gpuStep = await model.forward([3], prompt.length, cache);
          const cpuStep = reference.forward([3], prompt.length);
          expect(maxAbsDiff(gpuStep, cpuStep), `${family} ${type} decode`).toBeLessThan(2e-4 * Math.max(1, scale));
        } finally {
          cache.destroy();
        }
      }
    });
  }
});
