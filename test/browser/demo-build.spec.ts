// The built demo (`npm run build:demo`, dist-demo/) as any static host serves it: a plain file
// server written here (node:http and node:fs: MIME types by extension, HEAD and byte ranges, as
// static hosts answer them; no Vite), with the folder under a sub-path. The page loads its
// embedded model from beside itself, then runs a completion and a chat, and asks the server for
// nothing outside its folder.
import { expect, test, type Page } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { reference } from './reference.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const DIST = join(REPO, 'dist-demo');
/** Where the folder is served: not the site root, as on a project page of a static host. */
const PREFIX = '/some/sub/path/';

const MIME: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.wasm': 'application/wasm',
  '.txt': 'text/plain; charset=utf-8',
};

interface Served {
  status: number;
  path: string;
  type: string;
}

/** Serves `root` at `prefix` on 127.0.0.1 (a secure context, as WebGPU needs); records every answer. */
async function staticServer(root: string, prefix: string): Promise<{ server: Server; origin: string; served: Served[] }> {
  const served: Served[] = [];
  const server = createServer((req, res) => {
    const answer = (status: number, type = 'text/plain; charset=utf-8', headers: Record<string, string | number> = {}) => {
      served.push({ status, path: path, type });
      res.writeHead(status, { 'Content-Type': type, ...headers });
    };
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    if (!path.startsWith(prefix) || (req.method !== 'GET' && req.method !== 'HEAD')) {
      answer(404);
      res.end('not found');
      return;
    }
    let file = normalize(join(root, path.slice(prefix.length)));
    if (file !== root && !file.startsWith(root + sep)) {
      answer(403);
      res.end('forbidden');
      return;
    }
    if (existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
    if (!existsSync(file) || !statSync(file).isFile()) {
      answer(404);
      res.end('not found');
      return;
    }
    const size = statSync(file).size;
    const type = MIME[extname(file)] ?? 'application/octet-stream';
    const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
    let start = 0;
    let end = size - 1;
    if (range && (range[1] || range[2])) {
      if (range[1]) {
        start = Number(range[1]);
        if (range[2]) end = Math.min(Number(range[2]), size - 1);
      } else {
        start = Math.max(0, size - Number(range[2])); // the last N bytes
      }
      if (start > end || start >= size) {
        answer(416, type, { 'Content-Range': `bytes */${size}` });
        res.end();
        return;
      }
      answer(206, type, { 'Content-Length': end - start + 1, 'Content-Range': `bytes ${start}-${end}/${size}`, 'Accept-Ranges': 'bytes' });
    } else {
      answer(200, type, { 'Content-Length': size, 'Accept-Ranges': 'bytes' });
    }
    if (req.method === 'HEAD' || size === 0) res.end();
    else createReadStream(file, { start, end }).pipe(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, origin: `http://127.0.0.1:${port}`, served };
}

let site: Awaited<ReturnType<typeof staticServer>>;

test.beforeAll(async () => {
  // The build, as the README says to run it.
  execFileSync('npm', ['run', 'build:demo'], { cwd: REPO, stdio: 'pipe' });
  site = await staticServer(DIST, PREFIX);
});

test.afterAll(async () => {
  await new Promise((resolve) => site?.server.close(resolve));
});

async function ready(page: Page): Promise<void> {
  await expect(page.locator('body')).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
}

test('the built demo, served as static files under a sub-path, loads its model and runs a completion and a chat', async ({ page }) => {
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  const requested: string[] = [];
  page.on('request', (request) => requested.push(request.url()));

  await page.goto(`${site.origin}${PREFIX}`);
  await ready(page);
  await expect(page.locator('#model-name')).toContainText('stories260K (gguf');

  await test.step('a completion: the reference text', async () => {
    await page.locator('#prompt').fill(reference.prompt);
    await page.locator('#param-max_tokens').fill('32');
    await page.locator('#param-temperature').fill('0');
    await page.locator('#generate').click();
    await expect(page.locator('#output')).toHaveAttribute('data-finish', 'length', { timeout: 240_000 });
    expect(await page.locator('#output .choice-text').first().textContent()).toBe(reference.completion_text);
  });

  await test.step('a chat with the ChatML template', async () => {
    await page.getByRole('button', { name: 'Chat' }).click();
    await page.locator('#chat-param-max_completion_tokens').fill('16');
    await page.getByTestId('chat-input').fill('Tell me about a dog.');
    await page.getByTestId('chat-send').click();
    const log = page.getByTestId('chat-log');
    await expect(log).toHaveAttribute('data-finish', /^(length|stop)$/, { timeout: 240_000 });
    expect(await page.getByTestId('chat-error').textContent()).toBe('');
    await expect(log.locator('.msg[data-role="assistant"] .choice-text')).not.toHaveText('');
  });

  // Everything came from the folder, as files: no dev server, nothing at the site root, no 404.
  const network = requested.filter((url) => /^https?:/.test(url));
  expect(network.length).toBeGreaterThan(0);
  for (const url of network) expect(url.startsWith(`${site.origin}${PREFIX}`), url).toBe(true);
  expect(site.served.filter((s) => s.status >= 400)).toEqual([]);
  const types = new Set(site.served.map((s) => s.type));
  expect(types).toContain('text/javascript; charset=utf-8');
  expect(types).toContain('text/css; charset=utf-8');
  expect(site.served.some((s) => s.path.endsWith('/models/stories260K/stories260K.gguf'))).toBe(true);
  expect(pageErrors).toEqual([]);
});
