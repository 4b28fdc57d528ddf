// The built package in a page with no bundler: dist/ is built, then served with the pages under
// demo/test-pages/dist-* by a plain static file server (no Vite, nothing transformed), as a site
// without a build step would serve it. Each page imports only dist/, by relative path (not by an
// import map's bare name, which Vite's dependency scan of demo/ would fail to resolve): the main
// thread streams a completion; loadModelInWorker finds dist/worker.js; a service worker imports
// dist/service-worker.js and answers a page that installed nothing. And an application built by
// Vite from `import ... from 'webgpu-llama'`: loadModelInWorker's default worker is bundled into
// the application's build.
import { execFileSync } from 'node:child_process';
import { createReadStream, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test, type Page } from '@playwright/test';
import { reference } from './reference.ts';

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
let origin = 'http://127.0.0.1'; // and the port the OS gives the server
const TYPES: Record<string, string> = { '.html': 'text/html', '.js': 'text/javascript', '.json': 'application/json' };

/** An application that imports the package by name, built by Vite for /app/ (its files, once built). */
let appBuild: string | null = null;

/**
 * /models/* from public/models, /dist/* and /demo/test-pages/dist-* from the repository, /app/*
 * from the application's build; with byte ranges.
 */
function staticServer(): Server {
  return createServer((request, response) => {
    const path = decodeURIComponent(new URL(request.url ?? '/', 'http://localhost').pathname);
    const file = path.startsWith('/models/')
      ? join(repoRoot, 'public', normalize(path))
      : path.startsWith('/dist/') || path.startsWith('/demo/test-pages/dist-')
        ? join(repoRoot, normalize(path))
        : path.startsWith('/app/') && appBuild
          ? join(appBuild, normalize(path.slice('/app/'.length)))
          : null;
    let size: number;
    try {
      if (!file) throw new Error('not served');
      const stat = statSync(file);
      if (!stat.isFile()) throw new Error('not a file');
      size = stat.size;
    } catch {
      response.writeHead(404).end();
      return;
    }
    const headers = { 'content-type': TYPES[extname(file!)] ?? 'application/octet-stream', 'accept-ranges': 'bytes' };
    const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.range ?? '');
    if (range) {
      const start = Number(range[1]);
      const end = range[2] ? Math.min(Number(range[2]), size - 1) : size - 1;
      response.writeHead(206, { ...headers, 'content-length': end - start + 1, 'content-range': `bytes ${start}-${end}/${size}` });
      if (request.method === 'HEAD') response.end();
      else createReadStream(file!, { start, end }).pipe(response);
      return;
    }
    response.writeHead(200, { ...headers, 'content-length': size });
    if (request.method === 'HEAD') response.end();
    else createReadStream(file!).pipe(response);
  });
}

test.describe('the built package in a page with no bundler', () => {
  let server: Server;
  const errors: string[] = [];

  test.beforeAll(async () => {
    test.setTimeout(180_000);
    // The JavaScript of dist/ (npm run build also writes the declarations, which pages do not need).
    execFileSync(process.execPath, [join(repoRoot, 'node_modules/vite/bin/vite.js'), 'build', '--config', 'vite.lib.config.ts', '--logLevel', 'warn'], {
      cwd: repoRoot,
      stdio: 'inherit',
    });
    server = staticServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  test.afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
  });
  test.afterEach(() => {
    expect(errors.splice(0)).toEqual([]);
  });

  async function open(page: Page, path: string): Promise<void> {
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(origin + path);
    await page.waitForFunction(() => 'distReady' in window);
    expect(await page.evaluate(() => (window as any).distReady())).toBe('stories260K');
  }

  /** A completion by plain fetch, as any code in the page would send it. */
  const complete = (page: Page) =>
    page.evaluate(async (prompt) => {
      const response = await fetch('/v1/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'stories260K', prompt, max_tokens: 32, temperature: 0 }),
      });
      return { status: response.status, text: (await response.json()).choices?.[0]?.text };
    }, reference.prompt);

  test('main thread: dist/index.js, loadModel, installFetchShim, a streamed completion', async ({ page }) => {
    const requested: string[] = [];
    page.on('request', (request) => requested.push(new URL(request.url()).pathname));
    await open(page, '/demo/test-pages/dist-plain.html');
    const result = await page.evaluate((prompt) => (window as any).streamCompletion(prompt, 32), reference.prompt);
    expect(result.status).toBe(200);
    expect(result.chunks).toBeGreaterThan(1);
    expect(result.text).toBe(reference.completion_text);
    await expect(page.locator('#output')).toHaveText(reference.completion_text);
    // Only the built files and the model: no source, no dev server.
    const scripts = requested.filter((path) => path.endsWith('.js') || path.endsWith('.ts'));
    expect(scripts.length).toBeGreaterThan(0);
    expect(scripts.every((path) => path.startsWith('/dist/'))).toBe(true);
  });

  test('dedicated Web Worker: loadModelInWorker starts dist/worker.js', async ({ page }) => {
    const workers: string[] = [];
    page.on('worker', (worker) => workers.push(new URL(worker.url()).pathname));
    await open(page, '/demo/test-pages/dist-worker.html');
    expect(workers).toEqual(['/dist/worker.js']);
    expect(await complete(page)).toEqual({ status: 200, text: reference.completion_text });
  });

  test('an application built by Vite: the default worker is bundled with it and starts', async ({ page }) => {
    const app = mkdtempSync(join(tmpdir(), 'webgpu-llama-vite-app-'));
    try {
      mkdirSync(join(app, 'node_modules'));
      symlinkSync(repoRoot, join(app, 'node_modules', 'webgpu-llama')); // as installed: its package.json, its dist/
      writeFileSync(join(app, 'package.json'), JSON.stringify({ type: 'module', private: true }));
      writeFileSync(join(app, 'index.html'), '<!doctype html><title>app</title><script type="module" src="./main.js"></script>\n');
      writeFileSync(
        join(app, 'main.js'),
        [
          "import { loadModelInWorker, installFetchShim } from 'webgpu-llama';",
          "const engine = loadModelInWorker('/models/stories260K/stories260K.gguf', { id: 'stories260K' });",
          'installFetchShim(engine);',
          'window.distReady = async () => (await engine).info.id;',
        ].join('\n'),
      );
      execFileSync(process.execPath, [join(repoRoot, 'node_modules/vite/bin/vite.js'), 'build', '--base', '/app/', '--logLevel', 'warn'], { cwd: app, stdio: 'inherit' });
      appBuild = join(app, 'dist');
      const workers: string[] = [];
      page.on('worker', (worker) => workers.push(new URL(worker.url()).pathname));
      await open(page, '/app/index.html');
      expect(workers).toHaveLength(1);
      expect(workers[0]).toMatch(/^\/app\/assets\/.+\.js$/); // the application's own bundle of the worker
      expect(await complete(page)).toEqual({ status: 200, text: reference.completion_text });
    } finally {
      appBuild = null;
      rmSync(app, { recursive: true, force: true });
    }
  });

  test('Service Worker: a sw.js that imports dist/service-worker.js answers every page', async ({ context }) => {
    const page = await context.newPage();
    await open(page, '/demo/test-pages/dist-sw.html');
    expect(await complete(page)).toEqual({ status: 200, text: reference.completion_text });
    // Another tab of the scope, installing nothing (the static server has no /v1 at all).
    const other = await context.newPage();
    other.on('pageerror', (error) => errors.push(error.message));
    await other.goto(origin + '/demo/test-pages/dist-client.html');
    await other.waitForFunction(() => !!navigator.serviceWorker.controller);
    expect(await complete(other)).toEqual({ status: 200, text: reference.completion_text });
  });
});
