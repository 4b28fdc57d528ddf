// Serves the API inside the page: a `fetch` that answers requests under the base URL with
// answerApiRequest and passes every other request to the fetch it replaced, untouched.
// Browser code: nothing here may import Node modules.
import {
  answerApiRequest,
  apiRoute,
  DEFAULT_BASE_PATH,
  normalizeBasePath,
  type ApiEngine,
  type ApiEngines,
  type ApiHandlerOptions,
  type RequestHandlingEngine,
} from './handler.ts';

export type { RequestHandlingEngine } from './handler.ts';

/** What installFetchShim serves: an Engine (or anything with a generator), or a remote engine. */
export type ShimEngine = ApiEngine | RequestHandlingEngine;

export interface FetchShimOptions {
  /**
   * Where the API lives; default '/v1' on the page's own origin. Relative URLs are resolved as
   * fetch resolves them, against the document's base URL (`document.baseURI`: a `<base href>`, an
   * `about:srcdoc` frame's parent), else `location.href` (a worker); the base once, at install,
   * requests each time. Where there is neither (Node), against 'http://localhost/'.
   */
  baseUrl?: string;
  /** The global object whose `fetch` is patched; default globalThis. */
  target?: typeof globalThis;
  /** Told about every 5xx error. */
  onError?: ApiHandlerOptions['onError'];
}

const FALLBACK_ORIGIN = 'http://localhost/';

/**
 * Patches `target.fetch` (default globalThis) so that requests whose URL (a string, URL or
 * Request) is under `baseUrl` (or is a POST to vLLM's `/tokenize` or `/detokenize` beside it) are answered
 * by the engine — or by one of several engines, chosen by each request's `model` (GET /models
 * lists them all): a real `Response`, with the server-sent
 * events of a stream as its `body` stream. `init.signal` / `Request.signal` abort the generation,
 * as does cancelling the body. Other requests go to the previous fetch with the same arguments.
 * Returns a function that uninstalls the shim: from then on it passes every request on, so that
 * callers that kept it (the openai client keeps the fetch it was made with) reach the previous
 * fetch, and shims installed over it stay in place; `target.fetch` gets the previous fetch back
 * when it is still this shim. A rejected engine promise is answered with 503 by every request
 * (and is not an unhandled rejection).
 */
export function installFetchShim(engine: ApiEngines, options: FetchShimOptions = {}): () => void {
  const target = options.target ?? globalThis;
  const previous = target.fetch;
  for (const one of Array.isArray(engine) ? engine : [engine]) Promise.resolve(one).catch(() => {}); // a load failure is answered per request with 503
  const base = new URL(options.baseUrl ?? DEFAULT_BASE_PATH, baseUrlOf(target));
  const basePath = normalizeBasePath(base.pathname);
  let installed = true;

  const shim = function fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    let url: URL | null = null;
    if (installed) {
      try {
        url = new URL(isRequest(input) ? input.url : String(input), baseUrlOf(target));
      } catch {
        // not a URL we can read: not ours
      }
    }
    const method = init?.method ?? (isRequest(input) ? input.method : 'GET');
    if (!url || !isApiRequest(url, method, base.origin, basePath)) {
      // eslint-disable-next-line prefer-rest-params
      return Reflect.apply(previous, undefined, arguments) as Promise<Response>;
    }
    return answer(engine, url, basePath, input, init, options);
  };
  target.fetch = shim as typeof fetch;
  return () => {
    if (!installed) return;
    installed = false;
    if (target.fetch === (shim as typeof fetch)) target.fetch = previous;
  };
}

/** The URL fetch resolves relative URLs against in `target`'s realm (see FetchShimOptions.baseUrl). */
function baseUrlOf(target: typeof globalThis): string {
  const { document, location } = target as { document?: { baseURI?: string }; location?: { href?: string } };
  if (typeof document?.baseURI === 'string') return document.baseURI;
  return typeof location?.href === 'string' ? location.href : FALLBACK_ORIGIN;
}

/** A Request, also one from another realm (an iframe's). */
function isRequest(input: unknown): input is Request {
  if (typeof Request !== 'undefined' && input instanceof Request) return true;
  return (
    typeof input === 'object' &&
    input !== null &&
    !(input instanceof URL) &&
    typeof (input as Request).url === 'string' &&
    typeof (input as Request).method === 'string'
  );
}

/**
 * Whether a request is the API's: under the base path, or a POST to vLLM's /tokenize and
 * /detokenize beside it (the site root's for '/v1'; other methods there are the site's own).
 */
export function isApiRequest(url: URL, method: string, origin: string, basePath: string): boolean {
  if (url.origin !== origin) return false;
  const route = apiRoute(url.pathname, basePath);
  return route !== null && (!route.beside || method.toUpperCase() === 'POST');
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

async function answer(
  engine: ApiEngines,
  url: URL,
  basePath: string,
  input: RequestInfo | URL,
  init: RequestInit | undefined,
  options: FetchShimOptions,
): Promise<Response> {
  // A Request reads method, body and signal the way fetch would (init over the Request's own).
  const request = isRequest(input) ? new Request(input, init) : new Request(url, init);
  const callerSignal = init?.signal ?? (isRequest(input) ? input.signal : undefined) ?? undefined;
  if (callerSignal?.aborted) throw abortError(callerSignal);

  // Our own controller: aborted by the caller's signal and by cancelling the response body.
  const controller = new AbortController();
  const onCallerAbort = () => controller.abort(abortError(callerSignal!));
  callerSignal?.addEventListener('abort', onCallerAbort, { once: true });
  const release = () => callerSignal?.removeEventListener('abort', onCallerAbort);

  try {
    const method = request.method.toUpperCase();
    const body = method === 'GET' || method === 'HEAD' ? null : await request.text();
    // Aborted while the body was read: the listener below would never fire.
    if (controller.signal.aborted) throw controller.signal.reason;
    const aborted = new Promise<never>((_, reject) => {
      controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true });
    });
    aborted.catch(() => {});
    const response = await Promise.race([
      answerApiRequest(
        engine,
        { method, url: url.pathname + url.search, body, signal: controller.signal },
        { basePath, ...(options.onError ? { onError: options.onError } : {}) },
      ),
      aborted,
    ]);
    if (typeof response.body === 'string') {
      release();
      // As a server's answer to HEAD comes through fetch: no body, errors included.
      return new Response(method === 'HEAD' ? null : response.body, { status: response.status, headers: response.headers });
    }
    return new Response(eventStream(response.body, controller, release), {
      status: response.status,
      headers: response.headers,
    });
  } catch (err) {
    release();
    controller.abort(err);
    throw err;
  }
}

/**
 * The SSE text as a byte stream. Generation runs ahead of the reader (the text is small) so that
 * a body read slowly, or never, does not hold the model; cancelling the body or aborting the
 * request's signal ends the generation, the latter erroring the body with the abort reason.
 */
function eventStream(events: AsyncIterable<string>, controller: AbortController, release: () => void): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const iterator = events[Symbol.asyncIterator]();
  let closed = false;
  return new ReadableStream<Uint8Array>({
    start(stream) {
      const onAbort = () => {
        if (closed) return;
        closed = true;
        stream.error(controller.signal.reason);
      };
      controller.signal.addEventListener('abort', onAbort, { once: true });
      void (async () => {
        try {
          for (;;) {
            const step = await iterator.next();
            if (closed) break;
            if (step.done) {
              closed = true;
              stream.close();
              break;
            }
            stream.enqueue(encoder.encode(step.value));
          }
        } catch (err) {
          if (!closed) {
            closed = true;
            stream.error(err);
          }
        } finally {
          controller.signal.removeEventListener('abort', onAbort);
          release();
          await iterator.return?.();
        }
      })();
    },
    cancel(reason) {
      closed = true;
      controller.abort(reason ?? new DOMException('The response body was cancelled', 'AbortError'));
    },
  });
}
