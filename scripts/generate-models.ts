// Writes random-weight models in Hugging Face layout (see scripts/model-families.ts):
//
//   node bin/run-ts.mjs scripts/generate-models.ts --family llama3 --shape tiny --out /tmp/llama3-tiny
//   node bin/run-ts.mjs scripts/generate-models.ts --family all --shape real --out /tmp/models
//
// --family: llama2 | llama3 | smollm2 | mistral | qwen2 | qwen3 | smollm3 | phi3 | phi4 | all (with all, one sub-folder per family)
// --shape: tiny (test shapes) | real (TinyLlama-1.1B, Llama-3.2-1B, SmolLM2-135M, Mistral-7B-v0.1,
//          Qwen2.5-0.5B; for benchmarks only: write them to a temporary folder or generated-models/
//          (ignored by git), never commit them)
// --dtype: bf16 (default) | f32; --seed N
// --gguf TYPE[,TYPE...]: also write model-TYPE.gguf in the folder, TYPE one of f32, f16, q8_0, q4_0,
//          q4_k, q6_k, q4_k_m (see scripts/gguf-from-hf.ts: llama.cpp's layout, Q/K permutation,
//          tokenizer.ggml.* keys, and the fallbacks for rows that are not whole blocks)
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { GGUF_OUT_TYPES, writeGgufFromHf, type GgufOutType } from './gguf-from-hf.ts';
import { ALL_FAMILIES, realConfig, generateModel, type Family, type GeneratedDType, type Shape } from './model-families.ts';

const { values } = parseArgs({
  options: {
    family: { type: 'string' },
    shape: { type: 'string', default: 'tiny' },
    out: { type: 'string' },
    dtype: { type: 'string', default: 'bf16' },
    seed: { type: 'string', default: '1' },
    gguf: { type: 'string' },
  },
});

function usage(message: string): never {
  console.error(`${message}\nusage: generate-models.ts --family ${ALL_FAMILIES.join('|')}|all --shape tiny|real --out DIR [--dtype bf16|f32] [--seed N] [--gguf f32,f16,q8_0,q4_0,q4_k,q6_k,q4_k_m]`);
  process.exit(2);
}

const family = values.family;
const shape = values.shape as Shape;
const dtype = values.dtype as GeneratedDType;
if (!family || (family !== 'all' && !ALL_FAMILIES.includes(family as Family))) usage(`--family must be one of ${ALL_FAMILIES.join(', ')}, all`);
if (shape !== 'tiny' && shape !== 'real') usage('--shape must be tiny or real');
if (dtype !== 'bf16' && dtype !== 'f32') usage('--dtype must be bf16 or f32');
if (!values.out) usage('--out is required');
const seed = Number(values.seed);
const ggufTypes = (values.gguf ? values.gguf.split(',') : []) as GgufOutType[];
for (const t of ggufTypes) if (!GGUF_OUT_TYPES.includes(t)) usage(`--gguf types are ${GGUF_OUT_TYPES.join(', ')}`);

const families = family === 'all' ? [...ALL_FAMILIES] : [family as Family];
for (const f of families) {
  const out = family === 'all' ? join(values.out, `${f}-${shape}`) : values.out;
  const start = performance.now();
  generateModel({ family: f, shape, out, dtype, seed });
  const what = shape === 'real' ? `${realConfig(f).name}-shaped` : 'tiny';
  console.log(`${f}: ${what} random model in ${out} (${((performance.now() - start) / 1000).toFixed(2)} s)`);
  for (const t of ggufTypes) {
    const ggufStart = performance.now();
    const { path, bytes } = await writeGgufFromHf(out, join(out, `model-${t}.gguf`), t);
    console.log(`  ${path}: ${(bytes / 2 ** 20).toFixed(1)} MiB (${((performance.now() - ggufStart) / 1000).toFixed(2)} s)`);
  }
}
