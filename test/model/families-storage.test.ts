// Each Llama family x the weight storages (LoadOptions.weightStorage f32 and f16 (the default) on
// every family; one of q8_0 and q4_0 on each, each on half the families): the GPU logits of a
// random-weight model generated in Hugging Face layout (bf16 on disk)
// against the CPU reference on the weights as that storage holds them: the file's values (f32),
// rounded to f16 (f16), or quantized by the project's quantizer and decoded by the independent CPU
// dequantizer (q8_0, q4_0). Matrices whose rows are not whole 32-weight blocks stay f16 under q8_0 / q4_0.
import { beforeAll, describe, expect, it } from 'vitest';
import { requiredTensors, type WeightStorage } from '../../src/model/weights.ts';
import { quantizeValues } from '../../src/model/quantize.ts';
import { FAMILIES, generateModel, type Family } from '../../scripts/model-families.ts';
import { expectForwardMatchesReference, maxAbs, maxAbsDiff } from '../helpers/compare.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { cpuLlamaWeights, readFolderTensors, splitFusedCpu, tempModels } from '../helpers/temp-models.ts';
import { CpuLlama } from '../reference/cpu-llama.ts';
import { f16BitsToF32, f32ToF16Bits } from '../reference/cpu-ops.ts';
import { dequantize } from '../reference/quant.ts';

const models = tempModels();

type Storage = Extract<WeightStorage, 'f32' | 'f16' | 'q8_0' | 'q4_0'>;
/**
 * The quantized storage each family is loaded in besides f32 and f16: q8_0 and q4_0 load by the
 * same code (the project's quantizer, the same fallback rule) and their kernels are checked
 * block type by block type in test/gpu/kernels/, so each runs on half the families: Phi-3's
 * fused projections under one, SmolLM2's widened shape under the other.
 */
const QUANTIZED: Partial<Record<Family, Storage>> = {
  llama2: 'q4_0', llama3: 'q8_0', smollm2: 'q4_0', mistral: 'q8_0', qwen2: 'q4_0', qwen3: 'q8_0',
  smollm3: 'q4_0', phi3: 'q8_0', phi4: 'q4_0', gemma2: 'q8_0',
};
/** Relative to the largest |logit|: what f32 accumulation in another order leaves, far below any storage's rounding. */
const TOL = 2e-4;

/**
 * Tiny shapes as families.test.ts uses them, except SmolLM2's hidden size of 24 (under one block:
 * nothing would be quantized): 96, still 3 query heads over 1 KV head, tied.
 */
const OVERRIDES: Partial<Record<Family, Record<string, unknown>>> = {
  smollm2: { hidden_size: 96, intermediate_size: 64 },
};

/** What the GPU holds for a tensor of `values` stored as `dtype` (as info.storage reports it). */
function held(values: Float32Array, dtype: string): Float32Array {
  if (dtype === 'f32') return values;
  if (dtype === 'f16') return values.map((v) => f16BitsToF32(f32ToF16Bits(v)));
  if (dtype === 'q8_0' || dtype === 'q4_0') return dequantize(dtype, quantizeValues(dtype, values), values.length);
  throw new Error(`unexpected storage ${dtype}`);
}

/** The storage a tensor of `shape` must get under `storage`: vectors f32; quantized matrices need rows of whole blocks, else f16. */
function expectedDType(shape: number[], storage: Storage): string {
  if (shape.length === 1) return 'f32';
  if ((storage === 'q8_0' || storage === 'q4_0') && shape[1] % 32 !== 0) return 'f16';
  return storage;
}

// Gemma 2 too (Gemma 3's 262144-row embedding would make four loads slow: its GGUF Q8_0 test covers quantized Gemma 3 weights).
for (const family of [...FAMILIES, 'gemma2'] as Family[]) {
  describe(`${family}: GPU vs CPU reference per weight storage`, () => {
    let dir: string;
    let fileTensors: Map<string, Float32Array>;
    beforeAll(async () => {
      dir = models.dir(`webgpu-llama-storage-${family}-`);
      generateModel({ family, shape: 'tiny', out: dir, seed: 23, overrides: OVERRIDES[family] });
      fileTensors = await readFolderTensors(dir);
    });

    for (const storage of ['f32', 'f16', QUANTIZED[family]!] as Storage[]) {
      it(storage, async () => {
        // f16 is the default: loaded without the option.
        const generator = await models.load(dir, { weightStorage: storage === 'f16' ? undefined : storage, contextLength: 32 });
        const model = generator.model;
        const config = model.config;
        const info = generator.info.storage!;
        expect(info.weightStorage).toBe(storage);

        // Every tensor in the storage the rule gives; under q8_0 / q4_0 most matrices are quantized.
        for (const { name, shape } of requiredTensors(config)) {
          expect(info.tensors[name]?.dtype, name).toBe(expectedDType(shape, storage));
        }
        if (storage.startsWith('q')) {
          expect(Object.values(info.tensors).filter((t) => t.dtype === storage).length).toBeGreaterThanOrEqual(5 * config.numLayers);
        }
        // Fused projections (Phi-3) as the GPU holds them: split by rows.
        const stored = new Map([...splitFusedCpu(config, fileTensors)].map(([name, values]) => [name, held(values, info.tensors[name].dtype)]));
        const reference = new CpuLlama(config, cpuLlamaWeights(config, stored), 32);

        const rand = mulberry32(17);
        const prompt = [...generator.tokenizer.encode('Once upon a time').slice(0, 4)];
        while (prompt.length < 9) prompt.push(Math.floor(rand() * config.vocabSize));
        if (storage.startsWith('q')) {
          // The tolerance tells the storages apart: logits on the file's own weights are far outside it.
          const exact = new CpuLlama(config, cpuLlamaWeights(config, fileTensors), 32).forward(prompt, 0);
          const onStored = new CpuLlama(config, reference.weights, 32).forward(prompt, 0);
          expect(maxAbsDiff(onStored, exact)).toBeGreaterThan(10 * TOL * Math.max(1, maxAbs(onStored)));
        }
        const cache = model.createKvCache(32);
        try {
          await expectForwardMatchesReference(model, cache, reference, prompt, { decodeSteps: 3, tol: TOL, label: `${family} ${storage}` });
        } finally {
          cache.destroy();
        }
      });
    }
  });
}
