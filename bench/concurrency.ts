// Many requests at once (continuous batching: src/engine/batch-decode.ts), per host and model,
// each figure a ratio measured side by side in one run (the parts of a run alternate):
//
//   aggregate: tokens/s of --concurrency-streams streams sent together (the sum of their tokens
//              over the time from the first send to the last token) over one stream alone
//              (its tokens over its time), the same max_tokens, greedy, ignore_eos. Aim: >= 4x.
//   ttft:      a newcomer's time to first token (max_tokens 1, to its end) while streams - 1
//              others decode, over the same on an idle engine. Aim: <= 2x.
//   n:         wall time of one request with n: streams over one with n: 1 (seeded sampling,
//              ignore_eos). Aim: <= 2x.
//   replay:    a seeded request alone and beside streams - 1 others gives the same text.
//
// Requests set cache_prompt: false and differ in their prompts, so the prefix cache plays no part.
import type { CompletionRequest } from '../src/index.ts';
import { withTimeout } from './cases.ts';
import type { Host } from './hosts.ts';
import { stat, type Stat } from './measure.ts';
import { statCell, table } from './report.ts';
import type { BenchCase } from './workload.ts';

export interface ConcurrencyOptions {
  /** Streams sent together (and n of the n case). */
  streams: number;
  /** max_tokens of each stream. */
  tokens: number;
  runs: number;
}

export interface ConcurrencyFigures {
  host: string;
  model: string;
  storage: string;
  streams: number;
  tokens: number;
  runs: number;
  single_tokens_per_s: Stat;
  aggregate_tokens_per_s: Stat;
  /** aggregate / single, medians. */
  aggregate_ratio: number;
  idle_ttft_ms: Stat;
  busy_ttft_ms: Stat;
  /** busy / idle, medians. */
  ttft_ratio: number;
  n1_ms: Stat;
  n_ms: Stat;
  /** n: streams over n: 1, medians. */
  n_ratio: number;
  /** Runs whose seeded request under load gave the text it gives alone. */
  replays_exact: number;
  error?: string;
}

const log = (message: string) => process.stderr.write(message + '\n');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function measureConcurrency(host: Host, c: BenchCase, prompt: string, o: ConcurrencyOptions): Promise<ConcurrencyFigures> {
  const label = `${host.name} ${c.model} ${c.storage} concurrency`;
  const base = { model: c.id, temperature: 0, ignore_eos: true, cache_prompt: false, max_tokens: o.tokens } satisfies CompletionRequest;
  // Prompts that differ from the first word on: no shared prefix.
  const promptOf = (i: number) => `${['Once', 'One', 'Then', 'After', 'When', 'Lily', 'Tom', 'The'][i % 8]} ${prompt}`;
  const run = (what: string, body: CompletionRequest) => withTimeout(`${label} ${what}`, host.run(body));
  const figures = { single: [] as number[], aggregate: [] as number[], idle: [] as number[], busy: [] as number[], n1: [] as number[], n: [] as number[] };
  let replays = 0;
  try {
    await host.load({ ...c, contextLength: Math.max(c.contextLength, 4 * o.tokens + 64) });
    await run('warm-up', { ...base, prompt: promptOf(0), max_tokens: 4 });
    await Promise.all(Array.from({ length: o.streams }, (_, i) => run('warm-up', { ...base, prompt: promptOf(i), max_tokens: 4 })));
    for (let r = 0; r < o.runs; r++) {
      const single = await run('single', { ...base, prompt: promptOf(0) });
      figures.single.push(single.completionTokens / (single.totalMs / 1000));

      const start = performance.now();
      const all = await Promise.all(Array.from({ length: o.streams }, (_, i) => run('streams', { ...base, prompt: promptOf(i) })));
      const wall = performance.now() - start;
      figures.aggregate.push(all.reduce((sum, t) => sum + t.completionTokens, 0) / (wall / 1000));

      const idle = await run('idle ttft', { ...base, prompt: promptOf(1), max_tokens: 1 });
      figures.idle.push(idle.totalMs);
      const others = Array.from({ length: o.streams - 1 }, (_, i) => run('busy', { ...base, prompt: promptOf(i + 2), max_tokens: 4 * o.tokens }));
      await sleep(Math.max(50, 3 * idle.totalMs)); // the others are decoding by now
      const busy = await run('busy ttft', { ...base, prompt: promptOf(1), max_tokens: 1 });
      figures.busy.push(busy.totalMs);
      await Promise.all(others);

      const seeded = { ...base, temperature: 1, seed: 1234 + r, prompt: promptOf(3) };
      const n1 = await run('n 1', { ...seeded, n: 1 });
      figures.n1.push(n1.totalMs);
      const n = await run('n', { ...seeded, n: o.streams });
      figures.n.push(n.totalMs);

      const alone = n1.text;
      const loaded = await Promise.all([run('replay', { ...seeded, n: 1 }), ...Array.from({ length: o.streams - 1 }, (_, i) => run('load', { ...base, prompt: promptOf(i + 4) }))]);
      if (loaded[0]!.text === alone) replays++;
      log(`${label}: run ${r + 1}/${o.runs}: aggregate ${(figures.aggregate.at(-1)! / figures.single.at(-1)!).toFixed(2)}x, ttft ${(figures.busy.at(-1)! / figures.idle.at(-1)!).toFixed(2)}x, n ${(figures.n.at(-1)! / figures.n1.at(-1)!).toFixed(2)}x`);
    }
  } catch (error) {
    log(`${label}: ERROR ${(error as Error).stack ?? error}`);
    return { ...summary(), error: String((error as Error).message ?? error) };
  }
  return summary();

  function summary(): ConcurrencyFigures {
    const s = {
      single: stat(figures.single),
      aggregate: stat(figures.aggregate),
      idle: stat(figures.idle),
      busy: stat(figures.busy),
      n1: stat(figures.n1),
      n: stat(figures.n),
    };
    const ratio = (a: Stat, b: Stat) => Math.round((a.median / b.median) * 100) / 100;
    return {
      host: host.name,
      model: c.model,
      storage: c.storage,
      streams: o.streams,
      tokens: o.tokens,
      runs: o.runs,
      single_tokens_per_s: s.single,
      aggregate_tokens_per_s: s.aggregate,
      aggregate_ratio: ratio(s.aggregate, s.single),
      idle_ttft_ms: s.idle,
      busy_ttft_ms: s.busy,
      ttft_ratio: ratio(s.busy, s.idle),
      n1_ms: s.n1,
      n_ms: s.n,
      n_ratio: ratio(s.n, s.n1),
      replays_exact: replays,
    };
  }
}

export function concurrencyTable(rows: ConcurrencyFigures[]): string {
  return table(
    ['host', 'model', 'storage', '1 stream tok/s', 'N streams tok/s', 'ratio', 'idle TTFT ms', 'busy TTFT ms', 'ratio', 'n:1 ms', 'n:N ms', 'ratio', 'replays'],
    rows.map((f) => [
      f.host,
      f.model,
      f.storage,
      statCell(f.single_tokens_per_s, 1),
      statCell(f.aggregate_tokens_per_s, 1),
      `${f.aggregate_ratio}x`,
      statCell(f.idle_ttft_ms),
      statCell(f.busy_ttft_ms),
      `${f.ttft_ratio}x`,
      statCell(f.n1_ms),
      statCell(f.n_ms),
      `${f.n_ratio}x`,
      f.error ? `ERROR ${f.error.slice(0, 60)}` : `${f.replays_exact}/${f.runs}`,
    ]),
  );
}
