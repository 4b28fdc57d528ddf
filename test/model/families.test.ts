// Every Llama family the runtime supports, on random-weight models that scripts/generate-models.ts
// writes in Hugging Face layout: each family's config and tokenizer as loaded (its GPU logits per
// weight storage are in families-storage.test.ts); Mistral's sliding window on the GPU against
// the CPU reference on the same weights read back from the file; the RoPE frequency tables of Llama 3.1-style scaling against hand-computed values; and the
// config.json of each family's published model parsed into the expected LlamaConfig.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LLAMA_FAMILY, modelLayers, type LlamaConfig } from '../../src/model/config.ts';
import { configFromGguf } from '../../src/model/config-gguf.ts';
import { configFromHf } from '../../src/model/config-hf.ts';
import { filesFromMemory } from '../../src/io/files.ts';
import { readSafetensorsCheckpoint } from '../../src/io/formats/safetensors.ts';
import { LlamaModel, ropeInverseFrequencies } from '../../src/model/llama.ts';
import { openModel, uploadLlamaWeights } from '../../src/engine/open-model.ts';
import { filesFromPath } from '../../src/node/index.ts';
import { byteLevelTokenizer, FAMILIES, grownSentencePieceTokenizer, generateModel, REAL_CONFIGS, type LlamaFamily } from '../../scripts/model-families.ts';
import { testGpu } from '../helpers/gpu.ts';
import { buildGguf, tinyLlamaGgufKvs, type GgufKv, type GgufTensorSpec } from '../helpers/model-files.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { tinyConfig } from '../helpers/random-model.ts';
import { STORIES_HF } from '../helpers/model-files.ts';
import { cpuLlamaWeights, readFolderTensors, tempModels } from '../helpers/temp-models.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { expectForwardMatchesReference, maxAbsDiff } from '../helpers/compare.ts';

const models = tempModels();

/** The weights of a generated folder as CPU arrays, read back through the project's safetensors reader. */
async function cpuWeightsOf(dir: string, config: LlamaConfig): Promise<CpuLlamaWeights> {
  return cpuLlamaWeights(config, await readFolderTensors(dir));
}

/** What each tiny family must have come out as, beyond the shared checks. */
const TINY_EXPECTED: Record<LlamaFamily, Partial<LlamaConfig>> = {
  llama2: { architecture: 'llama', numHeads: 4, numKvHeads: 2, headDim: 8, tieWordEmbeddings: false, attentionBias: false, ropeTheta: 10000 },
  llama3: {
    architecture: 'llama', headDim: 16, tieWordEmbeddings: true, ropeTheta: 500000,
    ropeScaling: { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 },
  },
  smollm2: { architecture: 'llama', numHeads: 3, numKvHeads: 1, headDim: 8, tieWordEmbeddings: true, ropeTheta: 100000 },
  mistral: { architecture: 'mistral', slidingWindow: 32, contextLength: 256, tieWordEmbeddings: false },
  qwen2: { architecture: 'qwen2', attentionBias: true, tieWordEmbeddings: true, ropeTheta: 1e6, rmsNormEps: 1e-6 },
  qwen3: { architecture: 'qwen3', headDim: 16, attentionBias: false, tieWordEmbeddings: true, ropeTheta: 4321, vocabSize: 151936, family: { ...LLAMA_FAMILY, qkNorm: true } },
  smollm3: { architecture: 'smollm3', numLayers: 4, ropeTheta: 777, tieWordEmbeddings: true },
  phi3: { architecture: 'phi3', numKvHeads: 4, slidingWindow: 24, contextLength: 64, ropeTheta: 500, tieWordEmbeddings: false },
  phi4: { architecture: 'phi3', headDim: 16, numKvHeads: 2, contextLength: 96, ropeTheta: 2500, tieWordEmbeddings: true },
};

/** The families whose tiny configs keep a sliding window. */
const WINDOWED: readonly LlamaFamily[] = ['mistral', 'phi3', 'phi4'];

describe('random-weight models of each family, as generated', () => {
  // Opened without the GPU; each family's GPU logits per weight storage: families-storage.test.ts.
  for (const family of FAMILIES) {
    it(`${family}: config and tokenizer`, async () => {
      const dir = models.dir(`webgpu-llama-${family}-`);
      const start = performance.now();
      generateModel({ family, shape: 'tiny', out: dir, seed: 5 });
      expect(performance.now() - start).toBeLessThan(1000);

      const { config, tokenizer } = await openModel(filesFromPath(dir));
      expect(config).toMatchObject(TINY_EXPECTED[family]);
      if (!WINDOWED.includes(family)) expect(config.slidingWindow).toBeUndefined();
      if (family === 'llama3') {
        // BOS first; both <|end_of_text|> and <|eot_id|> end a generation.
        // The specials close the vocabulary: <|begin_of_text|> <|end_of_text|> <|start_header_id|> <|end_header_id|> <|eot_id|>.
        const v = config.vocabSize;
        expect(tokenizer.bosId).toBe(v - 5);
        expect(tokenizer.encode('a')[0]).toBe(v - 5);
        expect([...tokenizer.eosIds].sort((a, b) => a - b)).toEqual([v - 4, v - 1]);
      }
      // The family's tokenizer round-trips text.
      const text = 'Once upon a time, there was a tiny model.';
      const encoded = tokenizer.encode(text);
      expect(tokenizer.decode(encoded, { skipSpecialTokens: true }).trim()).toBe(text);
    });
  }

  it('mistral: past the sliding window, each position attends to the last 32 only (GPU vs CPU reference)', async () => {
    const dir = models.dir('webgpu-llama-mistral-window-');
    generateModel({ family: 'mistral', shape: 'tiny', out: dir, seed: 6 });
    const model = (await models.load(dir)).model;
    const config = model.config;
    expect(config.slidingWindow).toBe(32);
    const cpu = await cpuWeightsOf(dir, config);
    // A 40-token prefill crosses the window; decode steps continue past it.
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 53 + 11) % config.vocabSize);
    // The window changes the result: full attention gives other logits past position 32 only.
    const windowed = new CpuLlama(config, cpu, 64).forward(prompt, 0);
    const full = new CpuLlama({ ...config, slidingWindow: undefined }, cpu, 64).forward(prompt, 0);
    expect(maxAbsDiff(full.subarray(0, 32 * config.vocabSize), windowed.subarray(0, 32 * config.vocabSize))).toBeLessThan(1e-5);
    expect(maxAbsDiff(full, windowed)).toBeGreaterThan(1e-3);
    const cache = model.createKvCache(64);
    try {
      await expectForwardMatchesReference(model, cache, new CpuLlama(config, cpu, 64), prompt, { decodeSteps: 3 });
    } finally {
      cache.destroy();
    }
  });

  it('f32 checkpoints load too, and the same seed writes the same weights', async () => {
    const a = models.dir('webgpu-llama-f32-');
    const b = models.dir('webgpu-llama-f32-');
    generateModel({ family: 'qwen2', shape: 'tiny', out: a, dtype: 'f32', seed: 9 });
    generateModel({ family: 'qwen2', shape: 'tiny', out: b, dtype: 'f32', seed: 9 });
    expect(Buffer.compare(readFileSync(join(a, 'model.safetensors')), readFileSync(join(b, 'model.safetensors')))).toBe(0);
    const infos = await readSafetensorsCheckpoint(filesFromPath(a));
    expect(new Set(infos.map((t) => t.dtype))).toEqual(new Set(['F32']));
    expect(infos.some((t) => t.name === 'lm_head.weight')).toBe(false);
  });
});

describe('generated tokenizers', () => {
  it('SentencePiece-style (Llama 2, Mistral) grows to the vocabulary size and still round-trips text', async () => {
    const { HfTokenizer } = await import('../../src/tokenizer/hf-tokenizer.ts');
    const stories = JSON.parse(readFileSync(join(STORIES_HF, 'tokenizer.json'), 'utf8'));
    const grown = grownSentencePieceTokenizer(stories, 4000) as { model: { vocab: Record<string, number> } };
    const ids = Object.values(grown.model.vocab).sort((x, y) => x - y);
    expect(ids.length).toBe(4000);
    expect(ids.every((id, i) => id === i)).toBe(true);
    const tokenizer = new HfTokenizer({ tokenizerJson: grown as never, tokenizerConfig: JSON.parse(readFileSync(join(STORIES_HF, 'tokenizer_config.json'), 'utf8')) });
    expect(tokenizer.vocabSize).toBe(4000);
    const text = 'Once upon a time, there was a little girl named Lily.';
    const encoded = tokenizer.encode(text);
    expect(encoded[0]).toBe(1);
    expect(tokenizer.decode(encoded, { skipSpecialTokens: true })).toBe(text);
    // The first generated piece, ▁t + nd, is what 'tnd' now encodes to.
    expect(grown.model.vocab['▁tnd']).toBe(512);
    expect(tokenizer.encode('tnd')).toEqual([1, 512]);
    expect(tokenizer.decode(tokenizer.encode('tnd ted'), { skipSpecialTokens: true })).toBe('tnd ted');
  });


  it('have exactly the vocabulary size asked for, with valid merges, past 65536 tokens', () => {
    const json = byteLevelTokenizer(70_000, ['<|endoftext|>', '<|im_start|>']) as {
      model: { vocab: Record<string, number>; merges: [string, string][] };
      added_tokens: { id: number; content: string }[];
    };
    const ids = Object.values(json.model.vocab).sort((x, y) => x - y);
    expect(ids.length).toBe(70_000);
    expect(ids.every((id, i) => id === i)).toBe(true);
    expect(json.model.merges.length).toBe(70_000 - 256 - 2);
    for (const [a, b] of json.model.merges.slice(-100)) {
      expect(json.model.vocab[a]).toBeDefined();
      expect(json.model.vocab[b]).toBeDefined();
      expect(json.model.vocab[a + b]).toBeDefined();
    }
    expect(json.added_tokens.map((t) => t.id)).toEqual([69_998, 69_999]);
  });
});

describe('RoPE frequency scaling', () => {
  // head_dim 8, theta 10000: base inverse frequencies 1, 0.1, 0.01, 0.001 (wavelengths 2π × 1, 10, 100, 1000).
  const base = tinyConfig({ headDim: 8, ropeTheta: 10000 });
  const close = (actual: Float32Array, expected: number[]) => {
    expect(actual.length).toBe(expected.length);
    expected.forEach((v, i) => expect(Math.abs(actual[i] - v) / v, `index ${i}`).toBeLessThan(1e-6));
  };

  it('none: theta^(-2i/d)', () => {
    close(ropeInverseFrequencies(base), [1, 0.1, 0.01, 0.001]);
  });

  it('llama3: high frequencies kept, low ones divided by the factor, a smooth ramp between', () => {
    // factor 8, low_freq_factor 1, high_freq_factor 4, original context 1024:
    // wavelengths above 1024 are divided, below 256 kept. 2π·10 = 62.8 -> kept; 2π·1000 = 6283 -> /8;
    // 2π·100 = 628.3 lies between: s = (1024 / 628.3185 - 1) / 3 = 0.2099155, θ = 0.01 · ((1 - s) / 8 + s).
    const config = { ...base, ropeScaling: { type: 'llama3' as const, factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 1024 } };
    const s = (1024 / ((2 * Math.PI) / 0.01) - 1) / 3;
    expect(s).toBeCloseTo(0.2099155, 6);
    close(ropeInverseFrequencies(config), [1, 0.1, 0.0030867610, 0.000125]);
    close(ropeInverseFrequencies(config), [1, 0.1, 0.01 * ((1 - s) / 8 + s), 0.001 / 8]);
  });

  it('llama3 from config.json equals the GGUF rope_freqs.weight llama.cpp writes for it', () => {
    const hf = configFromHf({ ...REAL_CONFIGS.llama3.config });
    const table = ropeInverseFrequencies(hf);
    // llama.cpp's converter: factor 1 (short wavelengths), `factor` (long), 1 / ((1 - s) / factor + s) between.
    const { factor, lowFreqFactor, highFreqFactor, originalContextLength } = hf.ropeScaling as Extract<LlamaConfig['ropeScaling'], { type: 'llama3' }>;
    const unscaled = ropeInverseFrequencies({ ...hf, ropeScaling: undefined });
    const ropeFreqs = Float32Array.from(unscaled, (f) => {
      const wavelen = (2 * Math.PI) / f;
      if (wavelen < originalContextLength / highFreqFactor) return 1;
      if (wavelen > originalContextLength / lowFreqFactor) return factor;
      const s = (originalContextLength / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
      return 1 / ((1 - s) / factor + s);
    });
    const fromGguf = ropeInverseFrequencies({ ...hf, ropeScaling: undefined, ropeFreqFactors: ropeFreqs });
    for (let i = 0; i < table.length; i++) expect(Math.abs(fromGguf[i] - table[i]) / table[i]).toBeLessThan(1e-6);
    // Some frequencies are in each of the three bands.
    expect(ropeFreqs.some((f) => f === 1) && ropeFreqs.some((f) => f === 32) && ropeFreqs.some((f) => f > 1 && f < 32)).toBe(true);
  });

  it('linear: every frequency divided by the factor; rope_freqs divides per frequency', () => {
    close(ropeInverseFrequencies({ ...base, ropeScaling: { type: 'linear', factor: 4 } }), [0.25, 0.025, 0.0025, 0.00025]);
    close(ropeInverseFrequencies({ ...base, ropeFreqFactors: new Float32Array([1, 1, 2, 8]) }), [1, 0.1, 0.005, 0.000125]);
    expect(configFromHf({ ...REAL_CONFIGS.llama2.config, rope_scaling: { type: 'linear', factor: 4 } }).ropeScaling).toEqual({ type: 'linear', factor: 4 });
    const gguf = {
      'general.architecture': 'llama', 'llama.embedding_length': 64, 'llama.block_count': 2, 'llama.feed_forward_length': 128,
      'llama.attention.head_count': 4, 'llama.context_length': 512,
    };
    expect(configFromGguf({ ...gguf, 'llama.rope.scaling.type': 'linear', 'llama.rope.scaling.factor': 2 }, 100).ropeScaling).toEqual({ type: 'linear', factor: 2 });
    expect(configFromGguf({ ...gguf, 'llama.rope.scaling.type': 'none' }, 100).ropeScaling).toBeUndefined();
    // As llama.cpp reads them: no type means linear; files from before rope.scaling.factor carry rope.scale_linear.
    expect(configFromGguf({ ...gguf, 'llama.rope.scaling.factor': 2 }, 100).ropeScaling).toEqual({ type: 'linear', factor: 2 });
    expect(configFromGguf({ ...gguf, 'llama.rope.scale_linear': 4 }, 100).ropeScaling).toEqual({ type: 'linear', factor: 4 });
    expect(configFromGguf({ ...gguf, 'llama.rope.scaling.type': 'linear', 'llama.rope.scaling.factor': 0 }, 100).ropeScaling).toBeUndefined();
    expect(configFromGguf(gguf, 100).ropeScaling).toBeUndefined();
    expect(() => configFromGguf({ ...gguf, 'llama.rope.scaling.factor': -2 }, 100)).toThrow(/scaling.factor/);
  });
});

describe('config.json of each family’s published model', () => {
  // As published on the Hugging Face hub (fields this runtime ignores left in).
  const published: Record<string, Record<string, unknown>> = {
    'SmolLM2-135M': {
      architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 0, eos_token_id: 0,
      hidden_act: 'silu', hidden_size: 576, initializer_range: 0.041666666666666664, intermediate_size: 1536, is_llama_config: true,
      max_position_embeddings: 8192, model_type: 'llama', num_attention_heads: 9, num_hidden_layers: 30, num_key_value_heads: 3,
      pretraining_tp: 1, rms_norm_eps: 1e-5, rope_interleaved: false, rope_scaling: null, rope_theta: 100000,
      tie_word_embeddings: true, torch_dtype: 'bfloat16', transformers_version: '4.42.3', use_cache: true, vocab_size: 49152,
    },
    'Llama-3.2-1B': {
      architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 128000, eos_token_id: 128001,
      head_dim: 64, hidden_act: 'silu', hidden_size: 2048, initializer_range: 0.02, intermediate_size: 8192,
      max_position_embeddings: 131072, mlp_bias: false, model_type: 'llama', num_attention_heads: 32, num_hidden_layers: 16,
      num_key_value_heads: 8, pretraining_tp: 1, rms_norm_eps: 1e-5,
      rope_scaling: { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: 'llama3' },
      rope_theta: 500000.0, tie_word_embeddings: true, torch_dtype: 'bfloat16', transformers_version: '4.45.0.dev0', use_cache: true,
      vocab_size: 128256,
    },
    'TinyLlama-1.1B': {
      architectures: ['LlamaForCausalLM'], attention_bias: false, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu',
      hidden_size: 2048, initializer_range: 0.02, intermediate_size: 5632, max_position_embeddings: 2048, model_type: 'llama',
      num_attention_heads: 32, num_hidden_layers: 22, num_key_value_heads: 4, pretraining_tp: 1, rms_norm_eps: 1e-5,
      rope_scaling: null, rope_theta: 10000.0, tie_word_embeddings: false, torch_dtype: 'bfloat16', transformers_version: '4.35.0',
      use_cache: true, vocab_size: 32000,
    },
    'Qwen2.5-0.5B': {
      architectures: ['Qwen2ForCausalLM'], attention_dropout: 0.0, bos_token_id: 151643, eos_token_id: 151643, hidden_act: 'silu',
      hidden_size: 896, initializer_range: 0.02, intermediate_size: 4864, max_position_embeddings: 32768, max_window_layers: 24,
      model_type: 'qwen2', num_attention_heads: 14, num_hidden_layers: 24, num_key_value_heads: 2, rms_norm_eps: 1e-6,
      rope_theta: 1000000.0, sliding_window: 32768, tie_word_embeddings: true, torch_dtype: 'bfloat16', transformers_version: '4.40.1',
      use_cache: true, use_mrope: false, use_sliding_window: false, vocab_size: 151936,
    },
    'Mistral-7B-v0.1': {
      architectures: ['MistralForCausalLM'], bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu', hidden_size: 4096,
      initializer_range: 0.02, intermediate_size: 14336, max_position_embeddings: 32768, model_type: 'mistral',
      num_attention_heads: 32, num_hidden_layers: 32, num_key_value_heads: 8, rms_norm_eps: 1e-5, rope_theta: 10000.0,
      sliding_window: 4096, tie_word_embeddings: false, torch_dtype: 'bfloat16', transformers_version: '4.34.0.dev0',
      use_cache: true, vocab_size: 32000,
    },
  };
  const expected: Record<string, LlamaConfig> = {
    'SmolLM2-135M': {
      architecture: 'llama', vocabSize: 49152, hiddenSize: 576, intermediateSize: 1536, numLayers: 30, numHeads: 9, numKvHeads: 3,
      headDim: 64, contextLength: 8192, rmsNormEps: 1e-5, ropeTheta: 100000, ropePairing: 'halves', tieWordEmbeddings: true, attentionBias: false,
    },
    'Llama-3.2-1B': {
      architecture: 'llama', vocabSize: 128256, hiddenSize: 2048, intermediateSize: 8192, numLayers: 16, numHeads: 32, numKvHeads: 8,
      headDim: 64, contextLength: 131072, rmsNormEps: 1e-5, ropeTheta: 500000, ropePairing: 'halves', tieWordEmbeddings: true, attentionBias: false,
      ropeScaling: { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 },
    },
    'TinyLlama-1.1B': {
      architecture: 'llama', vocabSize: 32000, hiddenSize: 2048, intermediateSize: 5632, numLayers: 22, numHeads: 32, numKvHeads: 4,
      headDim: 64, contextLength: 2048, rmsNormEps: 1e-5, ropeTheta: 10000, ropePairing: 'halves', tieWordEmbeddings: false, attentionBias: false,
    },
    'Qwen2.5-0.5B': {
      architecture: 'qwen2', vocabSize: 151936, hiddenSize: 896, intermediateSize: 4864, numLayers: 24, numHeads: 14, numKvHeads: 2,
      headDim: 64, contextLength: 32768, rmsNormEps: 1e-6, ropeTheta: 1e6, ropePairing: 'halves', tieWordEmbeddings: true, attentionBias: true,
    },
    'Mistral-7B-v0.1': {
      architecture: 'mistral', vocabSize: 32000, hiddenSize: 4096, intermediateSize: 14336, numLayers: 32, numHeads: 32, numKvHeads: 8,
      headDim: 128, contextLength: 32768, rmsNormEps: 1e-5, ropeTheta: 10000, ropePairing: 'halves', tieWordEmbeddings: false, attentionBias: false,
      slidingWindow: 4096,
    },
  };

  for (const name of Object.keys(published)) {
    it(name, () => {
      expect(configFromHf(published[name])).toEqual(expected[name]);
    });
  }

  it('the generator writes these same configs at the real shapes', () => {
    // The families of issue 30 are checked in model-families.test.ts.
    for (const { name, config } of Object.values(REAL_CONFIGS).filter(({ name }) => name in published)) {
      const { transformers_version: _v, ...rest } = published[name];
      expect(config, name).toEqual(rest);
    }
  });

  it('transformers 5 configs: rope_parameters carries rope_theta and the scaling', () => {
    // As transformers >= 5 saves them: no top-level rope_theta / rope_scaling.
    const { rope_scaling: scaling, rope_theta: theta, ...llama32 } = published['Llama-3.2-1B'];
    const v5 = { ...llama32, rope_parameters: { rope_theta: theta, ...(scaling as object) }, transformers_version: '5.0.0' };
    expect(configFromHf(v5)).toEqual(expected['Llama-3.2-1B']);
    const { rope_theta: qwenTheta, ...qwen } = published['Qwen2.5-0.5B'];
    expect(configFromHf({ ...qwen, rope_parameters: { rope_type: 'default', rope_theta: qwenTheta } })).toEqual(expected['Qwen2.5-0.5B']);
    expect(configFromHf({ ...qwen, rope_parameters: { rope_theta: 12345 } }).ropeTheta).toBe(12345);
    expect(configFromHf({ ...qwen, rope_parameters: { rope_type: 'linear', rope_theta: 1e6, factor: 2 } }).ropeScaling).toEqual({ type: 'linear', factor: 2 });
    expect(() => configFromHf({ ...qwen, rope_parameters: { rope_type: 'yarn', rope_theta: 1e6, factor: 4 } })).toThrow(/yarn.*rope_parameters/);
    expect(() => configFromHf({ ...qwen, rope_parameters: { full_attention: { rope_type: 'default', rope_theta: 1e6 } } })).toThrow(/per layer type/);
    expect(() => configFromHf({ ...qwen, rope_parameters: 'default' })).toThrow(/rope_parameters is not an object/);
  });

  it('sliding windows: Mistral keeps its window; Qwen2 only with use_sliding_window, on the layers from max_window_layers', () => {
    const mistral = published['Mistral-7B-v0.1'];
    expect(configFromHf({ ...mistral, sliding_window: null }).slidingWindow).toBeUndefined();
    // Kept at the context's size too: a cache may be made longer than max_position_embeddings.
    expect(configFromHf({ ...mistral, sliding_window: 32768 }).slidingWindow).toBe(32768);
    expect(configFromHf({ ...mistral, sliding_window: 8192 })).toMatchObject({ slidingWindow: 8192, contextLength: 32768 });
    const qwen = { ...published['Qwen2.5-0.5B'], sliding_window: 4096 };
    expect(configFromHf(qwen).slidingWindow).toBeUndefined();
    expect(configFromHf({ ...qwen, use_sliding_window: true, max_window_layers: 24 }).slidingWindow).toBeUndefined();
    expect(configFromHf({ ...qwen, use_sliding_window: true, max_window_layers: 0 }).slidingWindow).toBe(4096);
    const some = configFromHf({ ...qwen, use_sliding_window: true, max_window_layers: 12 });
    expect(modelLayers(some).map((l) => l.slidingWindow)).toEqual(Array.from({ length: 24 }, (_, l) => (l >= 12 ? 4096 : undefined)));
    // HF's Llama has no sliding window: a Mistral config relabelled as Llama attends to everything.
    expect(configFromHf({ ...mistral, architectures: ['LlamaForCausalLM'], model_type: 'llama' }).slidingWindow).toBeUndefined();
  });

  it('GGUF qwen2 keys map to the same config with halves pairing and biases', () => {
    const metadata = {
      'general.architecture': 'qwen2', 'qwen2.embedding_length': 896, 'qwen2.block_count': 24, 'qwen2.feed_forward_length': 4864,
      'qwen2.attention.head_count': 14, 'qwen2.attention.head_count_kv': 2, 'qwen2.context_length': 32768,
      'qwen2.attention.layer_norm_rms_epsilon': 1e-6, 'qwen2.rope.freq_base': 1000000,
    };
    expect(configFromGguf(metadata, 151936, ['token_embd.weight'])).toEqual(expected['Qwen2.5-0.5B']);
  });
});

/** A tiny f32 Llama GGUF (llama.cpp layout) with an optional rope_freqs.weight, and its weights for CpuLlama. */
function ggufWithRopeFreqs(config: LlamaConfig, ropeFreqs: Float32Array | undefined, seed: number): { file: Uint8Array; cpu: CpuLlamaWeights } {
  const rand = mulberry32(seed);
  const tensors: GgufTensorSpec[] = [];
  const add = (name: string, ne: number[], scale: number, offset: number): Float32Array => {
    const values = Float32Array.from({ length: ne.reduce((a, b) => a * b, 1) }, () => offset + (rand() * 2 - 1) * scale);
    tensors.push({ name, ne, ggmlType: 0, data: new Uint8Array(values.buffer) });
    return values;
  };
  const matrix = (name: string, rows: number, cols: number) => add(name, [cols, rows], 1 / Math.sqrt(cols), 0);
  const vector = (name: string, n: number) => add(name, [n], 0.2, 1);
  const c = config;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const tokenEmbedding = matrix('token_embd.weight', c.vocabSize, c.hiddenSize);
  const layers = Array.from({ length: c.numLayers }, (_, l) => ({
    attnNorm: vector(`blk.${l}.attn_norm.weight`, c.hiddenSize),
    wq: matrix(`blk.${l}.attn_q.weight`, q, c.hiddenSize),
    wk: matrix(`blk.${l}.attn_k.weight`, kv, c.hiddenSize),
    wv: matrix(`blk.${l}.attn_v.weight`, kv, c.hiddenSize),
    wo: matrix(`blk.${l}.attn_output.weight`, c.hiddenSize, q),
    ffnNorm: vector(`blk.${l}.ffn_norm.weight`, c.hiddenSize),
    wGate: matrix(`blk.${l}.ffn_gate.weight`, c.intermediateSize, c.hiddenSize),
    wUp: matrix(`blk.${l}.ffn_up.weight`, c.intermediateSize, c.hiddenSize),
    wDown: matrix(`blk.${l}.ffn_down.weight`, c.hiddenSize, c.intermediateSize),
  }));
  const outputNorm = vector('output_norm.weight', c.hiddenSize);
  const lmHead = matrix('output.weight', c.vocabSize, c.hiddenSize);
  if (ropeFreqs) tensors.push({ name: 'rope_freqs.weight', ne: [ropeFreqs.length], ggmlType: 0, data: new Uint8Array(ropeFreqs.slice().buffer) });
  const kvs = tinyLlamaGgufKvs(c);
  return { file: buildGguf(kvs, tensors), cpu: { tokenEmbedding, layers, outputNorm, lmHead } };
}

it('a part of a split GGUF (llama-gguf-split) is refused, saying so', async () => {
  const config = tinyConfig({ headDim: 8, hiddenSize: 32, numHeads: 4, numKvHeads: 2 });
  const { file } = ggufWithRopeFreqs(config, undefined, 3);
  await expect(openModel(filesFromMemory('whole', { 'm.gguf': file }, 'm.gguf'))).resolves.toBeDefined();
  const kvs: Record<string, GgufKv> = { ...tinyLlamaGgufKvs(config), 'split.no': { type: 'u32', value: 0 }, 'split.count': { type: 'u32', value: 2 } };
  const part = buildGguf(kvs, []);
  await expect(openModel(filesFromMemory('split', { 'm-00001-of-00002.gguf': part }, 'm-00001-of-00002.gguf'))).rejects.toThrow(/split GGUF \(2 files\).*merge/);
});

describe('GGUF rope_freqs.weight (Llama 3.1-style scaling as llama.cpp stores it)', () => {
  const config = tinyConfig({ headDim: 8, hiddenSize: 32, numHeads: 4, numKvHeads: 2, ropeTheta: 500000, ropePairing: 'adjacent', contextLength: 128 });
  const factors = new Float32Array([1, 1, 2.5, 32]);

  it('is read into the config and used by the GPU forward pass, matching the CPU reference', async () => {
    const { file, cpu } = ggufWithRopeFreqs(config, factors, 21);
    const opened = await openModel(filesFromMemory('rf', { 'rf.gguf': file }, 'rf.gguf'));
    expect(Array.from(opened.config.ropeFreqFactors ?? [])).toEqual(Array.from(factors));
    expect(opened.config.ropeScaling).toBeUndefined();
    const table = ropeInverseFrequencies(opened.config);
    const plain = ropeInverseFrequencies({ ...opened.config, ropeFreqFactors: undefined });
    table.forEach((f, i) => expect(Math.abs(f - plain[i] / factors[i]) / f).toBeLessThan(1e-6));

    const ctx = await testGpu();
    const model = await LlamaModel.create(ctx, opened.config, await uploadLlamaWeights(ctx, opened));
    const cache = model.createKvCache(32);
    const reference = new CpuLlama(opened.config, cpu, 32);
    try {
      // Positions far enough along for the low frequencies to matter.
      const prompt = Array.from({ length: 20 }, (_, i) => (i * 37 + 5) % config.vocabSize);
      const gpuAll = await model.forward(prompt, 0, cache, { allLogits: true });
      const cpuAll = reference.forward(prompt, 0);
      const scale = Math.max(...cpuAll.map(Math.abs));
      expect(maxAbsDiff(gpuAll, cpuAll)).toBeLessThan(2e-4 * Math.max(1, scale));
      const unscaled = new CpuLlama({ ...opened.config, ropeFreqFactors: undefined }, cpu, 32).forward(prompt, 0);
      expect(maxAbsDiff(unscaled, cpuAll)).toBeGreaterThan(1e-3);
    } finally {
      cache.destroy();
      model.destroy();
    }
  });

  it('a rope_freqs.weight of the wrong length is an error naming it', async () => {
    const { file } = ggufWithRopeFreqs(config, new Float32Array([1, 2, 3]), 22);
    await expect(openModel(filesFromMemory('rf', { 'rf.gguf': file }, 'rf.gguf'))).rejects.toThrow(/rope_freqs\.weight/);
  });
});
