// Where a model's bytes come from: a URL (one GGUF file or a folder base URL), browser File
// objects (folder picker, drag and drop) or, in Node, a path (src/node/files.ts). Everything above
// this layer reads byte ranges and never needs a whole file in memory.

/** Random and streaming access to one file's bytes. */
export interface ByteSource {
  readonly name: string;
  readonly size: number;
  /** Exactly `length` bytes from `offset` (throws when the range is outside the file). */
  read(offset: number, length: number): Promise<Uint8Array>;
  /** The bytes of [offset, offset + length) in order, in chunks of about `chunkSize` bytes. */
  stream(offset: number, length: number, chunkSize?: number): AsyncIterable<Uint8Array>;
}

/** How the loader asks for a file. */
export interface OpenOptions {
  /**
   * The model may lack the file (tokenizer_config.json, model.safetensors.index.json, ...). A
   * URL source then also reads HTTP 403 as "no such file" (S3 without ListBucket answers 403 for
   * a missing key); for a file the model needs, 403 stays an error naming the file.
   */
  optional?: boolean;
}

/** The files of one model: a single GGUF file, or a Hugging Face folder (config.json, ...). */
export interface ModelFiles {
  /** Default model id: the folder name, or the file name without `.gguf`. */
  readonly id: string;
  /** Set when the source is a single GGUF file: the name `open()` answers to. */
  readonly ggufFile?: string;
  /** The file `name` (relative to the folder), or null when it does not exist. */
  open(name: string, options?: OpenOptions): Promise<ByteSource | null>;
}

export const DEFAULT_CHUNK_SIZE = 4 << 20;

/** Throws unless [offset, offset + length) lies inside a file of `size` bytes. */
export function checkRange(name: string, size: number, offset: number, length: number): void {
  if (!Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length < 0 || offset + length > size) {
    throw new RangeError(`${name}: byte range [${offset}, ${offset + length}) is outside the file (${size} bytes)`);
  }
}

/** A whole small file as text (config.json, tokenizer.json, ...), or null when it is missing. */
export async function readTextFile(files: ModelFiles, name: string, options?: OpenOptions): Promise<string | null> {
  const source = await files.open(name, options);
  if (!source) return null;
  return new TextDecoder().decode(await source.read(0, source.size));
}

/** A whole small JSON file, parsed, or null when it is missing; a parse error names the file. */
export async function readJsonFile<T = unknown>(files: ModelFiles, name: string, options?: OpenOptions): Promise<T | null> {
  const text = await readTextFile(files, name, options);
  if (text === null) return null;
  try {
    return JSON.parse(text) as T;
  } catch (e) {
    throw new Error(`${name} is not valid JSON: ${(e as Error).message}`);
  }
}

/** Regroups the pieces `chunks` yields into pieces of `chunkSize` bytes (the last may be shorter). */
export async function* rechunk(chunks: AsyncIterable<Uint8Array>, chunkSize: number): AsyncIterable<Uint8Array> {
  let pending: Uint8Array | null = null;
  let filled = 0;
  for await (const chunk of chunks) {
    let at = 0;
    while (at < chunk.length) {
      if (filled === 0 && chunk.length - at >= chunkSize) {
        // A whole chunk straight from the input: no copy.
        yield chunk.subarray(at, at + chunkSize);
        at += chunkSize;
        continue;
      }
      pending ??= new Uint8Array(chunkSize);
      const n = Math.min(chunkSize - filled, chunk.length - at);
      pending.set(chunk.subarray(at, at + n), filled);
      filled += n;
      at += n;
      if (filled === chunkSize) {
        yield pending;
        pending = null; // the consumer may keep the yielded array
        filled = 0;
      }
    }
  }
  if (pending && filled > 0) yield pending.subarray(0, filled);
}

/** A ByteSource over bytes already in memory (small files, tests). */
export function memorySource(name: string, bytes: Uint8Array): ByteSource {
  return {
    name,
    size: bytes.length,
    async read(offset, length) {
      checkRange(name, bytes.length, offset, length);
      return bytes.slice(offset, offset + length);
    },
    async *stream(offset, length, chunkSize = DEFAULT_CHUNK_SIZE) {
      checkRange(name, bytes.length, offset, length);
      for (let at = offset; at < offset + length; at += chunkSize) {
        yield bytes.slice(at, Math.min(at + chunkSize, offset + length));
      }
    },
  };
}

/** ModelFiles over in-memory files (tests, generated models). */
export function filesFromMemory(id: string, entries: Record<string, Uint8Array | string>, ggufFile?: string): ModelFiles {
  const map = new Map<string, Uint8Array>();
  for (const [name, value] of Object.entries(entries)) {
    map.set(name, typeof value === 'string' ? new TextEncoder().encode(value) : value);
  }
  return {
    id,
    ggufFile,
    async open(name) {
      const bytes = map.get(name);
      return bytes ? memorySource(name, bytes) : null;
    },
  };
}

function stripGguf(name: string): string {
  return name.replace(/\.gguf$/i, '');
}

function isGgufName(name: string): boolean {
  return /\.gguf$/i.test(name);
}

// ---------------------------------------------------------------------------------------------
// URLs

/** Where a URL source's files live: the model's own URL and the URL of each file in it. */
export interface UrlLayout {
  /** The model's URL, absolute: the .gguf file's, or the folder's (ending in `/`). */
  readonly url: string;
  readonly id: string;
  /** Set for a single GGUF file: its name. */
  readonly ggufFile?: string;
  /** The URL of file `name` of the model, or null when the model has no such file (a GGUF source). */
  fileUrl(name: string): string | null;
}

/** Resolves a model URL (relative ones against the page's location) into its layout. */
export function urlLayout(url: string): UrlLayout {
  const base = (globalThis as { location?: { href?: string } }).location?.href;
  let resolved: URL;
  try {
    resolved = base ? new URL(url, base) : new URL(url);
  } catch {
    throw new Error(`Not a valid model URL: ${url}`);
  }
  const path = resolved.pathname;
  if (isGgufName(path)) {
    const fileName = decodeUrlPart(url, path.slice(path.lastIndexOf('/') + 1));
    const fileUrl = resolved.href;
    return { url: fileUrl, id: stripGguf(fileName), ggufFile: fileName, fileUrl: (name) => (name === fileName ? fileUrl : null) };
  }
  const folder = new URL(resolved.href);
  folder.search = '';
  folder.hash = '';
  if (!folder.pathname.endsWith('/')) folder.pathname += '/';
  return {
    url: folder.href,
    id: folderId(url, folder.pathname),
    fileUrl: (name) => new URL(name.split('/').map(encodeURIComponent).join('/'), folder).href,
  };
}

/** A percent-encoded part of `url`'s path, decoded (`%zz` is an error naming the URL, not a bare URIError). */
function decodeUrlPart(url: string, part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new Error(`Not a valid model URL: ${url} (malformed percent-encoding in ${JSON.stringify(part)})`);
  }
}

/** How URL sources fetch. */
export interface UrlFetchOptions {
  /**
   * An access token (a Hugging Face token for a gated or private repo): every request for the
   * model's files carries `Authorization: Bearer <token>`. Browsers and Node drop the header on
   * a redirect to another origin (the hub's CDN), as the Fetch standard asks.
   */
  accessToken?: string;
}

/** `fetchImpl` with `Authorization: Bearer <token>` on every request it makes. */
export function withAccessToken(fetchImpl: typeof fetch, token: string): typeof fetch {
  // Checked here so that a bad token fails with a message that does not repeat it (a Headers
  // error would quote the whole header value).
  if (!/^[\x21-\x7e]+$/.test(token)) throw new Error('The access token must be printable ASCII without spaces or line breaks.');
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${token}`);
    return fetchImpl(input, { ...init, headers });
  };
}

/** Sources over HTTP(S): sizes from HEAD (or a Range request's Content-Range), reads with Range headers. */
export function filesFromUrl(url: string, fetchImpl: typeof fetch = (...args) => fetch(...args), options: UrlFetchOptions = {}): ModelFiles {
  const layout = urlLayout(url);
  if (options.accessToken) fetchImpl = withAccessToken(fetchImpl, options.accessToken);
  return {
    id: layout.id,
    ...(layout.ggufFile !== undefined ? { ggufFile: layout.ggufFile } : {}),
    async open(name, options) {
      const fileUrl = layout.fileUrl(name);
      return fileUrl === null ? null : openUrl(fileUrl, name, fetchImpl, options?.optional === true);
    },
  };
}

/** The model id of a folder URL; Hugging Face `.../org/name/resolve/<rev>/` gives `name`. */
function folderId(url: string, pathname: string): string {
  const parts = pathname.split('/').filter(Boolean).map((p) => decodeUrlPart(url, p));
  const resolveAt = parts.lastIndexOf('resolve');
  if (resolveAt >= 1) return parts[resolveAt - 1];
  return parts[parts.length - 1] ?? 'model';
}

/** Files the server answers without Range support are buffered whole up to this size. */
const MAX_UNRANGED_BYTES = 64 << 20;

/**
 * A missing file answered with an HTML page: dev servers with an SPA fallback (Vite's) serve
 * index.html with status 200 for any unknown path. No model file is HTML.
 */
function isHtmlFallback(response: Response, name: string): boolean {
  return /^text\/html/i.test(response.headers.get('content-type') ?? '') && !/\.html?$/i.test(name);
}

/**
 * An HTML page where a file was asked for that is not an SPA's answer for a missing file: a
 * Hugging Face `/blob/` or `/tree/` URL (a web page; `/resolve/` serves the files), or a weights file
 * (.gguf, .safetensors: a page in their place means a wrong URL, not a file the model lacks).
 */
function htmlPageError(url: string, name: string): Error | null {
  const page = new URL(url).pathname.match(/\/[^/]+\/[^/]+\/(blob|tree)\/[^/]+\//);
  if (page) {
    return new Error(`${name}: ${url} is a web page, not the file: use a '/resolve/' URL in place of '/${page[1]}/' (as the Hub's download links do)`);
  }
  if (/\.(gguf|safetensors)$/i.test(name)) {
    return new Error(`${name}: the server answered ${url} with an HTML page, not the model file (is the URL right and the file there?)`);
  }
  return null;
}

/** A missing file: 404 or 410, or 403 for an optional one (S3 answers 403 for a missing key without ListBucket). */
function isAbsent(status: number, optional: boolean): boolean {
  return status === 404 || status === 410 || (optional && status === 403);
}

async function openUrl(url: string, name: string, fetchImpl: typeof fetch, optional = false): Promise<ByteSource | null> {
  let size: number | null = null;
  let head: Response | null = null;
  try {
    head = await fetchImpl(url, { method: 'HEAD' });
  } catch {
    // HEAD not allowed (some CDNs, CORS): fall through to a ranged GET.
  }
  if (head) {
    if (isAbsent(head.status, false)) return null; // a 403 on HEAD may be a presigned GET URL: ask with GET below
    if (head.ok && isHtmlFallback(head, name)) {
      const error = htmlPageError(url, name);
      if (error) throw error;
      return null;
    }
    const length = head.headers.get('content-length');
    // A compressed response's Content-Length is not the file size: ask with a Range instead.
    // Other failures (405, or 403 where a presigned URL signs GET only) fall through to a ranged GET.
    if (head.ok && length !== null && !head.headers.get('content-encoding')) size = Number(length);
  }
  if (size === null || !Number.isFinite(size)) {
    const response = await fetchImpl(url, { headers: { Range: 'bytes=0-0' } });
    if (isAbsent(response.status, optional) || (response.ok && isHtmlFallback(response, name))) {
      await response.body?.cancel();
      const error = response.ok ? htmlPageError(url, name) : null;
      if (error) throw error;
      return null;
    }
    if (response.status === 416) {
      size = 0; // an empty file
      await response.body?.cancel();
    } else if (response.status === 206) {
      size = totalFromContentRange(response.headers.get('content-range'));
      await response.body?.cancel();
      if (size === null) throw new Error(`${name}: the server's Content-Range does not give the file size (${url})`);
    } else if (response.ok) {
      // No Range support: only small files can be used this way.
      const length = Number(response.headers.get('content-length') ?? NaN);
      if (Number.isFinite(length) && length > MAX_UNRANGED_BYTES) {
        await response.body?.cancel();
        throw new Error(`${name}: the server does not support HTTP Range requests, needed for large files (${url})`);
      }
      return memorySource(name, await readCapped(response, name, url));
    } else {
      await response.body?.cancel();
      throw new Error(`${name}: HTTP ${response.status} ${response.statusText} from ${url}`);
    }
  }
  return urlSource(url, name, size, fetchImpl);
}

/**
 * A whole response body of at most MAX_UNRANGED_BYTES, read as it streams in: a body without a
 * Content-Length is given up at the cap, not first held whole in memory.
 */
async function readCapped(response: Response, name: string, url: string): Promise<Uint8Array> {
  if (!response.body) return new Uint8Array(await response.arrayBuffer());
  const reader = response.body.getReader();
  const pieces: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > MAX_UNRANGED_BYTES) {
      await reader.cancel().catch(() => {});
      throw new Error(`${name}: the server does not support HTTP Range requests, needed for large files (${url})`);
    }
    pieces.push(value);
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.length;
  }
  return out;
}

function totalFromContentRange(header: string | null): number | null {
  const m = header?.match(/\/\s*(\d+)\s*$/);
  return m ? Number(m[1]) : null;
}

async function rangedFetch(url: string, name: string, offset: number, length: number, fetchImpl: typeof fetch): Promise<{ response: Response; skip: number }> {
  const response = await fetchImpl(url, { headers: { Range: `bytes=${offset}-${offset + length - 1}` } });
  if (response.status === 206) {
    const m = response.headers.get('content-range')?.match(/bytes\s+(\d+)-/);
    if (m && Number(m[1]) !== offset) {
      await response.body?.cancel();
      throw new Error(`${name}: the server answered bytes from ${m[1]} when asked for ${offset} (${url})`);
    }
    return { response, skip: 0 };
  }
  if (response.status === 200) return { response, skip: offset }; // Range ignored: skip to the offset
  await response.body?.cancel();
  throw new Error(`${name}: HTTP ${response.status} ${response.statusText} reading bytes ${offset}..${offset + length} of ${url}`);
}

/** The bytes of [skip, skip + length) of a response body, in the pieces the reader yields. */
async function* bodyRange(response: Response, name: string, skip: number, length: number): AsyncIterable<Uint8Array> {
  if (!response.body) throw new Error(`${name}: the response has no body`);
  const reader = response.body.getReader();
  let remaining = length;
  try {
    while (remaining > 0) {
      const { done, value } = await reader.read();
      if (done) break;
      let piece = value;
      if (skip > 0) {
        const drop = Math.min(skip, piece.length);
        piece = piece.subarray(drop);
        skip -= drop;
      }
      if (piece.length === 0) continue;
      if (piece.length > remaining) piece = piece.subarray(0, remaining);
      remaining -= piece.length;
      yield piece;
    }
  } finally {
    if (remaining > 0) await reader.cancel().catch(() => {});
    else reader.releaseLock();
  }
  if (remaining > 0) throw new Error(`${name}: the download ended ${remaining} bytes early`);
}

function urlSource(url: string, name: string, size: number, fetchImpl: typeof fetch): ByteSource {
  return {
    name,
    size,
    async read(offset, length) {
      checkRange(name, size, offset, length);
      if (length === 0) return new Uint8Array(0);
      const { response, skip } = await rangedFetch(url, name, offset, length, fetchImpl);
      const out = new Uint8Array(length);
      let at = 0;
      for await (const piece of bodyRange(response, name, skip, length)) {
        out.set(piece, at);
        at += piece.length;
      }
      return out;
    },
    async *stream(offset, length, chunkSize = DEFAULT_CHUNK_SIZE) {
      checkRange(name, size, offset, length);
      if (length === 0) return;
      // One request for the whole range, consumed through its body reader.
      const { response, skip } = await rangedFetch(url, name, offset, length, fetchImpl);
      yield* rechunk(bodyRange(response, name, skip, length), chunkSize);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Browser File objects

/** A File of a folder picked in the page (webkitRelativePath `folder/config.json`) or dropped. */
export function filesFromFileList(files: Iterable<File>): ModelFiles {
  const list = [...files];
  if (list.length === 0) throw new Error('No files were given.');
  const byName = new Map<string, File>();
  for (const file of list) {
    const rel = relativePath(file);
    byName.set(rel, file);
    // Also by plain file name, so `open('config.json')` finds `folder/config.json`.
    if (!byName.has(file.name)) byName.set(file.name, file);
  }
  const ggufs = list.filter((f) => isGgufName(f.name));
  const hasConfig = list.some((f) => f.name === 'config.json');
  if (!hasConfig && ggufs.length === 1) {
    const file = ggufs[0];
    return {
      id: stripGguf(file.name),
      ggufFile: file.name,
      async open(name) {
        return name === file.name ? fileSource(file) : null;
      },
    };
  }
  if (!hasConfig && ggufs.length > 1) {
    throw new Error(`Several GGUF files were given (${ggufs.map((f) => f.name).join(', ')}): pick one.`);
  }
  const first = relativePath(list[0]);
  const id = first.includes('/') ? first.slice(0, first.indexOf('/')) : 'model';
  return {
    id,
    async open(name) {
      const file = byName.get(`${id}/${name}`) ?? byName.get(name);
      return file ? fileSource(file) : null;
    },
  };
}

function relativePath(file: File): string {
  const rel = (file as File & { webkitRelativePath?: string }).webkitRelativePath;
  return rel && rel.length > 0 ? rel : file.name;
}

function fileSource(file: Blob & { name: string }): ByteSource {
  return blobSource(file.name, file);
}

/** A ByteSource over a Blob (a File, or a disk-backed body from the browser's Cache Storage). */
export function blobSource(name: string, file: Blob): ByteSource {
  const size = file.size;
  return {
    name,
    size,
    async read(offset, length) {
      checkRange(name, size, offset, length);
      return new Uint8Array(await file.slice(offset, offset + length).arrayBuffer());
    },
    async *stream(offset, length, chunkSize = DEFAULT_CHUNK_SIZE) {
      checkRange(name, size, offset, length);
      for (let at = offset; at < offset + length; at += chunkSize) {
        const end = Math.min(at + chunkSize, offset + length);
        yield new Uint8Array(await file.slice(at, end).arrayBuffer());
      }
    },
  };
}
