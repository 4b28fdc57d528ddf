// Every model family in Chromium's WebGPU (SwiftShader without a GPU) against the float64 CPU
// reference (test/reference/cpu-llama.ts), teacher-forced. For each family of
// scripts/model-families.ts a tiny sharp random model is generated here (f32 safetensors, and an
// F32 GGUF of it written by scripts/gguf-from-hf.ts: the same values), served by Vite from the
// repo's ignored generated-models/, and run by demo/test-pages/families.ts with f32 and f16 KV
// caches on every decode path: forward() over a prefill, forward() one token at a time, the
// device's decode step (fused kernels, or the decode-layer kernel where the model allows it), the
// unfused decode step, and the generator (prompt logprobs as echo + logprobs asks for them, and a
// greedy continuation through the decode pipeline and the GPU sampler). The reference runs here in
// Node on the weights read back from the folder, with the config as Node reads it (for a GGUF,
// as llama.cpp reads it: asGgufSays), rounding K/V to f16 where the cache does.
//
// The sequence is 40 tokens (34 in the prefill) and 4 greedy ones in a context of 48: past every
// tiny sliding window (Mistral 32, Phi-3 24, Gemma 5 / 6) in the prefill and in the single-token
// steps, and past Phi's original context (16), so LongRoPE runs its long factors.
//
// Tolerance: every logit within 3e-4 x max(1, largest |logit|) of the reference (what f32
// accumulation in another order leaves; the same as test/model/model-families.test.ts), the
// log-sum-exp too, logprobs within twice that, and the GPU's argmax a reference argmax within it.
// That it catches a wrong RoPE, window or norm is checked here on every family: the GPU's logits
// are compared with references whose config is deliberately wrong (RoPE base doubled, the sliding
// window dropped, the norm weight offset flipped: x·w for x·(1 + w) and back, LongRoPE's short
// factors for the long) and must miss each by more than 10 x the tolerance. Run once with the
// reference's RoPE base off by only 1% on every layer, SmolLM3 failed on every path, format and
// cache: logits off by 0.12 to 0.21 against a tolerance of 6.6e-4, greedy logprobs by up to 1.5e-2.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test, type Page } from '@playwright/test';
import { familyOf, modelLayers, type LlamaConfig } from '../../src/model/config.ts';
import { configFromHf } from '../../src/model/config-hf.ts';
import { ALL_FAMILIES, generateModel, type Family } from '../../scripts/model-families.ts';
import { writeGgufFromHf } from '../../scripts/gguf-from-hf.ts';
import { CpuLlama, type CpuLlamaWeights } from '../reference/cpu-llama.ts';
import { cpuLlamaWeights, readFolderTensors } from '../helpers/cpu-weights.ts';
import type { FamiliesResult, FamiliesRun, LogitsRow } from '../../demo/test-pages/families.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const TOKENS = 40;
const PREFILL = 34;
const GREEDY = 4;
const CONTEXT = 48;
/** Relative to max(1, largest |logit|). */
const REL_TOL = 3e-4;
/** Past this vocabulary size the page returns the logits at a sample of ids (argmax and log-sum-exp stay whole-vocabulary). */
const SAMPLED_IDS = 1024;

/** Config keys a family's test model gets here beyond its tiny shape. */
const OVERRIDES: Partial<Record<Family, Record<string, unknown>>> = {
  // llama.cpp's fixed NoPE pattern (every 4th layer), the only one a GGUF can say.
  smollm3: { no_rope_layers: [1, 1, 1, 0] },
};

/** Reference logits of `tokens` teacher-forced, a row per position. */
function referenceRows(config: LlamaConfig, weights: CpuLlamaWeights, tokens: number[], kvDType: 'f32' | 'f16'): { rows: Float32Array[]; ref: CpuLlama } {
  const ref = new CpuLlama(config, weights, CONTEXT, kvDType);
  const all = ref.forward(tokens, 0);
  const V = config.vocabSize;
  return { rows: Array.from({ length: tokens.length }, (_, t) => all.subarray(t * V, (t + 1) * V)), ref };
}

/** log Σ exp over the first n logits. */
function logSumExp(row: Float32Array, n = row.length): number {
  const max = maxOf(row, n);
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(row[i] - max);
  return max + Math.log(sum);
}

function maxOf(row: Float32Array, n = row.length): number {
  let m = -Infinity;
  for (let i = 0; i < n; i++) m = Math.max(m, row[i]);
  return m;
}

function maxAbs(row: Float32Array): number {
  let m = 0;
  for (const v of row) m = Math.max(m, Math.abs(v));
  return m;
}

/** Largest |gpu - reference| over a path's rows at the compared ids (NaN counts as Infinity). */
function pathError(rows: LogitsRow[], want: Float32Array[], from: number, ids: number[]): { err: number; at: number } {
  let err = 0;
  let at = -1;
  rows.forEach((row, i) => {
    const w = want[from + i];
    row.values.forEach((v, k) => {
      const e = Math.abs(v - w[ids[k]]);
      if (!(e <= err)) [err, at] = [Number.isNaN(e) ? Infinity : e, from + i];
    });
  });
  return { err, at };
}

/**
 * The config a GGUF of the folder means, as llama.cpp reads it: its converter writes Mistral as
 * Llama without the sliding window, and GGUF holds no query_pre_attn_scalar, so a Gemma GGUF's
 * attention scale is 1/sqrt(key_length) (the test models' scalars are not their head sizes).
 */
function asGgufSays(config: LlamaConfig, family: Family): LlamaConfig {
  if (family === 'mistral') return { ...config, architecture: 'llama', slidingWindow: undefined };
  if (family === 'gemma2' || family === 'gemma3') return { ...config, family: { ...familyOf(config), attentionScale: Math.fround(1 / Math.sqrt(config.headDim)) } };
  // llama.cpp runs phi3 files without their sliding window.
  if (family === 'phi3' || family === 'phi4') {
    const f = familyOf(config);
    const layers = f.layers?.map(({ slidingWindow: _window, ...layer }) => layer);
    return { ...config, slidingWindow: undefined, family: layers ? { ...f, layers } : f };
  }
  return config;
}

/** The configs a wrong runtime could have run: each must miss the GPU's logits by far. */
function wrongConfigs(config: LlamaConfig): { name: string; config: LlamaConfig }[] {
  const layers = modelLayers(config);
  const withLayers = (map: (l: (typeof layers)[number]) => (typeof layers)[number], extra: Partial<LlamaConfig> = {}): LlamaConfig => ({
    ...config,
    ...extra,
    family: { ...familyOf(config), layers: layers.map(map) },
  });
  const out = [
    { name: 'RoPE base doubled', config: withLayers((l) => ({ ...l, rope: l.rope && { ...l.rope, theta: l.rope.theta * 2 } })) },
    { name: 'norm weight offset flipped', config: { ...config, family: { ...familyOf(config), normWeightOffset: 1 - familyOf(config).normWeightOffset } } },
  ];
  // A window longer than the sequence (Phi-4-mini's 262144) changes nothing here.
  if (layers.some((l) => l.slidingWindow !== undefined && l.slidingWindow < TOKENS)) {
    out.push({ name: 'no sliding window', config: withLayers(({ slidingWindow: _w, ...l }) => l, { slidingWindow: undefined }) });
  }
  if (config.ropeScaling?.type === 'longrope') {
    out.push({ name: 'LongRoPE short factors', config: { ...config, loadedContextLength: config.ropeScaling.originalContextLength } });
  }
  return out;
}

test.describe.serial('every family in the page against the float64 CPU reference', () => {
  let page: Page;
  let modelsDir: string;
  const pageErrors: string[] = [];

  test.beforeAll(async ({ browser }) => {
    mkdirSync(join(ROOT, 'generated-models'), { recursive: true });
    modelsDir = mkdtempSync(join(ROOT, 'generated-models', 'families-'));
    page = await browser.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto('/test-pages/families.html');
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
  });
  test.afterAll(async () => {
    await page?.close();
    if (modelsDir) rmSync(modelsDir, { recursive: true, force: true });
  });
  test.afterEach(() => {
    expect(pageErrors.splice(0)).toEqual([]);
  });

  for (const family of ALL_FAMILIES) {
    test(`${family}: HF and GGUF, f32 and f16 KV caches, every decode path`, async () => {
      const dir = join(modelsDir, family);
      const json = generateModel({ family, shape: 'tiny', out: dir, seed: 41, dtype: 'f32', overrides: OVERRIDES[family] });
      await writeGgufFromHf(dir, join(dir, 'model-f32.gguf'), 'f32');
      const hfConfig = configFromHf(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));
      hfConfig.loadedContextLength = CONTEXT;
      const weights = cpuLlamaWeights(hfConfig, await readFolderTensors(dir));
      const V = hfConfig.vocabSize;
      expect(V).toBe(json.vocab_size);
      const tokens = Array.from({ length: TOKENS }, (_, i) => (i * 97 + 13) % Math.min(V, 5000));
      const ids = V <= SAMPLED_IDS ? null : [...new Set([...Array.from({ length: SAMPLED_IDS }, (_, k) => Math.floor((k * V) / SAMPLED_IDS)), ...tokens])];
      const compared = ids ?? Array.from({ length: V }, (_, i) => i);
      const problems: string[] = [];
      const references = new Map<string, ReturnType<typeof referenceRows>>();

      for (const format of ['hf', 'gguf'] as const) {
        const config = format === 'gguf' ? asGgufSays(hfConfig, family) : hfConfig;
        for (const kvCacheDType of ['f32', 'f16'] as const) {
          const label = `${family} ${format} ${kvCacheDType} KV`;
          const run: FamiliesRun = {
            url: format === 'hf' ? `/@fs${dir}/` : `/@fs${dir}/model-f32.gguf`,
            kvCacheDType, contextLength: CONTEXT, tokens, prefill: PREFILL, ids, greedyTokens: GREEDY,
          };
          const got: FamiliesResult = await page.evaluate((r) => window.families.run(r), run);

          // The page runs the config the reference runs: the same RoPE and window on every layer, the same loaded context.
          const layerKey = (l: ReturnType<typeof modelLayers>[number]) => ({ rope: l.rope && { theta: Math.fround(l.rope.theta), rotaryDims: l.rope.rotaryDims }, slidingWindow: l.slidingWindow ?? null });
          expect(got.config.layers.map((l) => ({ ...l, rope: l.rope && { ...l.rope, theta: Math.fround(l.rope.theta) } })), label).toEqual(modelLayers(config).map(layerKey));
          const f = familyOf(config);
          expect(got.config.attentionScale, label).toBeCloseTo(f.attentionScale ?? 1 / Math.sqrt(config.headDim), 7);
          expect(got.config.loadedContextLength, label).toBe(CONTEXT);
          expect(got.config.vocabSize, label).toBe(V);

          // The reference is the same for both formats but where the GGUF's config differs.
          const refKey = `${config === hfConfig ? 'hf' : format} ${kvCacheDType}`;
          if (!references.has(refKey)) references.set(refKey, referenceRows(config, weights, tokens, kvCacheDType));
          // `ref` holds the K/V of `tokens`: the greedy check below continues it (from position
          // TOKENS on, rewriting what an earlier greedy check wrote there).
          const { rows: want, ref } = references.get(refKey)!;
          const scale = Math.max(1, ...want.map(maxAbs));
          const tol = REL_TOL * scale;

          const check = (path: string, rows: LogitsRow[], from: number) => {
            expect(rows.length, `${label} ${path}`).toBe((from === 0 ? PREFILL : TOKENS) - from);
            const { err, at } = pathError(rows, want, from, compared);
            if (!(err <= tol)) problems.push(`${label} ${path}: logits off by ${err.toExponential(2)} at position ${at} (tolerance ${tol.toExponential(2)})`);
            rows.forEach((row, i) => {
              const w = want[from + i];
              const lseErr = Math.abs(row.lse - logSumExp(w));
              if (!(lseErr <= tol)) problems.push(`${label} ${path}: log-sum-exp off by ${lseErr.toExponential(2)} at position ${from + i}`);
              if (!(w[row.argmax] >= maxOf(w) - tol)) problems.push(`${label} ${path}: argmax ${row.argmax} at position ${from + i} is not the reference's (${w[row.argmax]} vs ${maxOf(w)})`);
            });
          };
          check('prefill', got.paths.prefill, 0);
          check('forward', got.paths.forward, PREFILL);
          check(got.stepIsDecodeLayer ? 'decode step (decode-layer kernel)' : 'decode step (fused kernels)', got.paths.step, PREFILL);
          check('unfused decode step', got.paths.stepUnfused, PREFILL);

          // The generator: each prompt token's logprob given those before it. It scores among the
          // ids it samples (usableVocabSize): Qwen3's lm_head rows past its tokenizer's last id
          // (random here, unlike a trained model's) are left out of the normalization.
          const sampled = got.config.sampledVocab;
          expect(got.promptLogprobs.length, label).toBe(TOKENS);
          expect(got.promptLogprobs[0], label).toBeNull();
          for (let p = 1; p < TOKENS; p++) {
            const wantLp = want[p - 1][tokens[p]] - logSumExp(want[p - 1], sampled);
            const e = Math.abs((got.promptLogprobs[p] ?? NaN) - wantLp);
            if (!(e <= 2 * tol)) problems.push(`${label} prompt logprobs: token ${p} off by ${e.toExponential(2)} (${got.promptLogprobs[p]} vs ${wantLp})`);
          }
          // Greedy tokens: each one the reference's argmax (among the ids the generator samples), its
          // logprob the reference's; the reference then continues on the same token.
          expect(got.greedy.length, label).toBe(GREEDY);
          let row = want[TOKENS - 1];
          for (let k = 0; k < GREEDY; k++) {
            const { id, logprob } = got.greedy[k];
            const best = maxOf(row, sampled);
            if (!(id < sampled && row[id] >= best - tol)) problems.push(`${label} greedy token ${k}: ${id} (logit ${row[id]}) is not the reference's argmax (${best})`);
            const e = Math.abs(logprob - (row[id] - logSumExp(row, sampled)));
            if (!(e <= 2 * tol)) problems.push(`${label} greedy token ${k}: logprob off by ${e.toExponential(2)}`);
            row = ref.forward([id], TOKENS + k);
          }

          // The tolerance tells a wrong config apart (on the HF model with the f32 cache: the same
          // math as the other runs).
          if (format === 'hf' && kvCacheDType === 'f32') {
            const gpuRows = [...got.paths.prefill, ...got.paths.forward];
            for (const wrong of wrongConfigs(config)) {
              const { rows: other } = referenceRows(wrong.config, weights, tokens, kvCacheDType);
              const { err } = pathError(gpuRows, other, 0, compared);
              if (!(err > 10 * tol)) problems.push(`${label}: a reference with ${wrong.name} is within ${err.toExponential(2)} of the GPU (tolerance ${tol.toExponential(2)})`);
            }
          }
        }
      }
      expect(problems).toEqual([]);
    });
  }
});
