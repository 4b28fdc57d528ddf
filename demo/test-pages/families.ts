// Driven by test/browser/families.spec.ts: loads a model onto the page's GPU (SwiftShader when
// there is no GPU) with the KV cache type asked for and f32 weights, runs a fixed token sequence
// through it teacher-forced on every decode path, and returns per position what the spec compares
// with the float64 CPU reference it computes in Node on the same weights:
// - `prefill`: forward() of the first `prefill` tokens in one pass, every position's logits;
// - `forward`: forward() of the rest one token at a time (the general pass at T = 1);
// - `step`: the reusable decode step the device picks (LlamaModel.createDecodeStep: the fused
//   kernels, or on CPU adapters the decode-layer kernel where the model allows it);
// - `stepUnfused`: the decode step recording forward()'s unfused kernels ({ fused: false });
// - through the generator, as the API runs a request: the prompt's logprobs (echo + logprobs) and
//   a greedy continuation with its logprobs (the decode pipeline and the GPU sampler).
// Logits travel back as a summary per position (whole-vocabulary argmax and log-sum-exp, and the
// logits at the ids the spec asks for), so that a 262k vocabulary costs kilobytes, not megabytes.
import { acquireDevice, type GpuContext } from '../../src/gpu/device.ts';
import { filesFromUrl } from '../../src/io/files.ts';
import { loadGenerator } from '../../src/engine/load.ts';
import { familyOf, modelLayers } from '../../src/model/config.ts';
import type { LlamaModel } from '../../src/model/llama.ts';
import { usableVocabSize } from '../../src/engine/types.ts';

export interface FamiliesRun {
  url: string;
  kvCacheDType: 'f32' | 'f16';
  /** Positions the KV cache holds: also what LongRoPE picks its factors by. */
  contextLength: number;
  tokens: number[];
  /** tokens[0, prefill) run in one pass; the rest one at a time. */
  prefill: number;
  /** The logit ids returned per position (null: all). */
  ids: number[] | null;
  /** Greedy tokens decoded after `tokens` through the generator. */
  greedyTokens: number;
}

/** One position's logits, summarized. */
export interface LogitsRow {
  /** The lowest id of the largest logit. */
  argmax: number;
  /** log Σ exp(logit) over the whole vocabulary (float64 sums of f32 logits). */
  lse: number;
  /** The logits at FamiliesRun.ids. */
  values: number[];
}

export interface FamiliesResult {
  /** The config as loaded: what the spec checks the reference's config against. */
  config: {
    architecture: string;
    vocabSize: number;
    /** The ids the generator samples among (usableVocabSize: the tokenizer's, when it has fewer). */
    sampledVocab: number;
    loadedContextLength: number | undefined;
    /** The attention score scale (FamilyDescription.attentionScale, else 1/sqrt(headDim)). */
    attentionScale: number;
    layers: { rope: { theta: number; rotaryDims: number } | null; slidingWindow: number | null }[];
  };
  /** Rows per path, at positions prefill.. (prefill: 0..). */
  paths: { prefill: LogitsRow[]; forward: LogitsRow[]; step: LogitsRow[]; stepUnfused: LogitsRow[] };
  /** Whether the device's decode step was the decode-layer kernel (DecodeStep.consecutive). */
  stepIsDecodeLayer: boolean;
  /** Per prompt token, its logprob given the tokens before it (the first null). */
  promptLogprobs: (number | null)[];
  greedy: { id: number; logprob: number }[];
}

function summarize(logits: Float32Array, vocab: number, ids: number[] | null): LogitsRow {
  let argmax = 0;
  for (let i = 1; i < vocab; i++) if (logits[i] > logits[argmax]) argmax = i;
  const max = logits[argmax];
  let sum = 0;
  for (let i = 0; i < vocab; i++) sum += Math.exp(logits[i] - max);
  return { argmax, lse: max + Math.log(sum), values: ids ? ids.map((id) => logits[id]) : Array.from(logits.subarray(0, vocab)) };
}

/** The decode step's logits at positions prefill.., over a cache the prefill filled. */
async function stepRows(model: LlamaModel, run: FamiliesRun, fused: boolean): Promise<{ rows: LogitsRow[]; consecutive: boolean }> {
  const { device } = model.ctx;
  const vocab = model.config.vocabSize;
  const cache = model.createKvCache(run.contextLength, run.kvCacheDType);
  const staging = device.createBuffer({ size: vocab * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const step = model.createDecodeStep(cache, { fused });
  try {
    await model.forward(run.tokens.slice(0, run.prefill), 0, cache, { readBack: false });
    const rows: LogitsRow[] = [];
    for (let p = run.prefill; p < run.tokens.length; p++) {
      device.queue.writeBuffer(step.tokenIn, 0, new Uint32Array([run.tokens[p]]));
      const encoder = device.createCommandEncoder();
      step.encodeStep(encoder, p);
      encoder.copyBufferToBuffer(step.logits, 0, staging, 0, vocab * 4);
      device.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      rows.push(summarize(new Float32Array(staging.getMappedRange().slice(0)), vocab, run.ids));
      staging.unmap();
    }
    return { rows, consecutive: step.consecutive !== undefined };
  } finally {
    step.destroy();
    staging.destroy();
    cache.destroy();
  }
}

let gpu: Promise<GpuContext> | undefined;

const families = {
  async run(run: FamiliesRun): Promise<FamiliesResult> {
    // One device for every model: its pipelines are compiled once.
    gpu ??= acquireDevice(navigator.gpu);
    const generator = await loadGenerator(await gpu, filesFromUrl(run.url), {
      kvCacheDType: run.kvCacheDType,
      contextLength: run.contextLength,
      weightStorage: 'f32',
      prefixCache: false,
    });
    try {
      const model = generator.model;
      const config = model.config;
      const vocab = config.vocabSize;

      // forward(): the prefill's every position, then one token at a time.
      const cache = model.createKvCache(run.contextLength, run.kvCacheDType);
      const prefill: LogitsRow[] = [];
      const forward: LogitsRow[] = [];
      try {
        const all = await model.forward(run.tokens.slice(0, run.prefill), 0, cache, { allLogits: true });
        for (let t = 0; t < run.prefill; t++) prefill.push(summarize(all.subarray(t * vocab, (t + 1) * vocab), vocab, run.ids));
        for (let p = run.prefill; p < run.tokens.length; p++) forward.push(summarize(await model.forward([run.tokens[p]], p, cache), vocab, run.ids));
      } finally {
        cache.destroy();
      }
      const step = await stepRows(model, run, true);
      const stepUnfused = await stepRows(model, run, false);

      // The generator, as a completions request with echo, logprobs and temperature 0 runs.
      const session = await generator.openSession({ promptTokens: run.tokens, sampling: { temperature: 0, topP: 1 }, logprobs: 0, promptLogprobs: true });
      const greedy: { id: number; logprob: number }[] = [];
      let promptLogprobs: (number | null)[];
      try {
        promptLogprobs = (session.promptLogprobs ?? []).map((t) => (t ? t.logprob : null));
        for await (const t of session.sequence({ index: 0, maxTokens: run.greedyTokens, stopTokenIds: [] })) greedy.push({ id: t.id, logprob: t.logprob });
      } finally {
        session.close();
      }
      return {
        config: {
          architecture: config.architecture,
          vocabSize: vocab,
          sampledVocab: usableVocabSize(generator),
          loadedContextLength: config.loadedContextLength,
          attentionScale: familyOf(config).attentionScale ?? 1 / Math.sqrt(config.headDim),
          layers: modelLayers(config).map((l) => ({
            rope: l.rope && { theta: l.rope.theta, rotaryDims: l.rope.rotaryDims },
            slidingWindow: l.slidingWindow ?? null,
          })),
        },
        paths: { prefill, forward, step: step.rows, stepUnfused: stepUnfused.rows },
        stepIsDecodeLayer: step.consecutive,
        promptLogprobs,
        greedy,
      };
    } finally {
      generator.destroy();
    }
  },
};

declare global {
  interface Window {
    families: typeof families;
  }
}
window.families = families;
document.body.dataset.ready = 'true';
