// One bench case (a model in one storage, on one host): loads, a warm-up, timed runs, and the
// device's counters per decode token.
//
// Each timed run is a pair of requests on the same prompt, greedy, EOS ignored: A with
// max_tokens 1, B with max_tokens N. TTFT is A's time to its end (the first token, sampled and
// returned); prefill tokens/s is prompt tokens / TTFT; decode tokens/s is (N - 1) / (B - A). The
// difference does not depend on how the host groups tokens into chunks (a runtime that returns
// several steps at once, or a tokenizer that holds back incomplete text, as random-weight models'
// tokens often are) and leaves out the prefill. Counters per decode token are (B's - A's) / (N - 1)
// for the same reason. wllama is timed the same way (bench/wllama.ts).
import { COUNTER_NAMES, counterDelta, type GpuCounters } from '../src/gpu/counters.ts';
import type { CountedRun, Host, HostName } from './hosts.ts';
import { decodedTokens, round, stat, type RunTiming, type Stat } from './measure.ts';
import type { BenchCase } from './workload.ts';

/** Device calls per decode token. */
export type PerToken = Record<keyof GpuCounters, number>;

export interface CaseFigures {
  host: HostName;
  model: string;
  storage: string;
  adapter: string;
  runs: number;
  prompt_tokens: number;
  decode_tokens: number;
  finish_reason: string | null;
  load_ms: Stat;
  ttft_ms: Stat;
  prefill_tokens_per_s: Stat;
  decode_tokens_per_s: Stat;
  /** Per decode token, after warm-up (median over runs). */
  per_decode_token: PerToken;
  /** The prefill request (max_tokens 1) of the last run, whole. */
  prefill_counts: GpuCounters;
  error?: string;
}

/** One timed run: the prefill-only request and the full one. */
export interface RunPair<T extends RunTiming<unknown> = RunTiming<unknown>> {
  prefill: T;
  full: T;
}

export function pairFigures(pair: RunPair): { ttftMs: number; prefillTps: number; decodeTps: number; decoded: number } {
  const decoded = decodedTokens(pair.full);
  const ttftMs = pair.prefill.totalMs;
  // A prefill-only request slower than the full one (a burst of load from other processes on a
  // small machine) leaves no difference to divide: fall back to the full request's own stream,
  // from its first text to its last.
  const difference = pair.full.totalMs - pair.prefill.totalMs;
  const decodeMs = difference > 0 ? difference : pair.full.lastTokenMs - pair.full.firstTokenMs;
  return {
    ttftMs,
    prefillTps: pair.prefill.promptTokens / (ttftMs / 1000),
    decodeTps: decoded > 1 && decodeMs > 0 ? (decoded - 1) / (decodeMs / 1000) : NaN,
    decoded,
  };
}

const log = (message: string) => process.stderr.write(message + '\n');

/** A request that has not ended after this long is taken for a hang (the bench then gives up on the host). */
export let requestTimeoutMs = 600_000;
export function setRequestTimeout(ms: number): void {
  requestTimeoutMs = ms;
}

export class RequestTimeout extends Error {
  constructor(what: string) {
    super(`${what}: no end after ${requestTimeoutMs / 1000} s (hung?)`);
    this.name = 'RequestTimeout';
  }
}

export function withTimeout<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RequestTimeout(what)), requestTimeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const requestCounts = (t: CountedRun) => counterDelta(t.atEnd!, t.atStart);

function perDecodeToken(pair: RunPair<CountedRun>): PerToken {
  const steps = decodedTokens(pair.full) - 1;
  const d = counterDelta(requestCounts(pair.full), requestCounts(pair.prefill));
  const out = {} as PerToken;
  for (const name of COUNTER_NAMES) out[name] = steps > 0 ? d[name] / steps : NaN;
  return out;
}

/**
 * Measures case `c` on `host`. `loaded`: the case's model is already loaded (the caller loaded it
 * to build the prompt with its tokenizer), in that many ms; it counts as the first load.
 * `between` runs after each of our pairs of requests, untimed and timed alike (another runtime's
 * pair: bench/run.ts interleaves wllama's with ours).
 */
export async function measureCase(
  host: Host,
  c: BenchCase,
  prompt: { prompt: string; tokens: number },
  warmupPrompt: string,
  loaded?: { loadMs: number; adapter: string },
  between?: (timed: boolean, index: number, of: number) => Promise<void>,
): Promise<CaseFigures> {
  const label = `${host.name} ${c.model} ${c.storage}`;
  const loads: number[] = loaded ? [loaded.loadMs] : [];
  let adapter = loaded?.adapter ?? '';
  for (let i = loads.length; i < c.runs; i++) {
    const l = await host.load(c);
    loads.push(l.loadMs);
    adapter = l.adapter;
    log(`${label}: load ${i + 1}/${c.runs}: ${l.loadMs.toFixed(0)} ms`);
  }
  // cache_prompt false: every request prefills its whole prompt (TTFT and prefill tokens/s are the
  // prompt's, not the prefix cache's; the multi-turn case measures that).
  const body = { model: c.id, prompt: prompt.prompt, max_tokens: c.decodeTokens, temperature: 0, ignore_eos: true, cache_prompt: false };
  // Warm-up: pipelines compile and per-shape objects are built on first use.
  const run = (what: string, b: typeof body) => withTimeout(`${label} ${what}`, host.run(b));
  await run('warm-up', { ...body, prompt: warmupPrompt, max_tokens: Math.min(8, c.decodeTokens) });
  // A shorter warm-up prompt leaves the prompt's own prefill buffers and bind groups (kept from
  // one prefill to the next) to the first timed request, which would then count them: one
  // prefill of the prompt first, so both requests of a pair prefill alike.
  if (warmupPrompt !== prompt.prompt) await run('warm-up prefill', { ...body, max_tokens: 1 });
  // A max_tokens 1 request (TTFT), then the full one.
  const runPair = async (what: string): Promise<RunPair<CountedRun>> => ({
    prefill: await run(`${what} prefill`, { ...body, max_tokens: 1 }),
    full: await run(`${what} decode`, body),
  });
  for (let i = 0; i < c.warmupRuns; i++) {
    const f = pairFigures(await runPair('warm-up run'));
    log(`${label}: warm-up run ${i + 1}/${c.warmupRuns} (untimed): TTFT ${f.ttftMs.toFixed(0)} ms, ${f.decodeTps.toFixed(2)} tok/s`);
    await between?.(false, i, c.warmupRuns);
  }
  const pairs: RunPair<CountedRun>[] = [];
  for (let i = 0; i < c.runs; i++) {
    const pair = await runPair('run');
    pairs.push(pair);
    const f = pairFigures(pair);
    const per = perDecodeToken(pair);
    log(`${label}: run ${i + 1}/${c.runs}: ${pair.prefill.promptTokens} prompt tokens, TTFT ${f.ttftMs.toFixed(0)} ms, ${f.decoded} tokens ` +
      `at ${f.decodeTps.toFixed(2)} tok/s; per token ${per.dispatches.toFixed(1)} dispatches, ${per.submits.toFixed(2)} submits, ${per.readBacks.toFixed(2)} read-backs`);
    await between?.(true, i, c.runs);
  }
  await host.unload();
  const figures = pairs.map(pairFigures);
  const perToken = {} as PerToken;
  for (const name of COUNTER_NAMES) perToken[name] = round(stat(pairs.map((p) => perDecodeToken(p)[name]), 3).median, 3);
  const last = pairs.at(-1)!;
  return {
    host: host.name,
    model: c.model,
    storage: c.storage,
    adapter,
    runs: c.runs,
    prompt_tokens: last.prefill.promptTokens,
    decode_tokens: stat(figures.map((f) => f.decoded), 0).median,
    finish_reason: last.full.finishReason,
    load_ms: stat(loads),
    ttft_ms: stat(figures.map((f) => f.ttftMs)),
    prefill_tokens_per_s: stat(figures.map((f) => f.prefillTps)),
    decode_tokens_per_s: stat(figures.map((f) => f.decodeTps), 2),
    per_decode_token: perToken,
    prefill_counts: requestCounts(last.prefill),
  };
}
