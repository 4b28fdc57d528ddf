// The browser weight cache (src/io/cache.ts) over an in-memory Cache Storage: what it records
// of a missing file. (test/browser/cache.spec.ts runs it in Chromium.)
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MODELS_CACHE, withWeightCache } from '../../src/io/cache.ts';
import { filesFromUrl } from '../../src/io/files.ts';

/** Cache Storage in memory: what cache.ts uses of it. */
class MemoryCache {
  readonly entries = new Map<string, { body: Uint8Array; headers: [string, string][] }>();
  async match(request: RequestInfo | URL) {
    const entry = this.entries.get(String(request instanceof Request ? request.url : request));
    return entry ? new Response(entry.body.slice(), { status: 200, headers: entry.headers }) : undefined;
  }
  async put(request: RequestInfo | URL, response: Response) {
    const body = new Uint8Array(await response.arrayBuffer());
    this.entries.set(String(request instanceof Request ? request.url : request), { body, headers: [...response.headers] });
  }
  async delete(request: RequestInfo | URL) {
    return this.entries.delete(String(request instanceof Request ? request.url : request));
  }
  async keys() {
    return [...this.entries.keys()].map((url) => new Request(url));
  }
}

class MemoryCacheStorage {
  readonly caches = new Map<string, MemoryCache>();
  async open(name: string) {
    if (!this.caches.has(name)) this.caches.set(name, new MemoryCache());
    return this.caches.get(name)!;
  }
}

const MODEL = 'https://example.com/m/';

/** A server whose files can change between loads; every request is counted by file name. */
function server(files: Map<string, string>) {
  const asked: string[] = [];
  const fetchImpl = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const name = new URL(String(input)).pathname.slice(3);
    asked.push(name);
    const text = files.get(name);
    if (text === undefined) return new Response('not found', { status: 404 });
    const bytes = new TextEncoder().encode(text);
    if (init?.method === 'HEAD') return new Response(null, { status: 200, headers: { 'content-length': String(bytes.length) } });
    return new Response(bytes, { status: 200 });
  }) as typeof fetch;
  return { fetchImpl, asked };
}

describe('weight cache: missing files', () => {
  let storage: MemoryCacheStorage;
  beforeEach(() => {
    storage = new MemoryCacheStorage();
    (globalThis as { caches?: unknown }).caches = storage;
  });
  afterEach(() => {
    delete (globalThis as { caches?: unknown }).caches;
  });

  const open = (fetchImpl: typeof fetch) => withWeightCache(filesFromUrl(MODEL, fetchImpl), MODEL, { fetch: fetchImpl });
  const text = async (source: { read(o: number, n: number): Promise<Uint8Array>; size: number } | null) =>
    source && new TextDecoder().decode(await source.read(0, source.size));

  it('a needed file found missing is asked of the network again on the next load', async () => {
    const files = new Map<string, string>();
    const { fetchImpl, asked } = server(files);
    expect(await open(fetchImpl).open('config.json')).toBeNull();
    files.set('config.json', '{"fixed": true}'); // the server is fixed
    asked.length = 0;
    expect(await text(await open(fetchImpl).open('config.json'))).toBe('{"fixed": true}');
    expect(asked).toContain('config.json');
    // Now cached: a third load reads no network.
    asked.length = 0;
    expect(await text(await open(fetchImpl).open('config.json'))).toBe('{"fixed": true}');
    expect(asked).toEqual([]);
  });

  it('an optional file found missing is recorded, and not asked again', async () => {
    const { fetchImpl, asked } = server(new Map());
    expect(await open(fetchImpl).open('generation_config.json', { optional: true })).toBeNull();
    asked.length = 0;
    expect(await open(fetchImpl).open('generation_config.json', { optional: true })).toBeNull();
    expect(asked).toEqual([]);
  });

  it("a needed file an older manifest records as missing is asked of the network", async () => {
    const models = await storage.open(MODELS_CACHE);
    const manifest = { id: 'm', url: MODEL, files: { 'config.json': null }, updated: 1 };
    await models.put(MODEL, new Response(JSON.stringify(manifest)));
    const { fetchImpl } = server(new Map([['config.json', '{}']]));
    expect(await text(await open(fetchImpl).open('config.json'))).toBe('{}');
  });
});
