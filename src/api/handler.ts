// The one request handler every host uses (page fetch shim, Node HTTP server, workers): a plain
// request in, a plain response out — no fetch Request/Response, no node:http.
// Browser code: nothing here may import Node modules.
import type { ModelInfo, TextGenerator } from '../engine/types.ts';
import { createChatCompletion } from './chat.ts';
import { createCompletion, modelMatches, randomId, type RequestOptions } from './completions.ts';
import { createEmbeddings } from './embeddings.ts';
import {
  ApiError,
  errorMessage,
  invalidRequest,
  isAbortError,
  serverSideError,
  methodNotAllowed,
  modelNotFound,
  routeNotFound,
  serviceUnavailable,
  toApiError,
} from './errors.ts';
import { clipText } from './excerpt.ts';
import type { StructureCompiler } from './structured-output.ts';
import { detokenize, tokenize } from './tokenize.ts';

/**
 * What the handler needs of a loaded model: its generator (ids, aliases, context length and
 * `created` come from `generator.info`). An engine that does more may be passed as it is.
 */
export interface ApiEngine {
  readonly generator: TextGenerator;
}

export interface ApiRequest {
  method: string;
  /** Path and query ('/v1/completions?ai_project_id=x'); an absolute URL works too. */
  url: string;
  /** The request body as text; null when there is none. */
  body: string | null;
  /** Aborts the request's generation (client gone). */
  signal?: AbortSignal;
}

export interface ApiResponse {
  status: number;
  headers: Record<string, string>;
  /** JSON text, or server-sent events: 'data: {json}\n\n' … 'data: [DONE]\n\n'. */
  body: string | AsyncIterable<string>;
}

export interface ApiHandlerOptions {
  /** Path the API lives under; default '/v1'. */
  basePath?: string;
  /** Told about every 5xx error (for a host's log). */
  onError?: (error: ApiError) => void;
  /** Compiles requests' structured output (default: src/grammar's compileStructuredOutput); tests give their own. */
  compileStructuredOutput?: StructureCompiler;
}

export const DEFAULT_BASE_PATH = '/v1';

const JSON_HEADERS = { 'content-type': 'application/json' } as const;
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' } as const;

/** A response's own request id, as OpenAI's carry one ('req_…'; the openai client keeps it as `_request_id`). */
function requestIdHeader(): { 'x-request-id': string } {
  return { 'x-request-id': randomId('req_', 24) };
}

/** A JSON response. */
export function jsonResponse(status: number, value: unknown, headers: Record<string, string> = {}): ApiResponse {
  return { status, headers: { ...JSON_HEADERS, ...requestIdHeader(), ...headers }, body: JSON.stringify(value) };
}

/** The response for an error (any thrown value; see toApiError). */
export function errorResponse(error: unknown): ApiResponse {
  const apiError = toApiError(error);
  return jsonResponse(apiError.status, apiError.toJSON(), { ...apiError.headers });
}

/** `basePath` without a trailing slash ('/' → ''). */
export function normalizeBasePath(basePath: string): string {
  return withoutTrailingSlashes(basePath);
}

/**
 * `path` without its trailing slashes, by a loop: the regular expression /\/+$/ backtracks over
 * every run of slashes that does not end the path, in time quadratic in its length.
 */
export function withoutTrailingSlashes(path: string): string {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 0x2f) end--;
  return path.slice(0, end);
}

/**
 * Answers one API request. Routes under `basePath` (default '/v1'):
 * `POST /completions`, `POST /chat/completions`, `POST /embeddings`, `GET /models`,
 * `GET /models/{id}` (and vLLM's `/tokenize`, `/detokenize` beside the base); another path → 404, another method →
 * 405 (with `allow`). Query parameters (`ai_project_id`, ...) are accepted and ignored. The
 * engine may be a promise: requests wait for it, and get 503 if it rejects (load failed).
 * Never throws: every failure is an OpenAI error response (the engine's queue full: 429; JSON
 * with NaN or Infinity in it, as Python writes them: a 400 naming the parameter). A stream that
 * fails after its first chunk ends with an error event, then `data: [DONE]`; one aborted by
 * `signal` just ends. Every response has an `x-request-id` ('req_…'), as OpenAI's do.
 */
export async function handleApiRequest(
  engine: ApiEngine | Promise<ApiEngine>,
  request: ApiRequest,
  options: ApiHandlerOptions = {},
): Promise<ApiResponse> {
  try {
    return await route(engine, request, options);
  } catch (err) {
    // Aborted: the client is gone and reads nothing; whatever was thrown, it is not a server error.
    if (request.signal?.aborted) return errorResponse(isAbortError(err) ? err : abortedError(request.signal.reason));
    const apiError = serverSideError(err);
    if (apiError.status >= 500) options.onError?.(apiError);
    return errorResponse(apiError);
  }
}

/**
 * An engine that answers HTTP-shaped requests itself: an Engine, or one that runs elsewhere (a
 * RemoteEngine, src/worker: no `generator` in this realm), to which hosts hand each request as it is.
 */
export interface RequestHandlingEngine {
  /** The loaded model (routing by `model` among several engines reads it). */
  readonly info?: ModelInfo;
  handle(request: ApiRequest, options?: ApiHandlerOptions): Promise<ApiResponse>;
}

/** One engine a host serves, or a promise of one (still loading). */
export type HostedEngine = ApiEngine | RequestHandlingEngine | Promise<ApiEngine | RequestHandlingEngine>;
/** What a host serves: one engine, or several, routed by each request's `model`. */
export type ApiEngines = HostedEngine | readonly HostedEngine[];

/**
 * What hosts call: an engine with its own handle() answers (an Engine counts the whole request in
 * flight, so that unload() waits for every prompt of a batch, not only the session running now;
 * a RemoteEngine answers in its realm); anything else goes through handleApiRequest. A promise
 * that rejects (a failed load) is handleApiRequest's 503. Several engines: see answerFromMany.
 */
export async function answerApiRequest(engines: ApiEngines, request: ApiRequest, options: ApiHandlerOptions = {}): Promise<ApiResponse> {
  if (!isEngineList(engines)) return answerFromOne(engines, request, options);
  if (engines.length === 1) return answerFromOne(engines[0]!, request, options);
  try {
    return await answerFromMany(engines, request, options);
  } catch (err) {
    return errorResponse(err);
  }
}

function isEngineList(engines: ApiEngines): engines is readonly HostedEngine[] {
  return Array.isArray(engines);
}

async function answerFromOne(engine: HostedEngine, request: ApiRequest, options: ApiHandlerOptions): Promise<ApiResponse> {
  const resolved = await Promise.resolve(engine).catch(() => null);
  if (resolved && typeof (resolved as RequestHandlingEngine).handle === 'function') {
    return (resolved as RequestHandlingEngine).handle(request, options);
  }
  return handleApiRequest(engine as ApiEngine | Promise<ApiEngine>, request, options);
}

/** What is known of a hosted engine now: loaded (with the model it serves, where it tells), failed, or still loading. */
type EngineState = { loaded: ModelInfo | null } | { failed: string } | { loading: Promise<unknown> };

/** The outcome of each engine promise, once it settled. */
const settledEngines = new WeakMap<object, { loaded: ModelInfo | null } | { failed: string }>();

function modelInfoOf(engine: ApiEngine | RequestHandlingEngine): ModelInfo | null {
  if ('generator' in engine && engine.generator) return engine.generator.info;
  return (engine as RequestHandlingEngine).info ?? null;
}

async function stateOf(engine: HostedEngine): Promise<EngineState> {
  if (!(engine instanceof Promise)) return { loaded: modelInfoOf(engine) };
  let known = settledEngines.get(engine);
  if (!known) {
    engine.then(
      (loaded) => settledEngines.set(engine, { loaded: modelInfoOf(loaded) }),
      (err: unknown) => settledEngines.set(engine, { failed: errorMessage(err) }),
    );
    await null; // a promise that has settled already reports within this turn
    known = settledEngines.get(engine);
  }
  return known ?? { loading: engine };
}

/**
 * Several engines: GET /models lists the loaded models; GET /models/{id} and a POST naming a
 * `model` go to the engine that serves it. The engines loaded now decide; the ones still loading
 * are waited for only when those decide nothing (so a slow load never holds requests for a loaded
 * model). No engine serving the model: 404 model_not_found naming the served ids and any failed
 * load. Anything else (a body without a model, a bad route) is answered by the first engine,
 * which gives the error one engine would.
 */
async function answerFromMany(engines: readonly HostedEngine[], request: ApiRequest, options: ApiHandlerOptions): Promise<ApiResponse> {
  const method = request.method.toUpperCase();
  const rest = routeOf(pathOf(request), normalizeBasePath(options.basePath ?? DEFAULT_BASE_PATH));
  let states = await Promise.all(engines.map(stateOf));
  const waitForLoads = async () => {
    const loading = states.flatMap((state) => ('loading' in state ? [state.loading] : []));
    if (loading.length === 0) return false;
    await Promise.allSettled(loading);
    states = await Promise.all(engines.map(stateOf));
    return true;
  };
  const loadedIndices = () => states.flatMap((state, i) => ('loaded' in state ? [i] : []));
  const servedBy = (model: string) => engines.find((_, i) => {
    const state = states[i]!;
    return 'loaded' in state && state.loaded !== null && modelMatches(state.loaded, model);
  });
  /** The engine serving `model`, waiting for the loading ones only if none loaded serves it. */
  const route = async (model: string) => servedBy(model) ?? ((await waitForLoads()) ? servedBy(model) : undefined);

  if (rest === '/models' && (method === 'GET' || method === 'HEAD')) {
    if (loadedIndices().length === 0) await waitForLoads();
    const answers = await Promise.all(loadedIndices().map((i) => answerFromOne(engines[i]!, { ...request, method: 'GET' }, options)));
    const listed = answers.filter((a) => a.status === 200 && typeof a.body === 'string');
    if (listed.length === 0) return answers[0] ?? answerFromOne(engines[0]!, request, options);
    const data = listed.flatMap((a) => (JSON.parse(a.body as string) as { data: unknown[] }).data);
    return withoutBodyForHead(method, jsonResponse(200, { object: 'list', data }));
  }
  let model: string | null = null;
  const retrieving = rest !== null && rest.startsWith('/models/') && (method === 'GET' || method === 'HEAD');
  if (retrieving) {
    try {
      model = decodeURIComponent(rest.slice('/models/'.length));
    } catch {
      // answered by the first engine as a bad route
    }
  } else if (method === 'POST' && request.body !== null) {
    try {
      const named = (parseRequestJson(request.body) as { model?: unknown } | null)?.model;
      if (typeof named === 'string') model = named;
    } catch {
      // not JSON: the first engine's 400 says so
    }
  }
  if (model === null) return answerFromOne(engines[0]!, request, options);
  const engine = await route(model);
  if (engine) return answerFromOne(engine, request, options);
  const served = states.flatMap((state) => ('loaded' in state && state.loaded ? [`'${state.loaded.id}'`] : []));
  const failed = states.flatMap((state) => ('failed' in state ? [state.failed] : []));
  throw new ApiError(
    404,
    `The model '${clipText(model)}' does not exist. This server serves ${served.join(', ') || 'no loaded model'}` +
      (failed.length > 0 ? `; ${failed.length} model${failed.length > 1 ? 's' : ''} failed to load (${failed.join('; ')}).` : '.'),
    { param: retrieving ? null : 'model', code: 'model_not_found' },
  );
}

function abortedError(reason: unknown): unknown {
  return isAbortError(reason) ? reason : new DOMException(errorMessage(reason), 'AbortError');
}

/**
 * The route of a path: under the base path (`/v1/completions` → '/completions'), or vLLM's
 * `/tokenize` and `/detokenize` beside it (at the site root for the base '/v1'); null otherwise.
 */
function routeOf(path: string, base: string): string | null {
  return apiRoute(path, base)?.route ?? null;
}

/**
 * The API route of a URL path (trailing slashes aside): under the base path (`/v1/completions` →
 * '/completions'), or vLLM's `/tokenize` and `/detokenize` `beside` it (at the site root for the
 * base '/v1'); null for any other path. Hosts that share an origin with other content (the fetch
 * shim, the service worker) take the routes beside the base for POST requests only.
 */
export function apiRoute(pathname: string, basePath: string): { route: string; beside: boolean } | null {
  const path = pathname.length > 1 ? withoutTrailingSlashes(pathname) : pathname;
  const base = normalizeBasePath(basePath);
  if (path === base || path.startsWith(base + '/')) return { route: path.slice(base.length), beside: false };
  const parent = base.slice(0, base.lastIndexOf('/'));
  const rest = path.slice(parent.length);
  return path.startsWith(parent + '/') && (rest === '/tokenize' || rest === '/detokenize') ? { route: rest, beside: true } : null;
}

/** The path of a request's URL, without trailing slashes; a URL that does not parse (Node takes `GET //[/`) is a 404. */
function pathOf(request: ApiRequest): string {
  let path: string;
  try {
    path = new URL(request.url, 'http://localhost').pathname;
  } catch {
    throw routeNotFound(request.method.toUpperCase(), request.url);
  }
  return path.length > 1 ? withoutTrailingSlashes(path) : path;
}

async function route(engine: ApiEngine | Promise<ApiEngine>, request: ApiRequest, options: ApiHandlerOptions): Promise<ApiResponse> {
  const method = request.method.toUpperCase();
  const path = pathOf(request);
  const rest = routeOf(path, normalizeBasePath(options.basePath ?? DEFAULT_BASE_PATH));
  if (rest === null) throw routeNotFound(method, path);

  const post = POST_ROUTES[rest];
  if (post) {
    allowOnly(method, path, 'POST');
    const generator = await resolveGenerator(engine, request.signal);
    return postJson(generator, request, options, post);
  }
  if (rest === '/models') {
    allowOnly(method, path, 'GET');
    const { info } = await resolveGenerator(engine, request.signal);
    return withoutBodyForHead(method, jsonResponse(200, { object: 'list', data: [modelObject(info)] }));
  }
  if (rest.startsWith('/models/')) {
    allowOnly(method, path, 'GET');
    let id: string;
    try {
      id = decodeURIComponent(rest.slice('/models/'.length));
    } catch {
      throw routeNotFound(method, path);
    }
    const { info } = await resolveGenerator(engine, request.signal);
    if (!modelMatches(info, id)) throw modelNotFound(id, null);
    return withoutBodyForHead(method, jsonResponse(200, modelObject(info)));
  }
  throw routeNotFound(method, path);
}

/** What a POST route does with the parsed body: a JSON value, or an async iterable of stream chunks. */
type PostRoute = (generator: TextGenerator, body: unknown, options: RequestOptions) => Promise<unknown> | unknown;

const POST_ROUTES: Record<string, PostRoute | undefined> = {
  '/completions': createCompletion,
  '/chat/completions': createChatCompletion,
  '/embeddings': createEmbeddings,
  '/tokenize': tokenize,
  '/detokenize': detokenize,
};

/** Throws 405 unless the request's method is `allowed` (HEAD goes wherever GET does, as in HTTP). */
function allowOnly(method: string, path: string, allowed: 'GET' | 'POST'): void {
  if (method === allowed || (method === 'HEAD' && allowed === 'GET')) return;
  throw methodNotAllowed(method, path, allowed === 'GET' ? ['GET', 'HEAD'] : [allowed]);
}

/** A HEAD request's answer: the GET's status and headers (its content-length too, as HTTP asks), no body. */
function withoutBodyForHead(method: string, response: ApiResponse): ApiResponse {
  if (method !== 'HEAD' || typeof response.body !== 'string') return response;
  const length = new TextEncoder().encode(response.body).length;
  return { ...response, headers: { ...response.headers, 'content-length': String(length) }, body: '' };
}

/** A model's entry in GET /models; `max_model_len` is the context it was loaded with (vLLM). */
function modelObject(info: ModelInfo) {
  return { id: info.id, object: 'model' as const, created: info.created, owned_by: 'webgpu-llama', max_model_len: info.contextLength };
}

/** Waits for the engine (503 if it failed to load), or for the abort of the request. */
async function resolveGenerator(engine: ApiEngine | Promise<ApiEngine>, signal?: AbortSignal): Promise<TextGenerator> {
  let loaded: ApiEngine;
  try {
    loaded = await abortable(Promise.resolve(engine), signal);
  } catch (err) {
    if (signal?.aborted) throw err;
    throw serviceUnavailable(errorMessage(err), err);
  }
  if (!loaded || !loaded.generator) throw serviceUnavailable('the engine has no generator');
  return loaded.generator;
}

function abortable<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return promise;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

async function postJson(generator: TextGenerator, request: ApiRequest, options: ApiHandlerOptions, run: PostRoute): Promise<ApiResponse> {
  let body: unknown;
  try {
    if (request.body === null || request.body.trim() === '') throw new Error('the body is empty');
    body = parseRequestJson(request.body);
  } catch (err) {
    throw invalidRequest(
      `We could not parse the JSON body of your request (${errorMessage(err)}). The API expects a JSON object.`,
      null,
      'invalid_json',
    );
  }
  const result = await run(generator, body, {
    ...(request.signal ? { signal: request.signal } : {}),
    ...(options.compileStructuredOutput ? { compileStructuredOutput: options.compileStructuredOutput } : {}),
  });
  if (!isAsyncIterable(result)) return jsonResponse(200, result);

  // Wait for the first chunk, so that a failure to start is a real error status, not a broken stream.
  const chunks = result[Symbol.asyncIterator]();
  let first: IteratorResult<unknown>;
  try {
    first = await chunks.next();
  } catch (err) {
    await chunks.return?.();
    throw err;
  }
  return { status: 200, headers: { ...SSE_HEADERS, ...requestIdHeader() }, body: serverSentEvents(chunks, first, request.signal, options) };
}

const NON_FINITE = '\u0000webgpu-llama:';

/**
 * JSON.parse, and where that fails, once more with the bare NaN, Infinity and -Infinity that
 * Python's json.dumps writes: they become those numbers, so that validation names the parameter
 * that holds one (a 400 on `temperature`, not on the whole body).
 */
export function parseRequestJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    let out = '';
    let inString = false;
    let replaced = false;
    for (let i = 0; i < text.length; i++) {
      const c = text[i]!;
      if (inString) {
        out += c;
        if (c === '\\') out += text[++i] ?? '';
        else if (c === '"') inString = false;
        continue;
      }
      if (c === '"') {
        inString = true;
        out += c;
        continue;
      }
      const word = /^(-?Infinity|NaN)/.exec(text.slice(i, i + 9));
      if (word) {
        out += JSON.stringify(NON_FINITE + word[1]);
        i += word[1]!.length - 1;
        replaced = true;
        continue;
      }
      out += c;
    }
    if (!replaced) throw err;
    let parsed: unknown;
    try {
      parsed = JSON.parse(out);
    } catch {
      throw err;
    }
    return restoreNonFinite(parsed);
  }
}

/**
 * The NaN and Infinity markers of parseRequestJson back as numbers, by a walk with its own stack:
 * a JSON.parse reviver recurses, and a body may nest deeper than the stack (validation refuses
 * it later, naming the parameter).
 */
function restoreNonFinite(value: unknown): unknown {
  const isMarker = (item: unknown): item is string => typeof item === 'string' && item.startsWith(NON_FINITE);
  const numberOf = (marker: string) => Number(marker.slice(NON_FINITE.length));
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== 'object' || node === null) continue;
    const container = node as Record<string, unknown>;
    for (const key of Object.keys(container)) {
      const item = container[key];
      if (typeof item === 'object' && item !== null) stack.push(item);
      else if (isMarker(item)) container[key] = numberOf(item);
    }
  }
  return isMarker(value) ? numberOf(value) : value;
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}

/** Format of one server-sent event. */
export function sseEvent(data: unknown): string {
  return `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
}

/**
 * The `data` of each server-sent event in a response body ('[DONE]' included), however the text
 * is split into pieces: what in-process readers of a streamed response (RemoteEngine, the CLI's
 * chat) parse.
 */
export async function* sseData(events: AsyncIterable<string>): AsyncGenerator<string, void, void> {
  let pending = '';
  for await (const piece of events) {
    pending += piece;
    let end: number;
    while ((end = pending.indexOf('\n\n')) >= 0) {
      const event = pending.slice(0, end);
      pending = pending.slice(end + 2);
      const lines = event.split('\n').filter((line) => line.startsWith('data:'));
      if (lines.length > 0) yield lines.map((line) => line.slice(5).replace(/^ /, '')).join('\n');
    }
  }
}

async function* serverSentEvents(
  chunks: AsyncIterator<unknown>,
  first: IteratorResult<unknown>,
  signal: AbortSignal | undefined,
  options: ApiHandlerOptions,
): AsyncGenerator<string, void, void> {
  try {
    for (let step = first; !step.done; step = await chunks.next()) yield sseEvent(step.value);
  } catch (err) {
    if (signal?.aborted) return; // the client is gone; nobody reads more
    const apiError = serverSideError(err);
    if (apiError.status >= 500) options.onError?.(apiError);
    yield sseEvent(apiError.toJSON());
  } finally {
    // Ends the generation when the consumer stops reading early; a no-op once it is done.
    await chunks.return?.();
  }
  yield sseEvent('[DONE]');
}
