// Greedy tokens against llama.cpp's on the same GGUF files: test/fixtures/llama-cpp-greedy.json
// holds what llama.cpp (wllama, in Chromium) decoded on tiny sharp random-weight models, written by
// scripts/llama-cpp-reference.ts (docs/testing.md). Each model is generated again here from its
// recorded family, seed, shape and scales (its SHA-256 must be the recorded one: the generators are
// deterministic, and a changed generator means regenerating the fixture), loaded from its GGUF,
// and decoded greedily from the same prompt ids with the same tokens masked.
//
// Near-ties: llama.cpp computes otherwise than we do (it rounds activations to 8 bits for its
// quantized matrix products, q to f16 against its f16 KV cache, and sums in another order), so
// where two tokens' logits are close, either side may pick either one; the sharp models, whose
// attention and logits amplify small differences, make that visible within a few dozen steps on
// the quantized files. At a differing step the CPU reference (test/reference/cpu-llama.ts, on the
// file's weights dequantized, f64 sums) decides over the common prefix: if exact math prefers
// llama.cpp's token to ours by more than ARBITER_TOL, the step fails (our bug); otherwise
// llama.cpp's arithmetic picked otherwise, and the comparison of that prompt ends there (the
// sequences differ from there on), counted as skipped. The test prints how many steps it compared
// and requires most of them.
//
// Then teacher-forced: our prefill over the prompt and llama.cpp's whole sequence gives our best
// token after every prefix of it, so every step is compared, after a divergence too; a step where
// ours differs is judged by exact math the same way.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { ggufNameFromHf } from '../../scripts/gguf-from-hf.ts';
import { FIXTURE, generateReferenceGguf, isGemma, sha256, type ReferenceFixture, type ReferenceModel } from '../../scripts/llama-cpp-models.ts';
import type { LlamaConfig } from '../../src/model/config.ts';
import { configFromHf } from '../../src/model/config-hf.ts';
import { quantizeValues } from '../../src/model/quantize.ts';
import type { QuantDType } from '../../src/gpu/tensor.ts';
import type { GeneratedToken } from '../../src/sampling/types.ts';
import { cpuLlamaWeights, readFolderTensors, tempModels } from '../helpers/temp-models.ts';
import { CpuLlama } from '../reference/cpu-llama.ts';
import { f16BitsToF32, f32ToF16Bits } from '../reference/cpu-ops.ts';
import { dequantize } from '../reference/quant.ts';

const fixture = JSON.parse(readFileSync(FIXTURE, 'utf8')) as ReferenceFixture;
const models = tempModels();

/**
 * The quantized file each family runs besides its f32 one (the fixture holds q8_0 and q4_k of
 * every family; running all of them took minutes). Each block type the fixture's files hold is
 * still run somewhere (checked below): q8_0; q4_k (Llama 3, Mistral), its q5_0 and f16 fallbacks
 * (Llama 3, Qwen3, Phi-4, Gemma 2). Kept on purpose: Qwen3 q4_k (the fewest teacher-forced steps
 * equal), Phi-3 and SmolLM3 q8_0 (the largest gaps llama.cpp's rounding leaves), Gemma 3 q8_0 (its
 * real vocabulary quantized).
 */
const QUANT_RUN: Record<string, string> = {
  llama2: 'q8_0', llama3: 'q4_k', smollm2: 'q8_0', mistral: 'q4_k', qwen2: 'q8_0', qwen3: 'q4_k',
  smollm3: 'q8_0', phi3: 'q8_0', phi4: 'q4_k', gemma2: 'q4_k', gemma3: 'q8_0',
};
const runs = (m: ReferenceModel) => m.type === 'f32' || QUANT_RUN[m.family] === m.type;

/**
 * How far exact math may prefer llama.cpp's token to ours before a differing step is our bug: the
 * GPU path is within ~2e-4 of the largest |logit| of the CPU reference (model/families-storage
 * tests); the sharp models' logits reach about 10, so 0.02 is ten times that.
 */
const ARBITER_TOL = 0.02;

interface Outcome {
  compared: number;
  skipped: number;
  /** The differing step that ended the comparison: step, our logit gap, exact math's gap (ours minus theirs). */
  divergence?: { step: number; ours: number; exact: number };
  mismatch?: string;
}

/** What the file holds for a tensor stored as `storage`, from its f32 values (rows permuted or not: blocks lie within rows). */
function held(values: Float32Array, storage: string): Float32Array {
  if (storage === 'f32') return values;
  if (storage === 'f16') return values.map((v) => f16BitsToF32(f32ToF16Bits(v)));
  return dequantize(storage as QuantDType, quantizeValues(storage as QuantDType, values), values.length);
}

/** Our logit gap between our token and llama.cpp's at a step (Infinity if theirs is not among our top logprobs). */
function gap(ours: GeneratedToken, theirs: number): number {
  const other = ours.topLogprobs?.find((t) => t.id === theirs);
  return other ? ours.logprob - other.logprob : Infinity;
}

/** `exactGap(step)`: exact math's logit of our token minus llama.cpp's after the common prefix. */
function compare(ours: GeneratedToken[], reference: number[], exactGap: (step: number) => number): Outcome {
  const outcome: Outcome = { compared: 0, skipped: 0 };
  for (let i = 0; i < reference.length; i++) {
    if (ours[i]?.id === reference[i]) {
      outcome.compared++;
      continue;
    }
    const g = ours[i] ? gap(ours[i], reference[i]) : Infinity;
    const exact = ours[i] ? exactGap(i) : -Infinity;
    if (exact < -ARBITER_TOL) {
      outcome.mismatch = `step ${i}: ours ${ours[i]?.id}, llama.cpp's ${reference[i]}; exact math prefers llama.cpp's by ${(-exact).toFixed(3)} (our logit gap ${g.toFixed(3)})`;
    } else {
      outcome.divergence = { step: i, ours: g, exact };
      outcome.skipped = reference.length - i;
    }
    return outcome;
  }
  return outcome;
}

interface ModelOutcome {
  compared: number;
  total: number;
  /** Teacher-forced steps whose best token equals llama.cpp's. */
  forcedEqual: number;
  notes: string[];
}

async function checkModel(m: ReferenceModel): Promise<ModelOutcome> {
  const dir = models.dir(`webgpu-llama-llamacpp-${m.family}-${m.type}-`);
  const { path, storage } = await generateReferenceGguf(m, dir);
  expect(sha256(path), `${m.family} ${m.type}: the regenerated GGUF differs from the one llama.cpp ran (regenerate the fixture: docs/testing.md)`).toBe(m.gguf_sha256);
  const generator = await models.load(path, { contextLength: m.context });
  const logitBias = new Map(m.masked_ids.map((id) => [id, -1e9]));
  // The CPU reference on the weights as the file holds them (Hugging Face layout: its own RoPE pairing).
  const hf = configFromHf(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));
  // The window and the loaded context (LongRoPE's factors) as the GGUF was loaded: llama.cpp's
  // Llama has no window where the Hugging Face config of Mistral has one.
  // Gemma 2's attention scale too: a GGUF has no query_pre_attn_scalar (llama.cpp's gemma2 scales
  // by 1/sqrt(head_dim), 27B shapes aside), so the file is that model, not the folder's.
  const loaded = generator.model.config;
  const family = hf.family && loaded.family ? { family: { ...hf.family, attentionScale: loaded.family.attentionScale } } : {};
  const config: LlamaConfig = { ...hf, slidingWindow: loaded.slidingWindow, loadedContextLength: loaded.loadedContextLength, ...family };
  // Built at the first differing step only (most models have few; quantizing again costs seconds).
  const fileTensors = await readFolderTensors(dir);
  let weights: ReturnType<typeof cpuLlamaWeights> | undefined;
  const kvDType = generator.info.storage!.kvCacheDType;
  const exactLogits = (tokens: number[]): Float32Array => {
    weights ??= cpuLlamaWeights(config, new Map([...fileTensors].map(([name, v]) => [name, held(v, storage[ggufNameFromHf(name, isGemma(m.family))])])));
    const logits = new CpuLlama(config, weights, tokens.length, kvDType).forward(tokens, 0);
    return logits.subarray((tokens.length - 1) * config.vocabSize);
  };
  let compared = 0;
  let total = 0;
  let forcedEqual = 0;
  const notes: string[] = [];
  const masked = new Set(m.masked_ids);
  for (const p of m.prompts) {
    const session = await generator.openSession({ promptTokens: p.prompt_ids, sampling: { temperature: 0, topP: 1, logitBias }, logprobs: 20, cachePrompt: false });
    const ours: GeneratedToken[] = [];
    try {
      for await (const t of session.sequence({ index: 0, maxTokens: p.greedy_ids.length, stopTokenIds: [] })) ours.push(t);
    } finally {
      session.close();
    }
    const outcome = compare(ours, p.greedy_ids, (step) => {
      const logits = exactLogits([...p.prompt_ids, ...p.greedy_ids.slice(0, step)]);
      return logits[ours[step].id] - logits[p.greedy_ids[step]];
    });
    expect(outcome.mismatch, `${m.family} ${m.type} ${JSON.stringify(p.text)}: ${outcome.mismatch}\n  ours      ${ours.map((t) => t.id).join(' ')}\n  llama.cpp ${p.greedy_ids.join(' ')}`).toBeUndefined();
    compared += outcome.compared;
    total += p.greedy_ids.length;
    const d = outcome.divergence;
    if (d) notes.push(`${JSON.stringify(p.text)}: llama.cpp differs at step ${d.step} (our gap ${d.ours.toFixed(3)}, exact ${d.exact.toFixed(3)}), ${outcome.skipped} steps skipped`);

    // Teacher-forced: our best unmasked token after each prefix of llama.cpp's sequence.
    const all = [...p.prompt_ids, ...p.greedy_ids];
    const forced = await generator.openSession({ promptTokens: all, sampling: { temperature: 0, topP: 1 }, logprobs: 20, promptLogprobs: true, cachePrompt: false });
    const scored = forced.promptLogprobs!;
    forced.close();
    for (let step = 0; step < p.greedy_ids.length; step++) {
      const entry = scored[p.prompt_ids.length + step]!;
      const best = entry.topLogprobs!.find((t) => !masked.has(t.id))!;
      const theirs = p.greedy_ids[step];
      if (best.id === theirs) {
        forcedEqual++;
        continue;
      }
      const logits = exactLogits(all.slice(0, p.prompt_ids.length + step));
      const exact = logits[best.id] - logits[theirs];
      expect(exact, `${m.family} ${m.type} ${JSON.stringify(p.text)} teacher-forced step ${step}: ours ${best.id}, llama.cpp's ${theirs}; exact math prefers llama.cpp's`).toBeGreaterThanOrEqual(-ARBITER_TOL);
    }
  }
  return { compared, total, forcedEqual, notes };
}

describe('greedy tokens equal llama.cpp\'s on the same GGUF', () => {
  it('the fixture covers the families and types it was written for', () => {
    expect(fixture.models.length).toBeGreaterThan(0);
    for (const m of fixture.models) {
      expect(m.error !== undefined || m.prompts.length > 0, `${m.family} ${m.type}`).toBe(true);
      if (m.error) console.log(`${m.family} ${m.type}: llama.cpp refuses the file (${m.error}); not compared`);
    }
  });

  it('the models run cover every family in f32 and every block type the fixture\'s files hold', () => {
    const families = new Set(fixture.models.map((m) => m.family));
    const run = fixture.models.filter((m) => !m.error && runs(m));
    for (const family of families) {
      expect(run.filter((m) => m.family === family).map((m) => m.type).sort(), family).toEqual(['f32', QUANT_RUN[family]].sort());
    }
    const blockTypes = (ms: ReferenceModel[]) => [...new Set(ms.flatMap((m) => Object.values(m.storage)))].sort();
    expect(blockTypes(run)).toEqual(blockTypes(fixture.models.filter((m) => !m.error)));
  });

  const totals = { compared: 0, total: 0, forcedEqual: 0 };
  for (const m of fixture.models.filter((x) => !x.error && runs(x))) {
    it(`${m.family} ${m.type}`, async () => {
      const { compared, total, forcedEqual, notes } = await checkModel(m);
      totals.compared += compared;
      totals.total += total;
      totals.forcedEqual += forcedEqual;
      console.log(`${m.family} ${m.type}: ${compared}/${total} greedy steps compared equal to llama.cpp ${fixture.llama_cpp}, ` +
        `teacher-forced ${forcedEqual}/${total} equal (the others near-ties by exact math)${notes.length ? `; ${notes.join('; ')}` : ''}`);
      // Near-ties are rare: teacher-forced, nearly every step is llama.cpp's token. (Greedy, one
      // early near-tie ends a whole prompt: that count is held over all models below.)
      expect(forcedEqual, `${m.family} ${m.type}: too few teacher-forced steps equal`).toBeGreaterThanOrEqual(0.8 * total);
    });
  }

  it('compares most steps over all models', () => {
    console.log(`all models: ${totals.compared}/${totals.total} greedy steps compared equal to llama.cpp's; teacher-forced ${totals.forcedEqual}/${totals.total} equal`);
    expect(totals.compared).toBeGreaterThanOrEqual((2 / 3) * totals.total);
    expect(totals.forcedEqual).toBeGreaterThanOrEqual(0.95 * totals.total);
  });
});
