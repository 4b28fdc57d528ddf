// Writes random-weight models in Hugging Face layout (see scripts/model-families.ts):
//
//   node bin/run-ts.mjs scripts/generate-models.ts --family llama3 --shape tiny --out /tmp/llama3-tiny
//   node bin/run-ts.mjs scripts/generate-models.ts --family all --shape real --out /tmp/models
//
// --family: llama2 | llama3 | smollm2 | mistral | qwen2 | all (with all, one sub-folder per family)
// --shape: tiny (test shapes) | real (TinyLlama-1.1B, Llama-3.2-1B, SmolLM2-135M, Mistral-7B-v0.1,
//          Qwen2.5-0.5B; for benchmarks only: write them to a temporary folder or generated-models/
//          (ignored by git), never commit them)
// --dtype: bf16 (default) | f32; --seed N
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { FAMILIES, REAL_CONFIGS, generateModel, type Family, type GeneratedDType, type Shape } from './model-families.ts';

const { values } = parseArgs({
  options: {
    family: { type: 'string' },
    shape: { type: 'string', default: 'tiny' },
    out: { type: 'string' },
    dtype: { type: 'string', default: 'bf16' },
    seed: { type: 'string', default: '1' },
  },
});

function usage(message: string): never {
  console.error(`${message}\nusage: generate-models.ts --family ${FAMILIES.join('|')}|all --shape tiny|real --out DIR [--dtype bf16|f32] [--seed N]`);
  process.exit(2);
}

const family = values.family;
const shape = values.shape as Shape;
const dtype = values.dtype as GeneratedDType;
if (!family || (family !== 'all' && !FAMILIES.includes(family as Family))) usage(`--family must be one of ${FAMILIES.join(', ')}, all`);
if (shape !== 'tiny' && shape !== 'real') usage('--shape must be tiny or real');
if (dtype !== 'bf16' && dtype !== 'f32') usage('--dtype must be bf16 or f32');
if (!values.out) usage('--out is required');
const seed = Number(values.seed);

const families = family === 'all' ? [...FAMILIES] : [family as Family];
for (const f of families) {
  const out = family === 'all' ? join(values.out, `${f}-${shape}`) : values.out;
  const start = performance.now();
  generateModel({ family: f, shape, out, dtype, seed });
  const what = shape === 'real' ? `${REAL_CONFIGS[f].name}-shaped` : 'tiny';
  console.log(`${f}: ${what} random model in ${out} (${((performance.now() - start) / 1000).toFixed(2)} s)`);
}
