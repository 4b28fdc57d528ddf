// `npm run bench -- --real-shapes`: random-weight models at the real shapes of SmolLM2-135M and
// Llama-3.2-1B (scripts/model-families.ts, bf16 Hugging Face folders generated on demand into
// generated-models/, which git ignores; never commit them), loaded in Node with each weight
// storage (f32, f16, q8_0, q4_0: the loader's `weightStorage`), reporting load time, peak memory
// while loading (JS array buffers, JS heap and RSS, sampled on every progress event and every
// 50 ms) and prefill / decode tokens per second.
//
//   npm run bench -- --real-shapes [--models smollm2,llama3] [--storages f32,f16,q8_0,q4_0]
//                    [--prefill-tokens 64] [--decode-tokens 16] [--shape real|tiny]
//
// `--shape tiny` runs the same path on the tiny test shapes (a smoke test of the bench itself).
// Generation takes ~1 min for Llama-3.2-1B (2.5 GB of bf16); on SwiftShader, decoding a 1B model
// takes seconds per token, so keep the token counts small there.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Engine } from '../src/index.ts';
import type { WeightStorage } from '../src/model/weights.ts';
import { generateModel, realConfig, type Family, type Shape } from '../scripts/model-families.ts';
import { timeChunks } from './measure.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const GENERATED_DIR = join(ROOT, 'generated-models');

export interface RealShapeOptions {
  models: Family[];
  storages: WeightStorage[];
  prefillTokens: number;
  decodeTokens: number;
  shape: Shape;
}

export interface RealShapeFigures {
  model: string;
  storage: WeightStorage;
  load_ms: number;
  /** Peaks while loading, MiB above the figure just before the load started. */
  peak_array_buffers_mib: number;
  peak_heap_used_mib: number;
  peak_rss_mib: number;
  /** The file's size, MiB, for scale. */
  file_mib: number;
  prefill_prompt_tokens: number;
  prefill_tokens_per_s: number;
  decode_tokens: number;
  decode_tokens_per_s: number;
}

const MiB = 2 ** 20;
const round = (x: number, digits = 1) => Number(x.toFixed(digits));
const log = (message: string) => process.stderr.write(message + '\n');

/** The generated folder of a family at a shape, written if missing. */
export function ensureGenerated(family: Family, shape: Shape): string {
  const dir = join(GENERATED_DIR, `${family}-${shape}`);
  if (!existsSync(join(dir, 'model.safetensors'))) {
    const start = performance.now();
    log(`generating ${realConfig(family).name}-shaped random model (${shape}) into ${dir} ...`);
    generateModel({ family, shape, out: dir, seed: 1 });
    log(`  done in ${((performance.now() - start) / 1000).toFixed(1)} s`);
  }
  return dir;
}

/** Samples process memory (max over the samples) while `fn` runs; `sample` is also handed to fn. */
async function withMemoryPeaks<T>(fn: (sample: () => void) => Promise<T>): Promise<{ result: T; arrayBuffers: number; heapUsed: number; rss: number }> {
  const base = process.memoryUsage();
  const peak = { arrayBuffers: base.arrayBuffers, heapUsed: base.heapUsed, rss: base.rss };
  const sample = () => {
    const m = process.memoryUsage();
    peak.arrayBuffers = Math.max(peak.arrayBuffers, m.arrayBuffers);
    peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
    peak.rss = Math.max(peak.rss, m.rss);
  };
  const timer = setInterval(sample, 50);
  try {
    const result = await fn(sample);
    sample();
    return { result, arrayBuffers: peak.arrayBuffers - base.arrayBuffers, heapUsed: peak.heapUsed - base.heapUsed, rss: peak.rss - base.rss };
  } finally {
    clearInterval(timer);
  }
}

export async function runRealShapes(options: RealShapeOptions): Promise<RealShapeFigures[]> {
  const { loadModelFromPath } = await import('../src/node/index.ts');
  const { statSync } = await import('node:fs');
  const figures: RealShapeFigures[] = [];
  for (const family of options.models) {
    const dir = ensureGenerated(family, options.shape);
    const fileMib = statSync(join(dir, 'model.safetensors')).size / MiB;
    const name = options.shape === 'real' ? realConfig(family).name : `${family}-tiny`;
    for (const storage of options.storages) {
      (globalThis as { gc?: () => void }).gc?.();
      let engine: Engine | undefined;
      try {
        const start = performance.now();
        const loaded = await withMemoryPeaks((sample) =>
          loadModelFromPath(dir, { id: name, weightStorage: storage, contextLength: options.prefillTokens + options.decodeTokens + 16, onProgress: sample }),
        );
        const loadMs = performance.now() - start;
        engine = loaded.result;
        log(`${name} ${storage}: loaded in ${loadMs.toFixed(0)} ms; peak +${(loaded.arrayBuffers / MiB).toFixed(1)} MiB array buffers`);
        const vocab = (engine.generator as { tokenizer: { encode(t: string): number[] } }).tokenizer;
        // A prompt of about prefillTokens tokens (random models tokenize text normally).
        let prompt = 'Once upon a time';
        while (vocab.encode(prompt + ' there was a tiny model').length <= options.prefillTokens) prompt += ' there was a tiny model';
        const run = (max_tokens: number) => engine!.complete({ model: name, prompt, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true } });
        await timeChunks(performance.now(), await run(2)); // warm-up: pipelines compile on first use
        const t0 = performance.now();
        const prefill = await timeChunks(t0, await run(1));
        const t1 = performance.now();
        const decode = await timeChunks(t1, await run(options.decodeTokens));
        const decoded = decode.completionTokens >= 0 ? decode.completionTokens : decode.textChunks;
        figures.push({
          model: name,
          storage,
          load_ms: round(loadMs),
          peak_array_buffers_mib: round(loaded.arrayBuffers / MiB),
          peak_heap_used_mib: round(loaded.heapUsed / MiB),
          peak_rss_mib: round(loaded.rss / MiB),
          file_mib: round(fileMib),
          prefill_prompt_tokens: prefill.promptTokens,
          prefill_tokens_per_s: round(prefill.promptTokens / (prefill.firstTokenMs / 1000)),
          decode_tokens: decoded,
          decode_tokens_per_s: decoded > 1 ? round((decoded - 1) / ((decode.lastTokenMs - decode.firstTokenMs) / 1000), 2) : 0,
        });
        log(`${name} ${storage}: ${JSON.stringify(figures.at(-1))}`);
      } finally {
        engine?.unload();
      }
    }
  }
  return figures;
}

export function realShapesTable(figures: RealShapeFigures[]): string {
  const header = ['model', 'storage', 'file MiB', 'load ms', 'peak JS buffers MiB', 'peak heap MiB', 'peak RSS MiB', 'prefill tok/s', 'decode tok/s'];
  const rows = figures.map((f) => [
    f.model, f.storage, f.file_mib.toFixed(0), f.load_ms.toFixed(0), `+${f.peak_array_buffers_mib.toFixed(1)}`,
    `+${f.peak_heap_used_mib.toFixed(1)}`, `+${f.peak_rss_mib.toFixed(0)}`,
    `${f.prefill_tokens_per_s.toFixed(1)} (${f.prefill_prompt_tokens} tok)`, `${f.decode_tokens_per_s.toFixed(2)} (${f.decode_tokens} tok)`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}
