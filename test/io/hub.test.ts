// Hugging Face repo ids as a model source: URL resolution, and loading stories260K through a local
// HTTP server that answers like the hub (`/{org}/{name}/resolve/{revision}/{file}`, HEAD and
// Range requests). No test reaches the network: `host` points at the local server. Node has no
// Cache Storage, so the weight cache is off here; its logic is also run against an in-memory
// stand-in (the real one is tested in Chromium by test/browser/cache.spec.ts). A gated repo
// answers 401 without the access token and redirects its weights to a "CDN" on another origin,
// as the hub does: the token goes to the model's own URLs on the hub, and nowhere else (the CLI
// reads it from HF_TOKEN).
import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Engine } from '../../src/api/engine.ts';
import { filesFromUrl } from '../../src/io/files.ts';
import { filesFromHub, hubUrl, isHubSource } from '../../src/io/hub.ts';
import { runCli } from '../../src/node/cli.ts';
import { deleteCachedModel, listCachedModels, loadModel, resolveModelSource, weightCacheAvailable } from '../../src/node/index.ts';

const reference = JSON.parse(readFileSync(new URL('../fixtures/stories260K-reference.json', import.meta.url), 'utf8'));

/** Repo paths the local "hub" serves: `/{repo}/resolve/main/` -> a folder on disk. */
const REPOS: Record<string, string> = {
  'org/stories260K': 'public/models/stories260K/hf',
  'org/stories260K-GGUF': 'public/models/stories260K',
  'org/gated': 'public/models/stories260K/hf',
};
/** The token that opens org/gated. */
const TOKEN = 'hf_FakeTokenForTests0123456789';

let server: Server;
let host: string;
const requests: { method: string; path: string; range?: string; authorization?: string }[] = [];
/** The other origin org/gated's weights redirect to; it serves stories260K's files by name. */
let cdn: Server;
let cdnHost: string;
const cdnRequests: { path: string; authorization?: string }[] = [];

/** Answers `file` as a static file server does: HEAD, Range and plain GET requests. */
function sendFile(req: IncomingMessage, res: ServerResponse, file: string | null): void {
  if (!file || !existsSync(file) || !statSync(file).isFile()) {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('Entry not found');
    return;
  }
  const size = statSync(file).size;
  const range = req.headers.range?.match(/^bytes=(\d+)-(\d*)$/);
  if (range) {
    const start = Number(range[1]);
    const end = range[2] ? Math.min(Number(range[2]), size - 1) : size - 1;
    if (start >= size) {
      res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
      return;
    }
    res.writeHead(206, { 'content-length': end - start + 1, 'content-range': `bytes ${start}-${end}/${size}`, 'accept-ranges': 'bytes' });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file, { start, end }).pipe(res);
    return;
  }
  res.writeHead(200, { 'content-length': size, 'accept-ranges': 'bytes' });
  if (req.method === 'HEAD') res.end();
  else createReadStream(file).pipe(res);
}

beforeAll(async () => {
  server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url!, 'http://x').pathname);
    requests.push({ method: req.method!, path, range: req.headers.range, authorization: req.headers.authorization });
    const m = path.match(/^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/);
    const dir = m && m[2] === 'main' ? REPOS[m[1]] : undefined;
    const file = dir && !m![3].split('/').includes('..') ? join(dir, m![3]) : null;
    if (m?.[1] === 'org/gated') {
      if (req.headers.authorization !== `Bearer ${TOKEN}`) {
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"Access to model org/gated is restricted. You must have access to it and be authenticated to access it."}');
        return;
      }
      if (m[3] === 'model.safetensors') {
        res.writeHead(302, { location: `${cdnHost}/hf/model.safetensors?signature=x` }).end();
        return;
      }
    }
    sendFile(req, res, file);
  });
  cdn = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url!, 'http://x').pathname);
    cdnRequests.push({ path, authorization: req.headers.authorization });
    sendFile(req, res, /^\/(hf\/)?[\w.]+$/.test(path) ? join('public/models/stories260K', path) : null);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  await new Promise<void>((resolve) => cdn.listen(0, '127.0.0.1', resolve));
  host = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  cdnHost = `http://127.0.0.1:${(cdn.address() as AddressInfo).port}`;
});

const engines: Engine[] = [];
afterAll(async () => {
  engines.forEach((e) => e.unload());
  await new Promise((resolve) => server?.close(resolve));
  await new Promise((resolve) => cdn?.close(resolve));
});

describe('hub sources', () => {
  it('resolve to {host}/{repo}/resolve/{revision}/{file}', () => {
    expect(hubUrl({ repo: 'HuggingFaceTB/SmolLM2-135M' })).toBe('https://huggingface.co/HuggingFaceTB/SmolLM2-135M/resolve/main/');
    expect(hubUrl({ repo: 'TheBloke/TinyLlama-1.1B-Chat-v1.0-GGUF', file: 'tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf' })).toBe(
      'https://huggingface.co/TheBloke/TinyLlama-1.1B-Chat-v1.0-GGUF/resolve/main/tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf',
    );
    expect(hubUrl({ repo: 'a/b', revision: 'refs/pr/1', host: 'https://hf-mirror.com/' })).toBe('https://hf-mirror.com/a/b/resolve/refs%2Fpr%2F1/');
    expect(hubUrl({ repo: 'a/b', file: 'sub dir/m.gguf', host: 'http://127.0.0.1:9/mirror' })).toBe('http://127.0.0.1:9/mirror/a/b/resolve/main/sub%20dir/m.gguf');
    expect(() => hubUrl({ repo: '../etc' })).toThrow(/repo id/);
    expect(() => hubUrl({ repo: 'a/b/c' })).toThrow(/repo id/);
    expect(() => hubUrl({ repo: 'a/b', file: 'config.json' })).toThrow(/\.gguf/);
    expect(() => hubUrl({ repo: 'a/b', host: 'not a url' })).toThrow(/host/);

    expect(isHubSource({ repo: 'a/b' })).toBe(true);
    expect(isHubSource('a/b')).toBe(false);
    const folder = resolveModelSource({ repo: 'HuggingFaceTB/SmolLM2-135M' });
    expect(folder.id).toBe('SmolLM2-135M');
    expect(folder.ggufFile).toBeUndefined();
    const gguf = resolveModelSource({ repo: 'a/b-GGUF', file: 'b.Q4_K_M.gguf' });
    expect(gguf.id).toBe('b.Q4_K_M');
    expect(gguf.ggufFile).toBe('b.Q4_K_M.gguf');
  });

  it('Node has no weight cache: nothing is cached, listed or deleted', async () => {
    expect(weightCacheAvailable()).toBe(false);
    expect(await listCachedModels()).toEqual([]);
    expect(await deleteCachedModel('stories260K')).toBe(0);
  });

  for (const [layout, source] of [
    ['Hugging Face folder', { repo: 'org/stories260K' }],
    ['GGUF file in a repo', { repo: 'org/stories260K-GGUF', file: 'stories260K.gguf', revision: 'main' }],
  ] as const) {
    it(`loads stories260K from a local hub (${layout}) and reproduces the reference`, async () => {
      requests.length = 0;
      const engine = await loadModel({ ...source, host });
      engines.push(engine);
      expect(engine.info.id).toBe('stories260K');
      expect(engine.info.format).toBe(layout === 'GGUF file in a repo' ? 'gguf' : 'safetensors');
      // Every request went to the repo's resolve URLs on the configured host.
      expect(requests.length).toBeGreaterThan(0);
      for (const r of requests) expect(r.path.startsWith(`/${source.repo}/resolve/main/`)).toBe(true);
      if (layout === 'Hugging Face folder') {
        expect(requests.some((r) => r.path.endsWith('/model.safetensors') && r.range)).toBe(true);
        expect(requests.some((r) => r.path.endsWith('/tokenizer.json'))).toBe(true);
      }

      const out: number[] = [];
      for await (const t of engine.generator.generate({
        promptTokens: reference.prompt_token_ids,
        maxTokens: reference.completion_token_ids.length,
        sampling: { temperature: 0, topP: 1 },
        stopTokenIds: engine.generator.tokenizer.eosIds,
      })) {
        out.push(t);
      }
      expect(out).toEqual(reference.completion_token_ids);
    });
  }

  it('a missing repo is a clear error naming the file', async () => {
    await expect(loadModel({ repo: 'org/missing', host })).rejects.toThrow(/config\.json|not found|missing/i);
  });
});

/** An in-memory stand-in for the browser's CacheStorage (what the weight cache uses of it). */
function fakeCacheStorage(options: { failPut?: boolean } = {}) {
  const stores = new Map<string, Map<string, { body: Blob; headers: Headers }>>();
  const open = async (cacheName: string) => {
    let store = stores.get(cacheName);
    if (!store) stores.set(cacheName, (store = new Map()));
    const s = store;
    const key = (r: RequestInfo | URL) => (typeof r === 'string' ? r : r instanceof URL ? r.href : r.url);
    return {
      async match(r: RequestInfo | URL) {
        const e = s.get(key(r));
        return e ? new Response(e.body, { headers: e.headers }) : undefined;
      },
      async put(r: RequestInfo | URL, response: Response) {
        if (options.failPut) throw new DOMException('simulated: the quota has been exceeded', 'QuotaExceededError');
        s.set(key(r), { body: await response.blob(), headers: response.headers });
      },
      async delete(r: RequestInfo | URL) {
        return s.delete(key(r));
      },
      async keys() {
        return [...s.keys()].map((url) => new Request(url));
      },
    };
  };
  return { open, stores };
}

describe('the weight cache, where there is Cache Storage (a stand-in for the browser\'s)', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.restoreAllMocks();
  });

  it('the second load of a repo reads no network; list and delete', async () => {
    vi.stubGlobal('caches', fakeCacheStorage());
    expect(weightCacheAvailable()).toBe(true);
    requests.length = 0;
    const progress: number[] = [];
    engines.push(await loadModel({ repo: 'org/stories260K', host }, { onProgress: (p) => progress.push(p.totalBytes) }));
    expect(requests.some((r) => r.path.endsWith('/model.safetensors') && !r.range && r.method === 'GET')).toBe(true);
    const weightsSize = statSync('public/models/stories260K/hf/model.safetensors').size;
    expect(progress).toContain(weightsSize); // the download into the cache is reported

    requests.length = 0;
    engines.push(await loadModel({ repo: 'org/stories260K', host }));
    expect(requests).toEqual([]);

    const [model, ...rest] = await listCachedModels();
    expect(rest).toEqual([]);
    expect(model.id).toBe('stories260K');
    expect(model.url).toBe(`${host}/org/stories260K/resolve/main/`);
    expect(model.bytes).toBe(model.files.reduce((sum, f) => sum + statSync(`public/models/stories260K/hf/${f}`).size, 0));
    expect(await deleteCachedModel('stories260K')).toBe(1);
    expect(await listCachedModels()).toEqual([]);

    requests.length = 0;
    engines.push(await loadModel({ repo: 'org/stories260K', host }, { cache: false }));
    expect(requests.length).toBeGreaterThan(0);
    expect(await listCachedModels()).toEqual([]);
  });

  it('a failing cache loads from the network with one warning', async () => {
    vi.stubGlobal('caches', fakeCacheStorage({ failPut: true }));
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    engines.push(await loadModel({ repo: 'org/stories260K-GGUF', file: 'stories260K.gguf', host }));
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0][0])).toMatch(/weight cache failed.*QuotaExceededError/);
    expect(await listCachedModels()).toEqual([]);

    vi.stubGlobal('caches', { open: () => Promise.reject(new Error('simulated: refused')) });
    warn.mockClear();
    engines.push(await loadModel({ repo: 'org/stories260K', host }));
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0][0])).toMatch(/simulated: refused/);
  });
});

describe('access tokens (gated repos)', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.restoreAllMocks();
  });

  it("go as Authorization: Bearer with every request for the model's files, and only there", async () => {
    const seen: { url: string; method: string; authorization: string | null }[] = [];
    const fake: typeof fetch = async (input, init) => {
      seen.push({ url: String(input), method: init?.method ?? 'GET', authorization: new Headers(init?.headers).get('authorization') });
      return new Response('{}', { status: 200, headers: { 'content-length': '2' } });
    };
    const hub = filesFromHub({ repo: 'meta-llama/Llama-3.2-1B' }, fake, { accessToken: TOKEN });
    expect(new TextDecoder().decode(await (await hub.open('config.json'))!.read(0, 2))).toBe('{}');
    // A single .gguf URL has no config.json: nothing is asked for it.
    expect(await filesFromUrl('https://example.com/m.gguf', fake, { accessToken: TOKEN }).open('config.json')).toBeNull();
    await filesFromUrl('https://example.com/m/', fake).open('config.json');
    const config = 'https://huggingface.co/meta-llama/Llama-3.2-1B/resolve/main/config.json';
    expect(seen).toEqual([
      { url: config, method: 'HEAD', authorization: `Bearer ${TOKEN}` },
      { url: config, method: 'GET', authorization: `Bearer ${TOKEN}` },
      { url: 'https://example.com/m/config.json', method: 'HEAD', authorization: null },
    ]);

    // loadModel's sources, with and without the weight cache.
    seen.length = 0;
    vi.stubGlobal('fetch', fake);
    await resolveModelSource({ repo: 'a/b' }, { accessToken: TOKEN, cache: false }).open('config.json');
    vi.stubGlobal('caches', fakeCacheStorage());
    await resolveModelSource('https://example.com/c/', { accessToken: TOKEN }).open('config.json');
    await resolveModelSource('https://example.com/d/').open('config.json');
    expect(seen.map((r) => [r.url, r.authorization])).toEqual([
      ['https://huggingface.co/a/b/resolve/main/config.json', `Bearer ${TOKEN}`],
      ['https://example.com/c/config.json', `Bearer ${TOKEN}`], // its size
      ['https://example.com/c/config.json', `Bearer ${TOKEN}`], // the download into the cache
      ['https://example.com/d/config.json', null],
      ['https://example.com/d/config.json', null],
    ]);
  });

  it('open a gated repo: the hub gets the token, the CDN it redirects the weights to does not', async () => {
    requests.length = 0;
    cdnRequests.length = 0;
    const engine = await loadModel({ repo: 'org/gated', host }, { accessToken: TOKEN });
    engines.push(engine);
    expect(engine.info.id).toBe('gated');
    expect(requests.length).toBeGreaterThan(0);
    for (const r of requests) expect(r.authorization, r.path).toBe(`Bearer ${TOKEN}`);
    expect(cdnRequests.length).toBeGreaterThan(0);
    for (const r of cdnRequests) expect(r.authorization, r.path).toBeUndefined();

    await expect(loadModel({ repo: 'org/gated', host })).rejects.toThrow(/config\.json: HTTP 401/);
  });

  it('are kept out of the weight cache: its keys, manifests and entries', async () => {
    const storage = fakeCacheStorage();
    vi.stubGlobal('caches', storage);
    engines.push(await loadModel({ repo: 'org/gated', host }, { accessToken: TOKEN }));
    let stored = '';
    for (const [name, entries] of storage.stores) {
      for (const [key, entry] of entries) stored += `${name} ${key} ${JSON.stringify([...entry.headers])} ${await entry.body.text()}\n`;
    }
    expect(stored).toContain(`${host}/org/gated/resolve/main/config.json`);
    expect(stored).not.toContain(TOKEN);
    expect((await listCachedModels()).map((m) => m.url)).toEqual([`${host}/org/gated/resolve/main/`]);
  });

  it('that could not be a header value are refused without being repeated', async () => {
    const error = await loadModel({ repo: 'org/gated', host }, { accessToken: 'hf_secret with space\n' }).catch((e: Error) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/access token/);
    expect((error as Error).message).not.toContain('hf_secret');
  });
});

describe('the CLI on the hub', () => {
  function cli(env: Record<string, string>) {
    const out: string[] = [];
    const err: string[] = [];
    const io = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, env };
    return { out, err, io };
  }
  const greedy = ['--prompt', 'Once upon a time', '--max-tokens', '5', '--temperature', '0'];

  it('reads hf:org/name from $HF_ENDPOINT, with $HF_TOKEN', async () => {
    requests.length = 0;
    cdnRequests.length = 0;
    const t = cli({ HF_TOKEN: TOKEN, HF_ENDPOINT: host });
    expect(await runCli(['complete', '--model', 'hf:org/gated', ...greedy], t.io)).toBe(0);
    expect(t.err.join('')).toBe('');
    const text = t.out.join('').replace(/\n$/, '');
    expect(text.length).toBeGreaterThan(0);
    expect(reference.completion_text.startsWith(text)).toBe(true);
    for (const r of requests) expect(r.authorization, r.path).toBe(`Bearer ${TOKEN}`);
    for (const r of cdnRequests) expect(r.authorization, r.path).toBeUndefined();
    expect(t.out.join('') + t.err.join('')).not.toContain(TOKEN);
  });

  it('says what to do when a gated repo answers 401', async () => {
    const t = cli({ HF_ENDPOINT: host });
    expect(await runCli(['complete', '--model', `${host}/org/gated`, ...greedy], t.io)).toBe(1);
    expect(t.err.join('')).toMatch(/failed to load .*org\/gated: config\.json: HTTP 401 .*set HF_TOKEN/);
  });

  it('sends HF_TOKEN to the hub only: a model URL elsewhere gets none', async () => {
    cdnRequests.length = 0;
    const t = cli({ HF_TOKEN: TOKEN, HF_ENDPOINT: host });
    expect(await runCli(['complete', '--model', `${cdnHost}/stories260K.gguf`, ...greedy], t.io)).toBe(0);
    expect(reference.completion_text.startsWith(t.out.join('').replace(/\n$/, ''))).toBe(true);
    expect(cdnRequests.length).toBeGreaterThan(0);
    for (const r of cdnRequests) expect(r.authorization, r.path).toBeUndefined();
  });
});
