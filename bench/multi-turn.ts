// Multi-turn chat and the prefix cache (src/engine/prefix-cache.ts): time to first token turn by
// turn over a conversation that grows to about --multi-turn-tokens prompt tokens in
// --multi-turn-turns turns, with the cache (warm) and without it (cold, `cache_prompt: false`).
// With the cache a turn prefills only what is new since the previous turn, so its TTFT should
// follow the new tokens, not the conversation's length.
//
// The conversation is a growing /v1/completions prompt (stories260K has no chat template; the
// SmolLM2-shaped model is measured the same way): turn t's prompt is turn t-1's prompt, its
// answer (greedy, ignore_eos, --multi-turn-answer-tokens) and new story text, cut so that turn t's
// prompt has about t/turns of the conversation's tokens. The whole text is sent again each turn,
// as a chat client does; the tokens of the previous prompt and answer are what the cache can skip
// (less where the text retokenizes differently at a seam, and the answer's last token, whose K/V
// a request ending by length never writes).
//
// One run, on a freshly loaded model (no saved prefixes): an untimed cold request (pipelines
// compile, prefill buffers grow to the longest prompt), then
//   warm: per turn, a max_tokens 1 request on its prompt (TTFT, to its end, as bench/cases.ts),
//         then the answer request (untimed; it leaves prompt + answer in the cache, as a chat
//         turn does);
//   cold: per turn, the same max_tokens 1 request with `cache_prompt: false` (prefills it all).
// An untimed cold request between the two takes the save of the warm conversation's K/V (the
// cache keeps a copy before a request overwrites it) out of cold turn 1. The first run builds the
// prompts from its answers; later runs send the same prompts and check the answers are the same.
import type { CompletionRequest } from '../src/index.ts';
import { withTimeout } from './cases.ts';
import type { CountedRun, Host } from './hosts.ts';
import { stat, type Stat } from './measure.ts';
import { statCell, table } from './report.ts';
import { STORY, type BenchCase } from './workload.ts';

export interface MultiTurnOptions {
  /** Turns in the conversation. */
  turns: number;
  /** Prompt tokens at the last turn (about). */
  tokens: number;
  /** max_tokens of each turn's answer (greedy, ignore_eos). */
  answerTokens: number;
  runs: number;
}

export interface TurnFigures {
  turn: number;
  prompt_tokens: number;
  /** usage.prompt_tokens_details.cached_tokens of the warm request (the last run's). */
  cached_tokens: number;
  /** prompt_tokens - cached_tokens: what the warm request prefilled. */
  prefilled_tokens: number;
  /** The cold request's cached_tokens: 0 if cache_prompt: false works. */
  cold_cached_tokens: number;
  warm_ttft_ms: Stat;
  cold_ttft_ms: Stat;
  /** cold / warm, medians. */
  ratio: number;
}

export interface MultiTurnFigures {
  host: string;
  model: string;
  storage: string;
  runs: number;
  turns: number;
  target_tokens: number;
  answer_tokens: number;
  context_length: number;
  per_turn: TurnFigures[];
  /** The last turn's cold / warm TTFT: the headline. */
  last_turn_ratio: number;
  /** Runs whose answers differed from the first run's (their prompts were still the first run's). */
  answer_mismatches: number;
  error?: string;
}

const log = (message: string) => process.stderr.write(message + '\n');

/** The model's case with room in its context for the conversation and the last answer. */
export function multiTurnCase(c: BenchCase, o: MultiTurnOptions): BenchCase {
  return { ...c, runs: o.runs, contextLength: o.tokens + o.answerTokens + 16 };
}

/** Story words, repeated as far as any conversation here needs. */
const WORDS = Array.from({ length: 40 }, () => STORY).join(' ').split(' ');

/**
 * The longest run of story words from `from` that, appended to `text`, keeps the prompt within
 * `target` tokens (at least one word); the words used and the prompt's token count.
 */
async function nextPiece(host: Host, text: string, from: number, target: number): Promise<{ prompt: string; words: number; tokens: number }> {
  const join = (n: number) => (text ? text + (/\s$/.test(text) ? '' : ' ') : '') + WORDS.slice(from, from + n).join(' ');
  let best = { prompt: join(1), words: 1, tokens: await host.countTokens(join(1)) };
  let lo = 2;
  let hi = Math.min(WORDS.length - from, target);
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const prompt = join(mid);
    const tokens = await host.countTokens(prompt);
    if (tokens <= target) {
      best = { prompt, words: mid, tokens };
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (from + best.words >= WORDS.length) throw new Error('multi-turn: the story text ran out (--multi-turn-tokens too large)');
  return best;
}

/** Measures the multi-turn case of `c` (its model not loaded yet) on `host`. */
export async function measureMultiTurn(host: Host, c: BenchCase, o: MultiTurnOptions): Promise<MultiTurnFigures> {
  const label = `${host.name} ${c.model} multi-turn`;
  const mc = multiTurnCase(c, o);
  const prompts: string[] = [];
  const answers: string[] = [];
  const warm: CountedRun[][] = Array.from({ length: o.turns }, () => []);
  const cold: CountedRun[][] = Array.from({ length: o.turns }, () => []);
  let mismatches = 0;
  const base = { model: c.id, temperature: 0, ignore_eos: true };
  const run = (what: string, body: CompletionRequest) => withTimeout(`${label} ${what}`, host.run(body));
  for (let r = 0; r < o.runs; r++) {
    const loaded = await host.load(mc);
    log(`${label}: run ${r + 1}/${o.runs}: loaded in ${loaded.loadMs.toFixed(0)} ms (context ${mc.contextLength})`);
    // Warm-up, kept from no one: pipelines compile, prefill buffers grow to the conversation's
    // length (a slow model warms up on a few words: its buffers cost little beside its prefill).
    const long = await nextPiece(host, '', 0, o.tokens);
    const warmup = c.warmupWords ? WORDS.slice(0, c.warmupWords).join(' ') : long.prompt;
    await run('warm-up', { ...base, prompt: warmup, max_tokens: 1, cache_prompt: false });
    let changed = false;
    let from = 0;
    for (let t = 0; t < o.turns; t++) {
      if (r === 0) {
        const text = t === 0 ? '' : prompts[t - 1] + answers[t - 1];
        const piece = await nextPiece(host, text, from, Math.round(((t + 1) * o.tokens) / o.turns));
        from += piece.words;
        prompts.push(piece.prompt);
      }
      const timed = await run(`turn ${t + 1} warm`, { ...base, prompt: prompts[t], max_tokens: 1 });
      warm[t].push(timed);
      log(`${label}: run ${r + 1}: turn ${t + 1} warm: ${timed.promptTokens} prompt tokens, ${timed.cachedTokens} cached, TTFT ${timed.totalMs.toFixed(0)} ms`);
      if (t === o.turns - 1) break; // the last answer feeds no turn
      const answer = await run(`turn ${t + 1} answer`, { ...base, prompt: prompts[t], max_tokens: o.answerTokens });
      if (r === 0) answers.push(answer.text);
      else if (answer.text !== answers[t]) changed = true;
    }
    if (changed) {
      mismatches++;
      log(`${label}: run ${r + 1}: answers differ from run 1's (greedy should repeat them); its prompts are run 1's all the same`);
    }
    // Untimed: saves the warm conversation's K/V (a copy), which cold turn 1 would otherwise pay.
    await run('between', { ...base, prompt: WORDS.slice(0, 3).join(' '), max_tokens: 1, cache_prompt: false });
    for (let t = 0; t < o.turns; t++) {
      const timed = await run(`turn ${t + 1} cold`, { ...base, prompt: prompts[t], max_tokens: 1, cache_prompt: false });
      cold[t].push(timed);
      log(`${label}: run ${r + 1}: turn ${t + 1} cold: ${timed.promptTokens} prompt tokens, ${timed.cachedTokens} cached, TTFT ${timed.totalMs.toFixed(0)} ms`);
    }
  }
  await host.unload();
  const perTurn = warm.map((w, t): TurnFigures => {
    const last = w.at(-1)!;
    const warmTtft = stat(w.map((x) => x.totalMs));
    const coldTtft = stat(cold[t].map((x) => x.totalMs));
    const cached = last.cachedTokens ?? -1;
    return {
      turn: t + 1,
      prompt_tokens: last.promptTokens,
      cached_tokens: cached,
      prefilled_tokens: cached >= 0 ? last.promptTokens - cached : -1,
      cold_cached_tokens: cold[t].at(-1)!.cachedTokens ?? -1,
      warm_ttft_ms: warmTtft,
      cold_ttft_ms: coldTtft,
      ratio: Number((coldTtft.median / warmTtft.median).toFixed(2)),
    };
  });
  return {
    host: host.name,
    model: c.model,
    storage: c.storage,
    runs: o.runs,
    turns: o.turns,
    target_tokens: o.tokens,
    answer_tokens: o.answerTokens,
    context_length: mc.contextLength,
    per_turn: perTurn,
    last_turn_ratio: perTurn.at(-1)!.ratio,
    answer_mismatches: mismatches,
  };
}

/** The table: per host, model and turn, the prompt, what the cache held, warm and cold TTFT and their ratio. */
export function multiTurnTable(figures: MultiTurnFigures[]): string {
  const rows: string[][] = [];
  for (const f of figures) {
    if (f.error) {
      rows.push([f.host, f.model, '-', `ERROR: ${f.error.split('\n')[0]!.slice(0, 160)}`]);
      continue;
    }
    for (const t of f.per_turn) {
      rows.push([
        f.host,
        `${f.model} ${f.storage}`,
        String(t.turn),
        String(t.prompt_tokens),
        String(t.cached_tokens),
        String(t.prefilled_tokens),
        statCell(t.warm_ttft_ms),
        statCell(t.cold_ttft_ms),
        t.ratio.toFixed(2),
      ]);
    }
  }
  return table(['host', 'model', 'turn', 'prompt tok', 'cached tok', 'prefilled tok', 'warm TTFT ms', 'cold TTFT ms', 'cold / warm'], rows);
}
