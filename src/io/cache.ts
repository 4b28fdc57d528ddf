// The persistent weight cache of the browser: files of models loaded from URLs (and hub repos)
// are kept in Cache Storage, so the second load of a model reads no network.
//
// Why Cache Storage (not OPFS): it stores a fetch Response as it streams in (`cache.put` consumes
// the body to disk without the page holding it), it answers with disk-backed Blobs that we read
// by byte range (`blob.slice`), it is keyed by URL as our files are, and it works on the main
// thread (OPFS's synchronous, fast API is worker-only; its async writable needs a copy loop).
// It exists in secure contexts (https, http://127.0.0.1, http://localhost); elsewhere, and in
// Node (which has no Cache Storage), loads go to the network uncached.
//
// Layout: cache FILES_CACHE holds each file's full 200 response under its URL; cache
// MODELS_CACHE holds one JSON manifest per model under the model's URL: the files the loader
// asked for, with sizes, and the optional files it found missing (so that files such as
// generation_config.json are not asked of the network again either). A file the model needs is
// never recorded as missing: a 404 or an SPA's HTML page may be a server fixed since, and a
// recorded absence would fail every later load without asking the network.
//
// Any cache failure (no quota, Cache Storage refused, a broken entry) falls back to loading from
// the network uncached, with a console warning: the cache never makes a load fail.
import { blobSource, urlLayout, type ByteSource, type ModelFiles, type OpenOptions } from './files.ts';

export const FILES_CACHE = 'webgpu-llama-files-v1';
export const MODELS_CACHE = 'webgpu-llama-models-v1';

/** One model in the cache, as listCachedModels gives it. */
export interface CachedModel {
  /** The model's default id (its folder or .gguf file name). */
  id: string;
  /** The model's URL: the folder's (ending in `/`) or the .gguf file's. */
  url: string;
  /** Bytes of all its cached files. */
  bytes: number;
  /** The cached files' names. */
  files: string[];
  /** When a file was last added (ms since the epoch). */
  updated: number;
}

interface Manifest {
  id: string;
  url: string;
  /** name -> the cached file, or null: the model has no such file (trusted for optional files only). */
  files: Record<string, { url: string; size: number } | null>;
  updated: number;
}

function cacheStorage(): CacheStorage | null {
  return (globalThis as { caches?: CacheStorage }).caches ?? null;
}

/** Whether this environment has a weight cache (a browser's secure context; never Node). */
export function weightCacheAvailable(): boolean {
  return cacheStorage() !== null;
}

// Manifest updates of one model, one after another (files of a model may be opened concurrently).
const manifestQueues = new Map<string, Promise<unknown>>();

function queued<T>(key: string, task: () => Promise<T>): Promise<T> {
  const previous = manifestQueues.get(key) ?? Promise.resolve();
  const next = previous.then(task, task);
  const settled = next.catch(() => {});
  manifestQueues.set(key, settled);
  void settled.then(() => {
    if (manifestQueues.get(key) === settled) manifestQueues.delete(key);
  });
  return next;
}

async function readManifest(models: Cache, url: string): Promise<Manifest | null> {
  const response = await models.match(url);
  if (!response) return null;
  try {
    const manifest = (await response.json()) as Manifest;
    return manifest && typeof manifest.files === 'object' ? manifest : null;
  } catch {
    return null;
  }
}

function updateManifest(id: string, url: string, name: string, entry: { url: string; size: number } | null): Promise<void> {
  return queued(url, async () => {
    const models = await cacheStorage()!.open(MODELS_CACHE);
    const manifest = (await readManifest(models, url)) ?? { id, url, files: {}, updated: 0 };
    manifest.files[name] = entry;
    manifest.updated = Date.now();
    await models.put(url, new Response(JSON.stringify(manifest), { headers: { 'content-type': 'application/json' } }));
  });
}

/** A cache failure, named for the warning. */
function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name === 'Error' ? '' : `${error.name}: `}${error.message}`;
  return String(error);
}

/**
 * The files of the model at `url`, through the cache: a file found there is read from disk; one
 * that is not is downloaded whole into the cache (streamed, never held in memory) and then read
 * from there. Without Cache Storage this is plain `filesFromUrl`-style network loading.
 */
export function withWeightCache(
  files: ModelFiles,
  url: string,
  options: {
    fetch?: typeof fetch;
    /** Progress of each file's download into the cache (before the loader reads it back from disk). */
    onDownload?: (name: string, loadedBytes: number, totalBytes: number) => void;
  } = {},
): ModelFiles {
  const fetchImpl = options.fetch ?? ((...args) => fetch(...args));
  const onDownload = options.onDownload;
  const layout = urlLayout(url);
  let warned = false;
  const warn = (what: string, error: unknown) => {
    if (warned) return;
    warned = true;
    console.warn(`webgpu-llama: the weight cache failed (${what}: ${describe(error)}); loading ${layout.url} from the network without it.`);
  };

  async function fromCache(name: string, optional: boolean): Promise<{ source: ByteSource | null } | null> {
    const storage = cacheStorage()!;
    const models = await storage.open(MODELS_CACHE);
    const manifest = await readManifest(models, layout.url);
    if (!manifest || !Object.hasOwn(manifest.files, name)) return null;
    const entry = manifest.files[name];
    // A needed file recorded as missing (by an earlier version): ask the network again.
    if (entry === null) return optional ? { source: null } : null;
    const cached = await (await storage.open(FILES_CACHE)).match(entry.url);
    if (!cached) return null; // evicted: fetch it again
    const blob = await cached.blob();
    if (blob.size !== entry.size) return null;
    return { source: blobSource(name, blob) };
  }

  async function store(name: string, fileUrl: string, network: ByteSource): Promise<ByteSource> {
    const storage = cacheStorage()!;
    const estimate = await globalThis.navigator?.storage?.estimate?.().catch(() => undefined);
    if (estimate?.quota !== undefined && estimate.usage !== undefined && network.size > estimate.quota - estimate.usage) {
      throw new DOMException(`${name} needs ${network.size} bytes, ${estimate.quota - estimate.usage} are free`, 'QuotaExceededError');
    }
    const filesCache = await storage.open(FILES_CACHE);
    let response = await fetchImpl(fileUrl);
    if (response.status !== 200) {
      await response.body?.cancel();
      throw new Error(`${name}: HTTP ${response.status} for the full file`);
    }
    if (onDownload && response.body) {
      const total = network.size;
      let loaded = 0;
      let reported = 0;
      const counted = response.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            loaded += chunk.byteLength;
            if (loaded - reported >= 1 << 20 || loaded === total) {
              reported = loaded;
              onDownload(name, loaded, total);
            }
            controller.enqueue(chunk);
          },
        }),
      );
      response = new Response(counted, { status: 200, statusText: response.statusText, headers: response.headers });
    }
    // Streams the body to disk as it arrives.
    try {
      await filesCache.put(fileUrl, response);
    } catch (e) {
      if (!response.bodyUsed) await response.body?.cancel().catch(() => {});
      throw e;
    }
    const cached = await filesCache.match(fileUrl);
    const blob = await cached?.blob();
    if (!blob || blob.size !== network.size) {
      await filesCache.delete(fileUrl);
      throw new Error(`${name}: the cached copy has ${blob?.size ?? 0} bytes, the file ${network.size}`);
    }
    await updateManifest(layout.id, layout.url, name, { url: fileUrl, size: network.size });
    return blobSource(name, blob);
  }

  return {
    id: files.id,
    ...(files.ggufFile !== undefined ? { ggufFile: files.ggufFile } : {}),
    async open(name, options?: OpenOptions) {
      const fileUrl = layout.fileUrl(name);
      if (!cacheStorage() || fileUrl === null) return files.open(name, options);
      const optional = options?.optional === true;
      try {
        const hit = await fromCache(name, optional);
        if (hit) return hit.source;
      } catch (e) {
        warn('reading', e);
        return files.open(name, options);
      }
      const network = await files.open(name, options);
      try {
        if (!network) {
          if (optional) await updateManifest(layout.id, layout.url, name, null);
          return null;
        }
        return await store(name, fileUrl, network);
      } catch (e) {
        warn('storing', e);
        return network;
      }
    },
  };
}

/** The models in the browser's weight cache (an empty list where there is none, as in Node). */
export async function listCachedModels(): Promise<CachedModel[]> {
  const storage = cacheStorage();
  if (!storage) return [];
  const models = await storage.open(MODELS_CACHE);
  const out: CachedModel[] = [];
  for (const request of await models.keys()) {
    const manifest = await readManifest(models, request.url);
    if (!manifest) continue;
    const present = Object.entries(manifest.files).filter((e): e is [string, { url: string; size: number }] => e[1] !== null);
    out.push({
      id: manifest.id,
      url: manifest.url,
      bytes: present.reduce((sum, [, f]) => sum + f.size, 0),
      files: present.map(([n]) => n),
      updated: manifest.updated,
    });
  }
  return out;
}

/**
 * Deletes from the cache every model whose id or URL is `idOrUrl` (a relative URL is resolved
 * against the page). Returns how many models were deleted.
 */
export async function deleteCachedModel(idOrUrl: string): Promise<number> {
  const storage = cacheStorage();
  if (!storage) return 0;
  let url: string | null = null;
  try {
    url = urlLayout(idOrUrl).url;
  } catch {
    // Not a URL: an id.
  }
  const models = await storage.open(MODELS_CACHE);
  const filesCache = await storage.open(FILES_CACHE);
  let deleted = 0;
  for (const request of await models.keys()) {
    const manifest = await readManifest(models, request.url);
    const matches = manifest ? manifest.id === idOrUrl || manifest.url === idOrUrl || manifest.url === url : request.url === url;
    if (!matches) continue;
    await queued(request.url, async () => {
      for (const entry of Object.values(manifest?.files ?? {})) if (entry) await filesCache.delete(entry.url);
      await models.delete(request);
    });
    deleted++;
  }
  return deleted;
}
