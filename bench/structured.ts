// What structured output costs per token: the same model, prompt and length decoded free and
// constrained, side by side in one run on one host. A constrained step needs its token on the CPU
// before the next step's mask, so it pays a read-back per token where free decoding reads back
// batches of up to 32 steps; the grammar's mask itself is computed while the GPU runs the model.
//
// Three requests, each timed as a pair (max_tokens 1, then the full length) as bench/cases.ts does,
// greedy and ignore_eos:
//   free        no constraint
//   permissive  a grammar every text matches (`root ::= [^\x00]*`): the constrained loop's own
//               cost, with a mask computed every step and no jump-forward
//   json        a JSON schema (an object with fixed keys): the cost in use, jump-forward included;
//               it ends when the object closes, so its length is its own
import type { CountedRun, Host } from './hosts.ts';
import { decodedTokens, stat, type Stat } from './measure.ts';
import { table } from './report.ts';
import type { BenchCase } from './workload.ts';

const PERMISSIVE_GRAMMAR = 'root ::= [^\\x00]*';
const JSON_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 1, maximum: 99 },
    friends: { type: 'array', items: { type: 'string', maxLength: 10 }, maxItems: 2 },
    happy: { type: 'boolean' },
  },
  required: ['name', 'age', 'friends', 'happy'],
  additionalProperties: false,
};

export type StructuredMode = 'free' | 'permissive' | 'json';

export interface StructuredFigures {
  host: string;
  model: string;
  mode: StructuredMode;
  runs: number;
  decode_tokens: number;
  finish_reason: string | null;
  /** (tokens - 1) / (full - prefill), as bench/cases.ts. */
  decode_tokens_per_s: Stat;
  /** Its inverse, in ms. */
  ms_per_token: Stat;
  error?: string;
}

const log = (message: string) => process.stderr.write(message + '\n');

function extraFor(mode: StructuredMode): Record<string, unknown> {
  if (mode === 'permissive') return { guided_grammar: PERMISSIVE_GRAMMAR };
  if (mode === 'json') return { guided_json: JSON_SCHEMA };
  return {};
}

/**
 * Measures the three modes on `host`, whose model `c` is loaded, `runs` pairs each after one
 * untimed pair, the modes' pairs alternating so that load from other processes falls on all alike.
 */
export async function measureStructured(host: Host, c: BenchCase, prompt: string, runs: number, decodeTokens: number): Promise<StructuredFigures[]> {
  const modes: StructuredMode[] = ['free', 'permissive', 'json'];
  // cache_prompt false: both requests of a pair prefill the same, as in bench/cases.ts.
  const base = { model: c.id, prompt, temperature: 0, ignore_eos: true, cache_prompt: false };
  const pair = async (mode: StructuredMode): Promise<{ prefill: CountedRun; full: CountedRun }> => ({
    prefill: await host.run({ ...base, ...extraFor(mode), max_tokens: 1 }),
    full: await host.run({ ...base, ...extraFor(mode), max_tokens: decodeTokens }),
  });
  const timings = new Map<StructuredMode, { tps: number; tokens: number; finish: string | null }[]>(modes.map((m) => [m, []]));
  const errors = new Map<StructuredMode, string>();
  for (let i = -1; i < runs; i++) {
    for (const mode of modes) {
      if (errors.has(mode)) continue;
      try {
        const p = await pair(mode);
        if (i < 0) continue; // untimed: compiles the grammar, warms the pipelines
        const tokens = decodedTokens(p.full);
        const ms = p.full.totalMs - p.prefill.totalMs;
        const tps = tokens > 1 && ms > 0 ? (tokens - 1) / (ms / 1000) : NaN;
        timings.get(mode)!.push({ tps, tokens, finish: p.full.finishReason });
        log(`${host.name} ${c.model} structured ${mode}: run ${i + 1}/${runs}: ${tokens} tokens at ${tps.toFixed(1)} tok/s (${p.full.finishReason})`);
      } catch (error) {
        errors.set(mode, String((error as Error).message ?? error));
        log(`${host.name} ${c.model} structured ${mode}: ERROR ${(error as Error).stack ?? error}`);
      }
    }
  }
  return modes.map((mode) => {
    const t = timings.get(mode)!;
    const error = errors.get(mode);
    return {
      host: host.name,
      model: c.model,
      mode,
      runs: t.length,
      decode_tokens: stat(t.map((x) => x.tokens), 0).median,
      finish_reason: t.at(-1)?.finish ?? null,
      decode_tokens_per_s: stat(t.map((x) => x.tps), 1),
      ms_per_token: stat(t.map((x) => 1000 / x.tps), 2),
      ...(error ? { error } : {}),
    };
  });
}

/** The table: per host and mode, tok/s and ms per token, and the cost over free decoding. */
export function structuredTable(figures: StructuredFigures[]): string {
  const rows = figures.map((f) => {
    if (f.error) return [f.host, f.model, f.mode, '-', `ERROR: ${f.error.split('\n')[0]!.slice(0, 160)}`];
    const free = figures.find((g) => g.host === f.host && g.model === f.model && g.mode === 'free' && !g.error);
    const extra = free && f.mode !== 'free' ? `+${(f.ms_per_token.median - free.ms_per_token.median).toFixed(2)} ms` : '';
    return [
      f.host,
      f.model,
      f.mode,
      String(f.runs),
      `${f.decode_tokens_per_s.median.toFixed(1)} (${f.decode_tokens_per_s.min.toFixed(1)}-${f.decode_tokens_per_s.max.toFixed(1)})`,
      f.ms_per_token.median.toFixed(2),
      extra,
      `${f.decode_tokens} (${f.finish_reason ?? '-'})`,
    ];
  });
  return table(['host', 'model', 'mode', 'runs', 'decode tok/s', 'ms/token', 'vs free', 'tokens (finish)'], rows);
}
