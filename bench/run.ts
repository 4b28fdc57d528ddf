// `npm run bench`: webgpu-llama's speed in Node (Dawn) and in headless Chromium (the page's fetch
// shim, as users call it), wllama side by side in the same Chromium, the device's counters per
// decode token, and probes of the adapter's own limits. Tables on stdout, then one JSON line with
// every figure as the LAST line. Progress goes to stderr.
//
// Measured, per host, model and weight storage: load time; time to first token (TTFT: a request
// with max_tokens 1, to its end) and prefill tokens/s (prompt tokens / TTFT) for a prompt of about
// --prompt-tokens; decode tokens/s from a request of --decode-tokens tokens on the same prompt
// (greedy, ignore_eos): (tokens - 1) / (its time - TTFT), see bench/cases.ts. Each figure is the
// median of --runs runs, with min-max. Models: stories260K (GGUF, f32) and a random-weight model of
// SmolLM2-135M's shape (generated on demand into generated-models/, ignored by git) loaded as f32,
// f16, q8_0 and q4_0. SmolLM2 on SwiftShader takes about a second per token, prefill or decode, so
// it has its own smaller counts.
//
//   npm run bench -- [--node-only | --browser-only] [--no-wllama] [--no-probes]
//                    [--models stories260K,smollm2] [--storages f32,f16,q8_0,q4_0]
//                    [--runs 5] [--warmup-runs 4] [--prompt-tokens 200] [--decode-tokens 256]
//                    [--smol-runs 1] [--smol-prompt-tokens 16] [--smol-decode-tokens 8]
//                    [--wllama-threads 1,2] [--probe-matrix 8192x2048] [--copy-mib 128]
//                    [--request-timeout-s 600]  (a request running longer is taken for a hang)
//                    [--no-structured] [--structured-runs 3] [--structured-tokens 64]
//                    [--no-multi-turn | --multi-turn-only] [--multi-turn-runs 3] [--multi-turn-turns 8]
//                    [--multi-turn-tokens 1000] [--multi-turn-answer-tokens 32]
//                    [--smol-multi-turn-runs 1] [--smol-multi-turn-tokens 128] [--smol-multi-turn-answer-tokens 4]
//                    [--no-embeddings | --embeddings-only] [--embeddings-inputs 32] [--embeddings-runs 5]
//                    [--embeddings-min-tokens 4] [--embeddings-max-tokens 60]
//
// Embeddings (bench/embeddings.ts): Node only, on the engine, stories260K: inputs/s and tokens/s
// of embedding --embeddings-inputs inputs in one call, one by one, and a chat prefill of the same
// tokens (a session per input; all of them as one prompt), the parts alternating in each run.
//
// Structured output (bench/structured.ts): on stories260K, per host, decoding free, under a grammar
// every text matches, and under a JSON schema, side by side: the cost of a constrained token.
//
// Multi-turn chat (bench/multi-turn.ts): per host, on stories260K and on the SmolLM2 shape (in the
// first of --storages), a conversation of --multi-turn-turns turns growing to about
// --multi-turn-tokens prompt tokens, each turn's TTFT with the prefix cache (warm) and with
// cache_prompt: false (cold): with the cache a turn's TTFT should follow its new tokens only.
// SmolLM2 prefills at ~3-15 tokens/s on SwiftShader, so its conversation is shorter
// (--smol-multi-turn-*); --multi-turn-only runs this case alone (no other case, structured
// output, probes or wllama).
//
// `npm run bench -- --real-shapes ...` is the memory bench of bench/real-shapes.ts (Node only:
// peak memory while loading SmolLM2-135M / Llama-3.2-1B shaped models).
//
// `npm run bench -- --families ...` is the families case of bench/families.ts: each family's
// random model beside a plain Llama of the same dims, interleaved, on each host (--node-only,
// --browser-only as above):
//   npm run bench -- --families [--families-list qwen3,smollm3,phi3,phi4,gemma3,gemma2]
//                    [--families-shape tiny|small|smollm2] [--families-runs 3] [--families-warmup-runs 1]
//                    [--families-prompt-tokens 32] [--families-decode-tokens 32]
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import type { WeightStorage } from '../src/model/weights.ts';
import type { Family, Shape } from '../scripts/model-families.ts';
import { measureCase, RequestTimeout, setRequestTimeout, type CaseFigures } from './cases.ts';
import { chromiumHost, nodeHost, startBrowser, type BrowserSession, type Host, type HostName } from './hosts.ts';
import { DEFAULT_PROBE_OPTIONS, FILE_ONLY_PROBE_DTYPES, type ProbeDType, type ProbeFigures, type ProbeOptions } from './probes.ts';
import { ensureGenerated, realShapesTable, runRealShapes } from './real-shapes.ts';
import { DEFAULT_BENCH_FAMILIES, prepareFamilies, runFamilies, type FamiliesOptions, type FamilyFigures } from './families.ts';
import { bestOf, casesTable, countersTable, familiesTable, probesTable, ratios, wllamaTable } from './report.ts';
import { openWllama, type WllamaContestant, type WllamaFigures } from './wllama.ts';
import { measureStructured, structuredTable, type StructuredFigures } from './structured.ts';
import { measureMultiTurn, multiTurnTable, type MultiTurnFigures, type MultiTurnOptions } from './multi-turn.ts';
import { buildPrompt, ROOT, smolCase, STORY, storiesCase, type BenchCase } from './workload.ts';
import { embeddingsTable, measureEmbeddings, type EmbeddingsFigures } from './embeddings.ts';
import { concurrencyTable, measureConcurrency, type ConcurrencyFigures, type ConcurrencyOptions } from './concurrency.ts';

const log = (message: string) => process.stderr.write(message + '\n');
const WLLAMA_VERSION: string = JSON.parse(readFileSync(`${ROOT}node_modules/@wllama/wllama/package.json`, 'utf8')).version;

const { values } = parseArgs({
  options: {
    'node-only': { type: 'boolean', default: false },
    'browser-only': { type: 'boolean', default: false },
    'no-wllama': { type: 'boolean', default: false },
    'no-probes': { type: 'boolean', default: false },
    models: { type: 'string', default: 'stories260K,smollm2' },
    storages: { type: 'string', default: 'f32,f16,q8_0,q4_0' },
    runs: { type: 'string', default: '5' },
    // Untimed full-size runs first, ours and wllama's alike: wllama's WebAssembly takes ~4 of them
    // (~1.5 s of work) to reach its speed while V8 tiers it up.
    'warmup-runs': { type: 'string', default: '4' },
    'prompt-tokens': { type: 'string', default: '200' },
    'decode-tokens': { type: 'string', default: '256' },
    'smol-runs': { type: 'string', default: '1' },
    'smol-prompt-tokens': { type: 'string', default: '16' },
    'smol-decode-tokens': { type: 'string', default: '8' },
    'wllama-threads': { type: 'string', default: '1,2' },
    'probe-matrix': { type: 'string', default: `${DEFAULT_PROBE_OPTIONS.matvecRows}x${DEFAULT_PROBE_OPTIONS.matvecCols}` },
    'copy-mib': { type: 'string', default: String(DEFAULT_PROBE_OPTIONS.copyMiB) },
    'request-timeout-s': { type: 'string', default: '600' },
    'no-structured': { type: 'boolean', default: false },
    'structured-runs': { type: 'string', default: '3' },
    'structured-tokens': { type: 'string', default: '64' },
    'no-multi-turn': { type: 'boolean', default: false },
    'multi-turn-only': { type: 'boolean', default: false },
    'multi-turn-runs': { type: 'string', default: '3' },
    'multi-turn-turns': { type: 'string', default: '8' },
    'multi-turn-tokens': { type: 'string', default: '1000' },
    'multi-turn-answer-tokens': { type: 'string', default: '32' },
    // SmolLM2's cold 1,000-token prefill takes ~7 minutes on SwiftShader (2 cores, loaded).
    'smol-multi-turn-runs': { type: 'string', default: '1' },
    'smol-multi-turn-tokens': { type: 'string', default: '128' },
    'smol-multi-turn-answer-tokens': { type: 'string', default: '4' },
    // --real-shapes: the memory bench (bench/real-shapes.ts)
    'real-shapes': { type: 'boolean', default: false },
    'prefill-tokens': { type: 'string', default: '64' },
    shape: { type: 'string', default: 'real' },
    // --families: each family beside a Llama of the same dims (bench/families.ts)
    families: { type: 'boolean', default: false },
    'families-list': { type: 'string', default: DEFAULT_BENCH_FAMILIES.join(',') },
    'families-shape': { type: 'string', default: 'small' },
    'families-runs': { type: 'string', default: '3' },
    'families-warmup-runs': { type: 'string', default: '1' },
    'families-prompt-tokens': { type: 'string', default: '32' },
    'families-decode-tokens': { type: 'string', default: '32' },
    // Embeddings beside a chat prefill (bench/embeddings.ts)
    'no-embeddings': { type: 'boolean', default: false },
    'embeddings-only': { type: 'boolean', default: false },
    'embeddings-inputs': { type: 'string', default: '32' },
    'embeddings-runs': { type: 'string', default: '5' },
    'embeddings-min-tokens': { type: 'string', default: '4' },
    'embeddings-max-tokens': { type: 'string', default: '60' },
    // --concurrency: many requests at once (bench/concurrency.ts)
    concurrency: { type: 'boolean', default: false },
    'concurrency-streams': { type: 'string', default: '8' },
    'concurrency-tokens': { type: 'string', default: '48' },
    'concurrency-runs': { type: 'string', default: '3' },
    'concurrency-prompt-tokens': { type: 'string', default: '32' },
    'smol-concurrency-tokens': { type: 'string', default: '6' },
    'smol-concurrency-runs': { type: 'string', default: '1' },
  },
});

const int = (name: keyof typeof values, min = 1): number => {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer of at least ${min}, got ${values[name]}`);
  return n;
};
const list = (value: string) => value.split(',').map((s) => s.trim()).filter(Boolean);

async function realShapes(): Promise<void> {
  const options = {
    models: (values.models === 'stories260K,smollm2' ? ['smollm2', 'llama3'] : list(values.models)) as Family[],
    storages: list(values.storages) as WeightStorage[],
    prefillTokens: int('prefill-tokens'),
    decodeTokens: values['decode-tokens'] === '256' ? 16 : int('decode-tokens'),
    shape: values.shape as Shape,
  };
  const figures = await runRealShapes(options);
  console.log(`random models at ${options.shape} shapes in Node; peaks while loading, above the figure before the load; ` +
    `prefill with a ~${options.prefillTokens}-token prompt, decode with max_tokens ${options.decodeTokens}, temperature 0`);
  console.log(realShapesTable(figures));
  console.log(JSON.stringify({ real_shapes: options, results: figures }));
}

async function families(): Promise<void> {
  const started = performance.now();
  const loadBefore = loadavg()[0];
  const options: FamiliesOptions = {
    families: list(values['families-list']).map((f) => f.toLowerCase()),
    shape: values['families-shape'],
    promptTokens: int('families-prompt-tokens'),
    decodeTokens: int('families-decode-tokens', 2),
    runs: int('families-runs'),
    warmupRuns: int('families-warmup-runs', 0),
  };
  setRequestTimeout(int('request-timeout-s') * 1000);
  const pairs = await prepareFamilies(options);
  const results: FamilyFigures[] = [];
  let chromiumVersion: string | undefined;
  if (!values['browser-only']) results.push(...(await runFamilies(nodeHost, pairs, options)));
  if (!values['node-only']) {
    const session = await startBrowser();
    chromiumVersion = session.version;
    try {
      results.push(...(await runFamilies(() => chromiumHost(session), pairs, options)));
    } finally {
      await session.close();
    }
  }
  console.log(`families beside a Llama of the same dims (shape ${options.shape}), f32 weights, a ~${options.promptTokens}-token prompt, ` +
    `${options.decodeTokens} decode tokens, greedy; ${options.runs} runs after ${options.warmupRuns} untimed, family and Llama alternating`);
  console.log(familiesTable(results));
  console.log(JSON.stringify({
    families: options,
    node: process.version,
    chromium: chromiumVersion ?? null,
    elapsed_s: Math.round((performance.now() - started) / 1000),
    machine: { cpus: cpus().length, cpu_model: cpus()[0]?.model.trim() ?? null, load_average_start: loadBefore, load_average_end: loadavg()[0] },
    results,
  }));
}

async function concurrency(): Promise<void> {
  const started = performance.now();
  const loadBefore = loadavg()[0];
  setRequestTimeout(int('request-timeout-s') * 1000);
  const models = list(values.models).map((m) => m.toLowerCase());
  const streams = int('concurrency-streams', 2);
  const promptTokens = int('concurrency-prompt-tokens');
  const cases: { c: BenchCase; options: ConcurrencyOptions }[] = [];
  const counts = (decodeTokens: number, runs: number) => ({ promptTokens, decodeTokens, runs, warmupRuns: 0 });
  if (models.includes('stories260k')) {
    const o = { streams, tokens: int('concurrency-tokens'), runs: int('concurrency-runs') };
    cases.push({ c: storiesCase(counts(o.tokens, o.runs)), options: o });
  }
  if (models.includes('smollm2')) {
    const o = { streams, tokens: int('smol-concurrency-tokens'), runs: int('smol-concurrency-runs') };
    cases.push({ c: smolCase(ensureGenerated('smollm2', 'real'), list(values.storages)[0] as WeightStorage, counts(o.tokens, o.runs)), options: o });
  }
  const results: ConcurrencyFigures[] = [];
  const measureOn = async (host: Host) => {
    for (const { c, options } of cases) {
      await host.load(c);
      const prompt = await buildPrompt((text) => host.countTokens(text), promptTokens);
      results.push(await measureConcurrency(host, c, prompt.prompt, options));
    }
  };
  let chromiumVersion: string | undefined;
  if (!values['browser-only']) {
    const host = await nodeHost();
    try {
      await measureOn(host);
    } finally {
      await host.close();
    }
  }
  if (!values['node-only']) {
    const session = await startBrowser();
    chromiumVersion = session.version;
    try {
      const host = await chromiumHost(session);
      try {
        await measureOn(host);
      } finally {
        await host.close();
      }
    } finally {
      await session.close();
    }
  }
  console.log(`many requests at once: ${streams} streams of greedy requests (ignore_eos, cache_prompt false, ~${promptTokens}-token prompts) against one alone; ` +
    `a newcomer's TTFT beside ${streams - 1} decoding streams against idle; n: ${streams} against n: 1 (seeded); ratios of medians, measured side by side`);
  console.log(concurrencyTable(results));
  console.log(JSON.stringify({
    concurrency: { streams, promptTokens },
    node: process.version,
    chromium: chromiumVersion ?? null,
    elapsed_s: Math.round((performance.now() - started) / 1000),
    machine: { cpus: cpus().length, cpu_model: cpus()[0]?.model.trim() ?? null, load_average_start: loadBefore, load_average_end: loadavg()[0] },
    results,
  }));
}

interface Plan {
  cases: BenchCase[];
  /** The multi-turn case's models (bench/multi-turn.ts), with their conversation's shape. */
  multiTurn: { case: BenchCase; options: MultiTurnOptions }[];
  hosts: HostName[];
  wllamaThreads: number[];
  probes: ProbeOptions | null;
}

function plan(): Plan {
  const models = list(values.models).map((m) => m.toLowerCase());
  for (const m of models) if (m !== 'stories260k' && m !== 'smollm2') throw new Error(`--models: unknown model ${m} (stories260K, smollm2)`);
  const storages = list(values.storages) as WeightStorage[];
  for (const s of storages) if (!['f32', 'f16', 'q8_0', 'q4_0'].includes(s)) throw new Error(`--storages: unknown storage ${s} (f32, f16, q8_0, q4_0)`);
  if (values['no-multi-turn'] && values['multi-turn-only']) throw new Error('--no-multi-turn and --multi-turn-only exclude each other');
  const only = values['multi-turn-only'];
  const cases: BenchCase[] = [];
  const multiTurn: Plan['multiTurn'] = [];
  const turns = int('multi-turn-turns');
  if (models.includes('stories260k')) {
    const stories = storiesCase({ promptTokens: int('prompt-tokens'), decodeTokens: int('decode-tokens'), runs: int('runs'), warmupRuns: int('warmup-runs', 0) });
    if (!only) cases.push(stories);
    if (!values['no-multi-turn']) {
      multiTurn.push({ case: stories, options: { turns, tokens: int('multi-turn-tokens'), answerTokens: int('multi-turn-answer-tokens'), runs: int('multi-turn-runs') } });
    }
  }
  if (models.includes('smollm2')) {
    const dir = ensureGenerated('smollm2', 'real');
    const counts = { promptTokens: int('smol-prompt-tokens'), decodeTokens: int('smol-decode-tokens'), runs: int('smol-runs'), warmupRuns: 0 };
    if (!only) for (const storage of storages) cases.push(smolCase(dir, storage, counts));
    if (!values['no-multi-turn'] && storages.length) {
      const options = { turns, tokens: int('smol-multi-turn-tokens'), answerTokens: int('smol-multi-turn-answer-tokens'), runs: int('smol-multi-turn-runs') };
      multiTurn.push({ case: smolCase(dir, storages[0], counts), options });
    }
  }
  const hosts: HostName[] = [];
  if (!values['browser-only']) hosts.push('node');
  if (!values['node-only']) hosts.push('chromium');
  const [rows, cols] = values['probe-matrix'].split('x').map(Number);
  return {
    cases,
    multiTurn,
    hosts,
    wllamaThreads: only || values['no-wllama'] || !hosts.includes('chromium') || !models.includes('stories260k') ? [] : list(values['wllama-threads']).map(Number),
    probes: only || values['no-probes'] ? null : { ...DEFAULT_PROBE_OPTIONS, matvecRows: rows, matvecCols: cols, copyMiB: int('copy-mib'), dtypes: [...(storages as ProbeDType[]), ...FILE_ONLY_PROBE_DTYPES] },
  };
}

/** The structured-output figures of every host. */
const structured: StructuredFigures[] = [];

/** The multi-turn figures of every host and model. */
const multiTurn: MultiTurnFigures[] = [];

/** The prompt of each model, built once with its tokenizer (the same text on every host and storage). */
const prompts = new Map<string, { prompt: string; tokens: number }>();

/** Other runtimes whose pairs of requests alternate with ours on a case (see measureCase's `between`). */
type Interleave = (c: BenchCase, prompt: { prompt: string; tokens: number }) => Promise<((timed: boolean, index: number, of: number) => Promise<void>) | undefined>;

async function runHost(host: Host, p: Plan, results: CaseFigures[], interleave?: Interleave): Promise<(ProbeFigures & { adapter: string }) | undefined> {
  for (const c of p.cases) {
    try {
      let loaded: { loadMs: number; adapter: string } | undefined;
      if (!prompts.has(c.model)) {
        loaded = await host.load(c);
        log(`${host.name} ${c.model} ${c.storage}: load 1/${c.runs}: ${loaded.loadMs.toFixed(0)} ms`);
        const built = await buildPrompt((text) => host.countTokens(text), c.promptTokens);
        prompts.set(c.model, built);
        log(`${c.model}: prompt of ${built.tokens} tokens`);
      }
      const prompt = prompts.get(c.model)!;
      // The warm-up compiles the pipelines; on a slow model, a short prompt does it sooner.
      const warmup = c.warmupWords ? prompt.prompt.split(' ').slice(0, c.warmupWords).join(' ') : prompt.prompt;
      const between = await interleave?.(c, prompt);
      results.push(await measureCase(host, c, prompt, warmup, loaded, between));
    } catch (error) {
      log(`${host.name} ${c.model} ${c.storage}: ERROR ${(error as Error).stack ?? error}`);
      results.push({ host: host.name, model: c.model, storage: c.storage, runs: c.runs, error: String((error as Error).message ?? error) } as CaseFigures);
      // A hung request still holds the engine and the GPU: nothing more can run on this host.
      if (error instanceof RequestTimeout) return undefined;
      await host.unload().catch(() => {});
    }
  }
  const stories = p.cases.find((c) => c.model === 'stories260K');
  if (stories && !values['no-structured'] && !values['multi-turn-only']) {
    try {
      await host.load(stories);
      structured.push(...(await measureStructured(host, stories, prompts.get(stories.model)!.prompt, int('structured-runs'), int('structured-tokens'))));
    } catch (error) {
      log(`${host.name} structured: ERROR ${(error as Error).stack ?? error}`);
    } finally {
      await host.unload().catch(() => {});
    }
  }
  for (const { case: c, options } of p.multiTurn) {
    try {
      multiTurn.push(await measureMultiTurn(host, c, options));
    } catch (error) {
      log(`${host.name} ${c.model} multi-turn: ERROR ${(error as Error).stack ?? error}`);
      multiTurn.push({ host: host.name, model: c.model, storage: c.storage, runs: options.runs, error: String((error as Error).message ?? error) } as MultiTurnFigures);
      if (error instanceof RequestTimeout) return undefined;
      await host.unload().catch(() => {});
    }
  }
  if (!p.probes) return undefined;
  try {
    log(`${host.name}: probes`);
    return await host.probes(p.probes);
  } catch (error) {
    log(`${host.name} probes: ERROR ${(error as Error).stack ?? error}`);
    return undefined;
  }
}

/** The embeddings figures (Node, stories260K), or why they are missing. */
async function embeddings(): Promise<EmbeddingsFigures | { error: string }> {
  const o = {
    inputs: int('embeddings-inputs'),
    runs: int('embeddings-runs'),
    minTokens: int('embeddings-min-tokens'),
    maxTokens: int('embeddings-max-tokens'),
  };
  if (o.maxTokens < o.minTokens) throw new Error('--embeddings-max-tokens must be at least --embeddings-min-tokens');
  try {
    return await measureEmbeddings(Array.from({ length: 8 }, () => STORY).join(' '), o);
  } catch (error) {
    log(`node embeddings: ERROR ${(error as Error).stack ?? error}`);
    return { error: String((error as Error).message ?? error) };
  }
}

function printEmbeddings(f: EmbeddingsFigures | { error: string }): void {
  console.log();
  if ('error' in f && !('parts' in f)) {
    console.log(`Embeddings: ERROR ${f.error}`);
    return;
  }
  const e = f as EmbeddingsFigures;
  console.log(
    `Embeddings on stories260K in Node (${e.adapter}), on the engine: ${e.inputs} inputs, ${e.tokens} tokens in all, ${e.runs} run(s), medians (min-max); ` +
      'embed in one call, one input a call, and a chat prefill of the same tokens (a session per input, cache_prompt false; all as one prompt):',
  );
  console.log(embeddingsTable(e));
  console.log(`Embed (one call) over prefill (sessions), tokens/s: ${e.embed_over_sessions}x`);
}

async function main(): Promise<void> {
  if (values['embeddings-only']) {
    const f = await embeddings();
    printEmbeddings(f);
    console.log(JSON.stringify({ bench: 'webgpu-llama', date: new Date().toISOString(), node: process.version, embeddings: f }));
    return;
  }
  if (values['real-shapes']) return realShapes();
  if (values.families) return families();
  if (values.concurrency) return concurrency();
  setRequestTimeout(int('request-timeout-s') * 1000);
  const started = performance.now();
  // Other processes on a small machine move every figure: the load is recorded with them.
  const loadBefore = loadavg()[0];
  const p = plan();
  const results: CaseFigures[] = [];
  const probes: Partial<Record<HostName, ProbeFigures & { adapter: string }>> = {};
  const wllama: WllamaFigures[] = [];
  let chromiumVersion: string | undefined;

  if (p.hosts.includes('node')) {
    const host = await nodeHost();
    try {
      const figures = await runHost(host, p, results);
      if (figures) probes.node = figures;
    } finally {
      await host.close();
    }
  }
  const embedded = p.hosts.includes('node') && !values['no-embeddings'] && !values['multi-turn-only'] && p.cases.some((c) => c.model === 'stories260K') ? await embeddings() : null;
  if (p.hosts.includes('chromium')) {
    const session: BrowserSession = await startBrowser();
    chromiumVersion = session.version;
    // wllama on stories260K, a page per thread setting, its pairs of requests alternating with ours.
    const contestants: WllamaContestant[] = [];
    const interleave: Interleave = async (c, prompt) => {
      if (c.model !== 'stories260K') return undefined;
      for (const threads of p.wllamaThreads) {
        try {
          const w = { url: c.url, prompt: prompt.prompt, decodeTokens: c.decodeTokens, contextLength: c.contextLength, runs: c.runs, warmupRuns: c.warmupRuns };
          contestants.push(await openWllama(session, w, threads));
        } catch (error) {
          log(`wllama ${threads} threads: ERROR ${(error as Error).stack ?? error}`);
          wllama.push({ threads_requested: threads, error: String((error as Error).message ?? error) } as WllamaFigures);
        }
      }
      return async (timed, index, of) => {
        for (const contestant of [...contestants]) {
          try {
            await (timed ? contestant.timedPair(index, of) : contestant.warmupPair(index, of));
          } catch (error) {
            log(`wllama ${contestant.threads} threads: ERROR ${(error as Error).stack ?? error}`);
            wllama.push({ threads_requested: contestant.threads, error: String((error as Error).message ?? error) } as WllamaFigures);
            contestants.splice(contestants.indexOf(contestant), 1);
            await contestant.close().catch(() => {});
          }
        }
      };
    };
    try {
      const host = await chromiumHost(session);
      try {
        const figures = await runHost(host, p, results, p.wllamaThreads.length ? interleave : undefined);
        if (figures) probes.chromium = figures;
      } finally {
        await host.close();
      }
      for (const contestant of contestants) {
        try {
          wllama.push(contestant.figures());
        } catch (error) {
          wllama.push({ threads_requested: contestant.threads, error: String((error as Error).message ?? error) } as WllamaFigures);
        }
      }
      wllama.sort((a, b) => a.threads_requested - b.threads_requested);
    } finally {
      for (const contestant of contestants) await contestant.close().catch(() => {});
      await session.close();
    }
  }

  const oursInChromium = results.find((c) => c.host === 'chromium' && c.model === 'stories260K' && !c.error);
  const okWllama = wllama.filter((w) => !w.error);
  const stories = p.cases.find((c) => c.model === 'stories260K');
  const smol = p.cases.find((c) => c.model === 'SmolLM2-135M');
  const adapters = [...new Set(results.filter((c) => c.adapter).map((c) => `${c.host}: ${c.adapter}`))];

  const machine = `${cpus().length} CPU cores (${cpus()[0]?.model.trim() ?? '?'}), load average ${loadBefore.toFixed(1)} at the start, ${loadavg()[0].toFixed(1)} at the end`;
  console.log(`webgpu-llama bench${chromiumVersion ? `, Chromium ${chromiumVersion}` : ''}, Node ${process.version}; ${adapters.join('; ')}`);
  console.log(machine);
  if (results.length) console.log(
    'Medians (min-max) over the runs. TTFT: a max_tokens 1 request on the prompt in [brackets], to its end; prefill = prompt tokens / TTFT; ' +
      'decode: greedy, ignore_eos, max_tokens in [brackets] on the same prompt, (tokens - 1) / (its time - TTFT).',
  );
  if (stories) console.log(`stories260K: ${stories.runs} run(s) after ${stories.warmupRuns} untimed ones, ~${stories.promptTokens}-token prompt, ${stories.decodeTokens} decode tokens.`);
  if (smol) {
    console.log(`SmolLM2-135M (random weights, real shape): ${smol.runs} run(s), ~${smol.promptTokens}-token prompt, ${smol.decodeTokens} decode tokens ` +
      '(smaller defaults: SwiftShader is slow at this size; --smol-runs, --smol-prompt-tokens, --smol-decode-tokens change them).');
  }
  if (results.length) {
    console.log();
    console.log(casesTable(results));
    console.log();
    console.log('Device calls per decode token after warm-up ((full request - max_tokens 1 request) / (tokens - 1); buffers and bind groups: created; the last column is the whole max_tokens 1 request):');
    console.log(countersTable(results));
  }
  if (Object.keys(probes).length) {
    console.log();
    console.log(`Adapter probes: copy of ${p.probes!.copyMiB} MiB; matvec = batch.matmul T=1 on a random [${p.probes!.matvecRows}, ${p.probes!.matvecCols}] matrix (weight bytes/s, and x the copy rate); dispatch = per tiny dispatch in one submit; read-back = 4 bytes on an idle queue.`);
    console.log(probesTable(probes));
  }
  if (structured.length) {
    console.log();
    console.log('Structured output on stories260K: the same prompt decoded free, under a grammar every text matches (the constrained loop\'s own cost), and under a JSON schema (jump-forward included; it ends when the object closes); greedy, ignore_eos; pairs as above:');
    console.log(structuredTable(structured));
  }
  if (multiTurn.length) {
    console.log();
    console.log(
      'Multi-turn chat and the prefix cache: a /v1/completions prompt growing turn by turn (previous prompt + its greedy answer + new story text), ' +
        'TTFT (a max_tokens 1 request, to its end) with the cache after the previous turn\'s answer (warm) and with cache_prompt: false (cold); medians (min-max) over the runs:',
    );
    for (const { case: c, options: o } of p.multiTurn) {
      console.log(`  ${c.model} ${c.storage}: ${o.turns} turns to ~${o.tokens} prompt tokens, ${o.answerTokens}-token answers, ${o.runs} run(s)`);
    }
    console.log(multiTurnTable(multiTurn));
    const headline = multiTurn.filter((f) => !f.error).map((f) => `${f.host} ${f.model}: ${f.last_turn_ratio.toFixed(1)}x`);
    if (headline.length) console.log(`Last turn, cold / warm TTFT: ${headline.join('; ')}`);
  }
  if (embedded) printEmbeddings(embedded);
  if (wllama.length) {
    console.log();
    console.log(`wllama ${WLLAMA_VERSION} (llama.cpp in WebAssembly, CPU, n_gpu_layers 0) on the same stories260K GGUF in the same Chromium, same prompt and decode length; ratios are ours / wllama (tok/s: above 1 we are faster; ms: below 1 we are faster):`);
    console.log(wllamaTable(oursInChromium, wllama));
  }
  const elapsed = (performance.now() - started) / 1000;
  console.log();
  console.log(`(${elapsed.toFixed(0)} s)`);
  console.log(
    JSON.stringify({
      bench: 'webgpu-llama',
      date: new Date().toISOString(),
      node: process.version,
      chromium: chromiumVersion ?? null,
      elapsed_s: Math.round(elapsed),
      machine: { cpus: cpus().length, cpu_model: cpus()[0]?.model.trim() ?? null, load_average_start: loadBefore, load_average_end: loadavg()[0] },
      cases: p.cases.map(({ model, storage, promptTokens, decodeTokens, runs, warmupRuns, contextLength }) => ({ model, storage, promptTokens, decodeTokens, runs, warmupRuns, contextLength })),
      prompts: Object.fromEntries(prompts),
      results,
      structured,
      multi_turn: {
        settings: p.multiTurn.map(({ case: c, options }) => ({ model: c.model, storage: c.storage, ...options })),
        results: multiTurn,
      },
      probes,
      embeddings: embedded,
      wllama: {
        version: WLLAMA_VERSION,
        settings: wllama,
        ratios: oursInChromium
          ? {
              ...Object.fromEntries(okWllama.map((w) => [`threads_${w.threads_requested}`, ratios(oursInChromium, w)])),
              ...(okWllama.length ? { best: ratios(oursInChromium, bestOf(okWllama)) } : {}),
            }
          : null,
      },
    }),
  );
}

await main();
// Dawn keeps handles open in Node; the figures are printed, so leave now.
process.exit(0);
