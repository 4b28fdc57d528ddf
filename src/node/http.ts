// The Node host: the API over node:http, answered by the same handler as the page shim.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { payloadTooLarge, type ApiError } from '../api/errors.ts';
import { answerApiRequest, DEFAULT_BASE_PATH, errorResponse, withoutTrailingSlashes, type ApiEngines, type ApiResponse } from '../api/handler.ts';
import {
  accessPolicy,
  accessWarnings,
  hostAllowed,
  hostNameOf,
  hostRefused,
  keyAccepted,
  keyRefused,
  originAllowed,
  originRefused,
  requiresKey,
  type AccessOptions,
  type AccessPolicy,
} from './access.ts';
import { healthCheck } from './health.ts';

/** Request bodies above this are answered with 413. */
export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;

export interface ServerOptions extends AccessOptions {
  /** Interface to listen on; default '127.0.0.1'. */
  host?: string;
  /** Port; default 8080; 0 picks a free one. */
  port?: number;
  /** Path the API lives under; default '/v1'. */
  basePath?: string;
  /** Largest accepted request body in bytes; default 4 MiB. */
  maxBodyBytes?: number;
  /** Where 5xx errors and startup warnings are reported; default console.error. */
  log?: (message: string) => void;
}

export interface RunningServer {
  /** The server's origin, e.g. 'http://127.0.0.1:8080' (the API is at `${url}/v1`). */
  url: string;
  /** Stops listening and closes every connection (aborting their generations). */
  close(): Promise<void>;
}

class BodyTooLarge extends Error {}

/**
 * Serves the API over HTTP: one engine, or several routed by each request's `model` (GET
 * /v1/models lists them all). Every request goes through answerApiRequest; a request whose
 * connection closes before its response is done has its generation aborted. Bodies over
 * `maxBodyBytes` get 413. GET /health answers 200 once the models are loaded, 503 before or after
 * a failure. Who is answered (access.ts): a Host header naming another host gets 403, and so does
 * a page of a foreign origin (CORS and Private Network Access are granted to the allowed origins
 * only, by name); with `apiKeys`, every request but GET /health needs one (401). Each refusal comes
 * before the body is read. Resolves once listening; throws at once on a malformed option.
 */
export function startServer(engine: ApiEngines, options: ServerOptions = {}): Promise<RunningServer> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 8080;
  const basePath = options.basePath ?? DEFAULT_BASE_PATH;
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const log = options.log ?? ((message: string) => console.error(message));
  let policy: AccessPolicy;
  try {
    policy = accessPolicy(host, options);
  } catch (err) {
    return Promise.reject(err);
  }
  const health = healthCheck(engine);
  for (const one of Array.isArray(engine) ? engine : [engine]) Promise.resolve(one).catch(() => {}); // a load failure is answered per request with 503
  const onError = (error: ApiError) => log(`webgpu-llama: ${error.status} ${error.message}`);

  const server = createServer((req, res) => {
    serve(req, res).catch((err: unknown) => {
      log(`webgpu-llama: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      if (!res.headersSent) send(res, corsHeaders(req, allowedOrigin(req)), errorResponse(err));
      else res.destroy();
    });
  });

  /** The request's Origin when the policy allows it (undefined: none, or refused). */
  function allowedOrigin(req: IncomingMessage): string | undefined {
    const { origin } = req.headers;
    return origin !== undefined && originAllowed(policy, origin) ? origin : undefined;
  }

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { host: hostHeader, origin } = req.headers;
    if (!hostAllowed(policy, hostHeader)) {
      refuse(res, {}, hostRefused(hostNameOf(hostHeader!)));
      return;
    }
    if (!originAllowed(policy, origin)) {
      refuse(res, { vary: 'Origin' }, originRefused(origin!));
      return;
    }
    const cors = corsHeaders(req, origin);
    const method = (req.method ?? 'GET').toUpperCase();
    if (method === 'OPTIONS') {
      // A preflight carries no credentials: it is answered without a key.
      const headers: Record<string, string> = { ...cors, 'access-control-max-age': '86400' };
      if (origin !== undefined && req.headers['access-control-request-private-network'] === 'true') {
        headers['access-control-allow-private-network'] = 'true';
      }
      res.writeHead(204, headers).end();
      return;
    }
    if ((method === 'GET' || method === 'HEAD') && pathOf(req) === '/health') {
      send(res, cors, health());
      return;
    }
    if (requiresKey(policy) && !keyAccepted(policy, req.headers.authorization)) {
      refuse(res, cors, keyRefused(req.headers.authorization !== undefined));
      return;
    }

    const controller = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) controller.abort(new DOMException('The client closed the connection.', 'AbortError'));
    });

    let body: string | null;
    try {
      body = await readBody(req, maxBodyBytes);
    } catch (err) {
      if (controller.signal.aborted) return; // the client left while sending its body: nobody to answer
      if (!(err instanceof BodyTooLarge)) throw err;
      send(res, { ...cors, connection: 'close' }, errorResponse(payloadTooLarge(maxBodyBytes)));
      return;
    }
    if (body === '' && (method === 'GET' || method === 'HEAD')) body = null;

    const response = await answerApiRequest(
      engine,
      { method, url: req.url ?? '/', body, signal: controller.signal },
      { basePath, onError },
    );
    if (controller.signal.aborted) {
      await drain(response);
      return;
    }
    if (typeof response.body === 'string') {
      send(res, cors, response);
      return;
    }
    res.writeHead(response.status, { ...cors, ...response.headers });
    res.flushHeaders();
    // The text is small: write without waiting for the socket, so a slow reader does not hold the model.
    for await (const event of response.body) {
      if (res.destroyed) break; // ends the generation (the loop's return())
      res.write(event);
    }
    if (!res.destroyed) res.end();
  }

  return new Promise<RunningServer>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      for (const warning of accessWarnings(policy, host)) log(`webgpu-llama: warning: ${warning}`);
      const address = server.address() as AddressInfo;
      const shownHost = address.family === 'IPv6' || address.address.includes(':') ? `[${address.address}]` : address.address;
      resolve({
        url: `http://${shownHost}:${address.port}`,
        close: () =>
          new Promise<void>((done, fail) => {
            server.close((err) => (err ? fail(err) : done()));
            server.closeAllConnections();
          }),
      });
    });
  });
}

/**
 * The CORS grant for a request from an allowed `origin`, naming it; none without an Origin.
 * `Vary: Origin` either way, so that no cache hands one origin's answer to another.
 */
function corsHeaders(req: IncomingMessage, origin: string | undefined): Record<string, string> {
  if (origin === undefined) return { vary: 'Origin' };
  const requested = req.headers['access-control-request-headers'];
  return {
    vary: 'Origin',
    'access-control-allow-origin': origin,
    'access-control-allow-methods': 'GET, HEAD, POST, OPTIONS',
    'access-control-allow-headers': typeof requested === 'string' && requested ? requested : 'authorization, content-type',
    // What OpenAI's clients read from a response: pages on another origin see them only if listed.
    'access-control-expose-headers': 'x-request-id, retry-after, x-should-retry',
  };
}

/** Answers a refused request without reading its body, and closes the connection after it. */
function refuse(res: ServerResponse, extraHeaders: Record<string, string>, error: ApiError): void {
  send(res, { ...extraHeaders, connection: 'close' }, errorResponse(error));
}

/** The request's path, without query and trailing slashes. */
function pathOf(req: IncomingMessage): string {
  let path: string;
  try {
    path = new URL(req.url ?? '/', 'http://localhost').pathname;
  } catch {
    return '';
  }
  return path.length > 1 ? withoutTrailingSlashes(path) : path;
}

function send(res: ServerResponse, extraHeaders: Record<string, string>, response: ApiResponse): void {
  const body = typeof response.body === 'string' ? response.body : '';
  res.writeHead(response.status, {
    ...extraHeaders,
    'content-length': String(Buffer.byteLength(body)),
    ...response.headers, // a HEAD answer's content-length is its GET's
  });
  res.end(body);
}

/** Ends a response nobody will read (its generation stops at once: the signal is aborted). */
async function drain(response: ApiResponse): Promise<void> {
  if (typeof response.body !== 'string') await response.body[Symbol.asyncIterator]().return?.();
}

/**
 * The request body as text. Over `limit` bytes: keeps reading (and dropping) the rest, so the
 * client gets to read the 413, then rejects with BodyTooLarge; past 16 × `limit` it stops reading.
 */
function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = Number.isFinite(declared) && declared > limit;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) tooLarge = true;
      if (tooLarge) {
        chunks.length = 0;
        if (size > 16 * limit) {
          req.pause();
          reject(new BodyTooLarge());
        }
        return;
      }
      chunks.push(chunk);
    });
    // TextDecoder, as Request.text() in the page decodes: it drops a leading byte-order mark (a JSON
    // file saved by Notepad and sent with curl -d @file), which Buffer.toString keeps.
    req.on('end', () => (tooLarge ? reject(new BodyTooLarge()) : resolve(new TextDecoder().decode(Buffer.concat(chunks)))));
    req.on('error', reject);
  });
}
