// `npm run bench`: load time, time to first token, prefill and decode speed of stories260K, in
// Node (Dawn) and in Chromium (the page's fetch shim, as users call it). Medians over several
// runs; a table, then one JSON line with every figure as the last line.
//
//   npm run bench -- [--runs N] [--node-only | --browser-only]
//
// With --real-shapes (Node only): random models at the real shapes of SmolLM2-135M and
// Llama-3.2-1B, generated on demand into generated-models/ (ignored by git), loaded with each
// weight storage: load time, peak memory while loading, prefill / decode tokens/s (bench/real-shapes.ts).
//   npm run bench -- --real-shapes [--models smollm2,llama3] [--storages f32,f16,q8_0,q4_0]
//                    [--prefill-tokens 64] [--decode-tokens 16] [--shape real|tiny]
import { createServer as createNetServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CompletionRequest } from '../src/api/completions.ts';
import type { Engine } from '../src/index.ts';
import { timeChunks, type RunTiming } from './measure.ts';
import { realShapesTable, runRealShapes } from './real-shapes.ts';
import type { Family, Shape } from '../scripts/model-families.ts';
import type { WeightStorage } from '../src/model/weights.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MODEL_ID = 'stories260K';
const MODEL_PATH = `${ROOT}public/models/stories260K/stories260K.gguf`;
const MODEL_URL = '/models/stories260K/stories260K.gguf';
const PREFILL_TOKENS = 128;
const DECODE_TOKENS = 256;
const DECODE_PROMPT = 'Once upon a time';

// Plain story text, the kind stories260K was trained on; cut to ~128 tokens below.
const STORY =
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her ' +
  'friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. It was ' +
  'soft and round. Lily wanted to share the ball with her friend Tom. Tom was sad because he lost his toy ' +
  'car. Lily said, "Tom, do you want to play with my ball?" Tom smiled and said, "Yes, thank you, Lily!" ' +
  'They threw the ball to each other and laughed. Then the sun went down and it was time to go home. ' +
  'Mom gave Lily a big hug and a warm cup of milk. Lily told Mom about the ball and her friend Tom. Mom ' +
  'said, "You are a good friend, Lily." Lily was happy. She went to bed and dreamed about the park, the ' +
  'ball and the sun. The next day, Lily and Tom went to the park again. They saw a little dog with a ' +
  'blue hat. The dog wanted to play too, so they all played together until it was time to eat.';

interface Host {
  name: 'node' | 'chromium';
  /** Loads the model afresh; returns the wall time in ms. */
  load(): Promise<number>;
  /** One streamed completion (stream_options.include_usage), timed from the request. */
  run(body: CompletionRequest): Promise<RunTiming>;
  /** Prompt tokens `text` makes (BOS included when the model adds it), from the model's tokenizer. */
  countTokens(text: string): Promise<number>;
  describe(): string;
  close(): Promise<void>;
}

interface HostFigures {
  adapter: string;
  load_ms: number;
  ttft_ms: number;
  prefill_prompt_tokens: number;
  prefill_tokens_per_s: number;
  decode_tokens: number;
  decode_finish_reason: string | null;
  decode_tokens_per_s: number;
  runs: {
    load_ms: number[];
    ttft_ms: number[];
    prefill_tokens_per_s: number[];
    decode_tokens: number[];
    decode_tokens_per_s: number[];
  };
}

const median = (values: number[]): number => {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
};
const round = (x: number, digits = 1) => Number(x.toFixed(digits));
const log = (message: string) => process.stderr.write(message + '\n');

// ---- Node --------------------------------------------------------------------------------------

async function nodeHost(): Promise<Host> {
  const { loadModelFromPath } = await import('../src/node/index.ts');
  const { nodeGpuContext } = await import('../src/node/gpu.ts');
  const ctx = await nodeGpuContext({ log });
  let engine: Engine | undefined;
  return {
    name: 'node',
    async load() {
      const start = performance.now();
      const loaded = await loadModelFromPath(MODEL_PATH, { id: MODEL_ID });
      const ms = performance.now() - start;
      engine?.unload();
      engine = loaded;
      return ms;
    },
    async run(body) {
      const start = performance.now();
      const chunks = await engine!.complete({ ...body, stream: true, stream_options: { include_usage: true } });
      return timeChunks(start, chunks);
    },
    countTokens: async (text) => engine!.generator.tokenizer.encode(text).length,
    describe: () => [ctx.adapter.vendor, ctx.adapter.architecture, ctx.adapter.description].filter(Boolean).join(' '),
    async close() {
      engine?.unload();
    },
  };
}

// ---- Chromium ----------------------------------------------------------------------------------

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createNetServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function chromiumHost(): Promise<Host> {
  const { createServer } = await import('vite');
  const { chromium } = await import('@playwright/test');
  const { CHROMIUM_PATH, WEBGPU_ARGS } = await import('../test/browser/chromium.ts');

  const port = await freePort();
  const server = await createServer({
    configFile: `${ROOT}vite.config.ts`,
    logLevel: 'warn',
    server: { host: '127.0.0.1', port, strictPort: true, watch: null, ws: false },
  });
  await server.listen();
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: WEBGPU_ARGS, headless: true });
  const page = await browser.newPage();
  page.on('pageerror', (error) => log(`chromium: page error: ${error.message}`));
  const benchUrl = `http://127.0.0.1:${port}/bench.html`;
  let adapter = '';
  return {
    name: 'chromium',
    async load() {
      await page.goto(benchUrl);
      await page.waitForFunction(() => 'bench' in window);
      const result = await page.evaluate(
        ([url, id]) => (window as any).bench.load(url, id) as Promise<{ loadMs: number; adapter: string }>,
        [MODEL_URL, MODEL_ID] as const,
      );
      adapter = result.adapter;
      return result.loadMs;
    },
    run: (body) => page.evaluate((b) => (window as any).bench.run(b) as Promise<RunTiming>, body),
    countTokens: (text) => page.evaluate((t) => (window as any).bench.countTokens(t) as Promise<number>, text),
    describe: () => adapter,
    async close() {
      await browser.close();
      await server.close();
    },
  };
}

// ---- the measurements --------------------------------------------------------------------------

/** The longest prefix of STORY (repeated as needed) of at most `target` prompt tokens, BOS included. */
async function buildPrompt(host: Host, target: number): Promise<{ prompt: string; tokens: number }> {
  const words = (STORY + ' ' + STORY).split(' ');
  let best = { prompt: '', tokens: 0 };
  let lo = 1;
  let hi = words.length;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const prompt = words.slice(0, mid).join(' ');
    const tokens = await host.countTokens(prompt);
    if (tokens <= target) {
      best = { prompt, tokens };
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

async function measure(host: Host, runs: number, prompt: string): Promise<HostFigures> {
  const loads: number[] = [];
  for (let i = 0; i < runs; i++) {
    loads.push(await host.load());
    log(`${host.name}: load ${i + 1}/${runs}: ${loads.at(-1)!.toFixed(0)} ms`);
  }
  const prefillBody = { model: MODEL_ID, prompt, max_tokens: 1, temperature: 0 };
  const decodeBody = { model: MODEL_ID, prompt: DECODE_PROMPT, max_tokens: DECODE_TOKENS, temperature: 0 };
  // Warm-up: pipelines compile on first use.
  await host.run(prefillBody);
  await host.run({ ...decodeBody, max_tokens: 8 });

  const ttft: number[] = [];
  const prefillTps: number[] = [];
  let prefillTokens = 0;
  for (let i = 0; i < runs; i++) {
    const t = await host.run(prefillBody);
    prefillTokens = t.promptTokens;
    ttft.push(t.firstTokenMs);
    prefillTps.push(t.promptTokens / (t.firstTokenMs / 1000));
    log(`${host.name}: prefill ${i + 1}/${runs}: ${t.promptTokens} tokens, first token after ${t.firstTokenMs.toFixed(0)} ms`);
  }

  const decodeTokens: number[] = [];
  const decodeTps: number[] = [];
  let finish: string | null = null;
  for (let i = 0; i < runs; i++) {
    const t = await host.run(decodeBody);
    const tokens = t.completionTokens >= 0 ? t.completionTokens : t.textChunks;
    finish = t.finishReason;
    decodeTokens.push(tokens);
    // Tokens after the first, over the time between the first and the last.
    decodeTps.push((tokens - 1) / ((t.lastTokenMs - t.firstTokenMs) / 1000));
    log(`${host.name}: decode ${i + 1}/${runs}: ${tokens} tokens (${t.finishReason}), ${decodeTps.at(-1)!.toFixed(1)} tok/s`);
  }

  return {
    adapter: host.describe(),
    load_ms: round(median(loads)),
    ttft_ms: round(median(ttft)),
    prefill_prompt_tokens: prefillTokens,
    prefill_tokens_per_s: round(median(prefillTps)),
    decode_tokens: median(decodeTokens),
    decode_finish_reason: finish,
    decode_tokens_per_s: round(median(decodeTps)),
    runs: {
      load_ms: loads.map((x) => round(x)),
      ttft_ms: ttft.map((x) => round(x)),
      prefill_tokens_per_s: prefillTps.map((x) => round(x)),
      decode_tokens: decodeTokens,
      decode_tokens_per_s: decodeTps.map((x) => round(x)),
    },
  };
}

function table(results: Partial<Record<Host['name'], HostFigures>>): string {
  const header = ['host', 'adapter', 'load ms', 'TTFT ms', `prefill tok/s`, 'decode tok/s', 'decoded'];
  const rows = Object.entries(results).map(([name, f]) => [
    name,
    f.adapter || '?',
    f.load_ms.toFixed(0),
    f.ttft_ms.toFixed(0),
    `${f.prefill_tokens_per_s.toFixed(0)} (${f.prefill_prompt_tokens} tok)`,
    f.decode_tokens_per_s.toFixed(1),
    `${f.decode_tokens} tok${f.decode_finish_reason === 'stop' ? ' (EOS)' : ''}`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      'node-only': { type: 'boolean', default: false },
      'browser-only': { type: 'boolean', default: false },
      'real-shapes': { type: 'boolean', default: false },
      models: { type: 'string', default: 'smollm2,llama3' },
      storages: { type: 'string', default: 'f32,f16,q8_0,q4_0' },
      'prefill-tokens': { type: 'string', default: '64' },
      'decode-tokens': { type: 'string', default: '16' },
      shape: { type: 'string', default: 'real' },
    },
  });
  if (values['real-shapes']) {
    const options = {
      models: values.models.split(',') as Family[],
      storages: values.storages.split(',') as WeightStorage[],
      prefillTokens: Number(values['prefill-tokens']),
      decodeTokens: Number(values['decode-tokens']),
      shape: values.shape as Shape,
    };
    const figures = await runRealShapes(options);
    console.log(`random models at ${options.shape} shapes in Node; peaks while loading, above the figure before the load; ` +
      `prefill with a ~${options.prefillTokens}-token prompt, decode with max_tokens ${options.decodeTokens}, temperature 0`);
    console.log(realShapesTable(figures));
    console.log(JSON.stringify({ real_shapes: options, results: figures }));
    return;
  }
  const runs = Math.max(1, Number(values.runs));
  const hostMakers: (() => Promise<Host>)[] = [];
  if (!values['browser-only']) hostMakers.push(nodeHost);
  if (!values['node-only']) hostMakers.push(chromiumHost);

  const results: Partial<Record<Host['name'], HostFigures>> = {};
  let prompt: { prompt: string; tokens: number } | undefined;
  for (const make of hostMakers) {
    const host = await make();
    try {
      if (!prompt) {
        await host.load();
        prompt = await buildPrompt(host, PREFILL_TOKENS);
        log(`prefill prompt: ${prompt.tokens} tokens`);
      }
      results[host.name] = await measure(host, runs, prompt.prompt);
    } finally {
      await host.close();
    }
  }

  console.log(`stories260K, medians of ${runs} run${runs === 1 ? "" : "s"}; TTFT and prefill with a ${prompt?.tokens}-token prompt, ` +
    `decode with max_tokens ${DECODE_TOKENS}, temperature 0 ("decoded": tokens counted from usage)`);
  console.log(table(results));
  console.log(
    JSON.stringify({
      model: MODEL_ID,
      runs,
      prefill_prompt: prompt?.prompt,
      decode: { prompt: DECODE_PROMPT, max_tokens: DECODE_TOKENS, temperature: 0 },
      ...results,
    }),
  );
}

await main();
// Dawn keeps handles open in Node; the figures are printed, so leave now.
process.exit(0);
