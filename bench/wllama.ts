// wllama (llama.cpp in WebAssembly, on the CPU) side by side with webgpu-llama, in the same
// headless Chromium and the same run: the same GGUF, prompt, context, greedy decoding of the same
// number of tokens with EOS ignored, timed the same way (demo/bench-wllama.ts).
import type { BrowserSession } from './hosts.ts';
import { pairFigures, type RunPair } from './cases.ts';
import { stat, type RunTiming, type Stat } from './measure.ts';

export interface WllamaFigures {
  threads_requested: number;
  /** What wllama reports after loading (1 unless its multi-thread path is on). */
  threads: number;
  multi_thread: boolean;
  cross_origin_isolated: boolean;
  prompt_tokens: number;
  decode_tokens: number;
  load_ms: Stat;
  ttft_ms: Stat;
  prefill_tokens_per_s: Stat;
  decode_tokens_per_s: Stat;
  /** llama.cpp's own timings (prompt_per_second, predicted_per_second), medians. */
  own_prompt_per_second: number;
  own_predicted_per_second: number;
  error?: string;
}

interface LlamaTimings {
  prompt_per_second?: number;
  predicted_per_second?: number;
}

const log = (message: string) => process.stderr.write(message + '\n');

export interface WllamaCase {
  url: string;
  prompt: string;
  decodeTokens: number;
  contextLength: number;
  runs: number;
  /** Untimed pairs before the timed ones (BenchCase.warmupRuns): V8 tiers wllama's WebAssembly up meanwhile. */
  warmupRuns: number;
}

/**
 * wllama loaded in a page of its own, ready to run pairs of requests timed as ours are: the bench
 * interleaves its pairs with ours (bench/run.ts), so that a machine whose speed drifts during the
 * run (small VMs do, by up to ~1.5x within minutes) moves both sides of each ratio alike.
 */
export interface WllamaContestant {
  threads: number;
  /** One untimed pair (V8 tiers wllama's WebAssembly up over the first few). */
  warmupPair(index: number, of: number): Promise<void>;
  /** One timed pair, kept for figures(). */
  timedPair(index: number, of: number): Promise<void>;
  figures(): WllamaFigures;
  close(): Promise<void>;
}

/** Opens wllama's bench page, loads the model `c.runs` times (timed) and runs one short warm-up. */
export async function openWllama(session: BrowserSession, c: WllamaCase, threads: number): Promise<WllamaContestant> {
  const page = await session.open('/bench-wllama.html', 'wllamaBench');
  const call = <T>(fn: string, arg: unknown): Promise<T> =>
    page.evaluate(([f, a]) => (window as any).wllamaBench[f as string](a) as Promise<T>, [fn, arg] as const);
  const loads: number[] = [];
  let loaded = { threads: 0, multiThread: false, crossOriginIsolated: false };
  try {
    for (let i = 0; i < c.runs; i++) {
      const l = await call<{ loadMs: number; threads: number; multiThread: boolean; crossOriginIsolated: boolean }>('load', {
        url: c.url,
        threads,
        contextLength: c.contextLength,
      });
      loads.push(l.loadMs);
      loaded = l;
      log(`wllama ${threads}t: load ${i + 1}/${c.runs}: ${l.loadMs.toFixed(0)} ms (threads ${l.threads}, multi-thread ${l.multiThread}, isolated ${l.crossOriginIsolated})`);
    }
    await call('run', { prompt: c.prompt, maxTokens: Math.min(8, c.decodeTokens) }); // warm-up
  } catch (error) {
    await page.close();
    throw error;
  }
  type Timed = RunTiming & { timings?: LlamaTimings };
  // Timed as ours (bench/cases.ts): a max_tokens 1 request, then the full one.
  const runPair = async (): Promise<RunPair<Timed>> => ({
    prefill: await call<Timed>('run', { prompt: c.prompt, maxTokens: 1 }),
    full: await call<Timed>('run', { prompt: c.prompt, maxTokens: c.decodeTokens }),
  });
  const pairs: RunPair<Timed>[] = [];
  return {
    threads,
    async warmupPair(index, of) {
      const f = pairFigures(await runPair());
      log(`wllama ${threads}t: warm-up run ${index + 1}/${of} (untimed): TTFT ${f.ttftMs.toFixed(1)} ms, ${f.decodeTps.toFixed(1)} tok/s`);
    },
    async timedPair(index, of) {
      const pair = await runPair();
      pairs.push(pair);
      const f = pairFigures(pair);
      const own = pair.full.timings;
      log(`wllama ${threads}t: run ${index + 1}/${of}: ${pair.prefill.promptTokens} prompt tokens, TTFT ${f.ttftMs.toFixed(1)} ms, ` +
        `${f.decoded} tokens at ${f.decodeTps.toFixed(1)} tok/s (its own: ${own?.prompt_per_second?.toFixed(0)} / ${own?.predicted_per_second?.toFixed(0)} tok/s)`);
    },
    figures() {
      if (pairs.length === 0) throw new Error(`wllama ${threads}t: no timed runs`);
      const figures = pairs.map(pairFigures);
      return {
        threads_requested: threads,
        threads: loaded.threads,
        multi_thread: loaded.multiThread,
        cross_origin_isolated: loaded.crossOriginIsolated,
        prompt_tokens: pairs[0].prefill.promptTokens,
        decode_tokens: figures[0].decoded,
        load_ms: stat(loads),
        ttft_ms: stat(figures.map((f) => f.ttftMs)),
        prefill_tokens_per_s: stat(figures.map((f) => f.prefillTps)),
        decode_tokens_per_s: stat(figures.map((f) => f.decodeTps)),
        own_prompt_per_second: stat(pairs.map((p) => p.full.timings?.prompt_per_second ?? NaN)).median,
        own_predicted_per_second: stat(pairs.map((p) => p.full.timings?.predicted_per_second ?? NaN)).median,
      };
    },
    async close() {
      await call('unload', undefined).catch(() => {});
      await page.close();
    },
  };
}
