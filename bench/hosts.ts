// Where `npm run bench` runs webgpu-llama: in Node (Dawn, engine.complete) and in headless
// Chromium (the bench page, fetch through the shim), behind one interface; plus the browser
// session itself (vite serving demo/ and the repo, Chromium with WebGPU), which the wllama side
// shares.
import { createServer as createNetServer } from 'node:net';
import type { Browser, Page } from '@playwright/test';
import type { ViteDevServer } from 'vite';
import type { CompletionRequest, Engine } from '../src/index.ts';
import type { GpuCounters } from '../src/gpu/counters.ts';
import type { RunTiming } from './measure.ts';
import type { ProbeFigures, ProbeOptions } from './probes.ts';
import { ROOT, type BenchCase } from './workload.ts';

export type HostName = 'node' | 'chromium';

/** A run's timing with the device's counters before the request, at its first token and at its end. */
export type CountedRun = RunTiming<GpuCounters> & { atStart: GpuCounters };

export interface Host {
  name: HostName;
  /** Loads the case's model afresh (the previous one is freed first). */
  load(c: BenchCase): Promise<{ loadMs: number; adapter: string }>;
  run(body: CompletionRequest): Promise<CountedRun>;
  countTokens(text: string): Promise<number>;
  unload(): Promise<void>;
  probes(options: ProbeOptions): Promise<ProbeFigures & { adapter: string }>;
  close(): Promise<void>;
}

const log = (message: string) => process.stderr.write(message + '\n');

// ---- Node --------------------------------------------------------------------------------------

export async function nodeHost(): Promise<Host> {
  const { loadModelFromPath } = await import('../src/node/index.ts');
  const { nodeGpuContext } = await import('../src/node/gpu.ts');
  const { gpuCounters } = await import('../src/gpu/counters.ts');
  const { timeChunks } = await import('./measure.ts');
  const { runProbes } = await import('./probes.ts');
  const ctx = await nodeGpuContext({ log });
  const adapter = [ctx.adapter.vendor, ctx.adapter.architecture, ctx.adapter.description].filter(Boolean).join(' ');
  let engine: Engine | undefined;
  const unload = async () => {
    engine?.unload();
    engine = undefined;
  };
  return {
    name: 'node',
    async load(c) {
      await unload();
      const start = performance.now();
      const storage = c.storage === 'gguf' ? {} : { weightStorage: c.storage };
      engine = await loadModelFromPath(c.path, { id: c.id, contextLength: c.contextLength, ...storage });
      return { loadMs: performance.now() - start, adapter };
    },
    async run(body) {
      if (!engine) throw new Error('no model loaded');
      const snapshot = () => gpuCounters(ctx.device);
      const atStart = snapshot();
      const start = performance.now();
      const chunks = await engine.complete({ ...body, stream: true, stream_options: { include_usage: true } });
      return { ...(await timeChunks(start, chunks, snapshot)), atStart };
    },
    countTokens: async (text) => engine!.generator.tokenizer.encode(text).length,
    unload,
    probes: async (options) => ({ adapter, ...(await runProbes(ctx, options, (m) => log(`node probe: ${m}`))) }),
    close: unload,
  };
}

// ---- the browser session -----------------------------------------------------------------------

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

export interface BrowserSession {
  browser: Browser;
  origin: string;
  version: string;
  /** A fresh page at `path` (e.g. /bench.html), with its errors and console forwarded to stderr. */
  open(path: string, ready: string): Promise<Page>;
  close(): Promise<void>;
}

/** vite (the demo's config: its bench pages are cross-origin isolated) and a headless Chromium with WebGPU. */
export async function startBrowser(): Promise<BrowserSession> {
  const { createServer } = await import('vite');
  const { chromium } = await import('@playwright/test');
  const { CHROMIUM_PATH, WEBGPU_ARGS } = await import('../test/browser/chromium.ts');
  const port = await freePort();
  const server: ViteDevServer = await createServer({
    configFile: `${ROOT}vite.config.ts`,
    logLevel: 'warn',
    server: { host: '127.0.0.1', port, strictPort: true, watch: null, ws: false },
  });
  await server.listen();
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: WEBGPU_ARGS, headless: true });
  const origin = `http://127.0.0.1:${port}`;
  return {
    browser,
    origin,
    version: browser.version(),
    async open(path, ready) {
      const page = await browser.newPage();
      page.on('pageerror', (error) => log(`chromium: page error: ${error.message}`));
      page.on('console', (message) => {
        const text = message.text();
        // vite's client cannot reach its HMR socket (the bench turns it off): noise. Failed
        // requests are logged with their URL below instead of the console's bare message.
        if (/WebSocket|\[vite\]|Failed to load resource/.test(text)) return;
        if (message.type() === 'error' || text.startsWith('probe:')) log(`chromium: ${text}`);
      });
      page.on('response', (response) => {
        // The loader asks for a sharded checkpoint's index first, and for a chat template file beside
        // the tokenizer's: a single-file model without one has neither.
        const expected = /\/favicon\.ico$|\.safetensors\.index\.json$|\/chat_template\.jinja$/.test(response.url()) && response.status() === 404;
        if (response.status() >= 400 && !expected) log(`chromium: HTTP ${response.status()} for ${response.url()}`);
      });
      await page.goto(origin + path);
      await page.waitForFunction((name) => name in window, ready);
      return page;
    },
    async close() {
      await browser.close();
      await server.close();
    },
  };
}

// ---- Chromium ----------------------------------------------------------------------------------

/** webgpu-llama in the bench page (demo/bench.ts), requests sent with fetch through the shim. */
export async function chromiumHost(session: BrowserSession): Promise<Host> {
  const page = await session.open('/bench.html', 'bench');
  const bench = <T>(fn: string, ...args: unknown[]): Promise<T> =>
    page.evaluate(([f, a]) => (window as any).bench[f as string](...(a as unknown[])) as Promise<T>, [fn, args] as const);
  return {
    name: 'chromium',
    async load(c) {
      const storage = c.storage === 'gguf' ? {} : { weightStorage: c.storage };
      return bench('load', c.url, { id: c.id, contextLength: c.contextLength, ...storage });
    },
    run: (body) => bench<CountedRun>('run', body),
    countTokens: (text) => bench('countTokens', text),
    unload: () => bench('unload'),
    probes: (options) => bench('probes', options),
    close: () => page.close(),
  };
}
