// OpenAI-shaped API errors: `{"error": {"message", "type", "param", "code"}}` with an HTTP status.
// Browser code: nothing here may import Node modules.
import { clipText, excerpt } from './excerpt.ts';

/**
 * The longest message and param an error carries. Messages show request values as bounded
 * excerpts (excerpt.ts); this bound also covers what lower layers say (a chat template's
 * raise_exception, a grammar error), which the API passes on.
 */
export const MAX_ERROR_MESSAGE_LENGTH = 1024;
export const MAX_ERROR_PARAM_LENGTH = 256;

/** The `error` object of an error response body. */
export interface ApiErrorObject {
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

/** An error response body. */
export interface ApiErrorBody {
  error: ApiErrorObject;
}

/**
 * An error the API answers with. `status` is the HTTP status; `type`, `param` and `code` go into
 * the body as OpenAI does (`type` e.g. 'invalid_request_error', `param` the request field at fault).
 */
export class ApiError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;
  /** Response headers that go with the error (405: `allow`). */
  readonly headers: Readonly<Record<string, string>>;

  constructor(
    status: number,
    message: string,
    options: {
      type?: string;
      param?: string | null;
      code?: string | null;
      headers?: Record<string, string>;
      cause?: unknown;
    } = {},
  ) {
    super(clipText(message, MAX_ERROR_MESSAGE_LENGTH), options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ApiError';
    this.status = status;
    this.type = options.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = options.param == null ? null : clipText(options.param, MAX_ERROR_PARAM_LENGTH);
    this.code = options.code ?? null;
    this.headers = { ...options.headers };
  }

  /** The response body: `{"error": {...}}`. */
  toJSON(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** 400 invalid_request_error. */
export function invalidRequest(message: string, param: string | null = null, code: string | null = null): ApiError {
  return new ApiError(400, message, { type: 'invalid_request_error', param, code });
}

/** 400: a value of a known parameter that this runtime does not implement yet. */
export function notSupportedYet(param: string, detail = ''): ApiError {
  return invalidRequest(
    `'${param}' is not supported yet by webgpu-llama${detail ? `: ${detail}` : ''}.`,
    param,
    'unsupported_value',
  );
}

/** 404: the `model` of a request (or the id of GET /models/{id}) names no loaded model. */
export function modelNotFound(model: string, param: string | null = 'model'): ApiError {
  return new ApiError(404, `The model '${clipText(model)}' does not exist or you do not have access to it.`, {
    type: 'invalid_request_error',
    param,
    code: 'model_not_found',
  });
}

/** 404: no such route. */
export function routeNotFound(method: string, path: string): ApiError {
  return new ApiError(404, `Unknown request URL: ${clipText(method)} ${clipText(path)}.`, { type: 'not_found_error', code: 'not_found' });
}

/** 405: the route exists, not with this method. */
export function methodNotAllowed(method: string, path: string, allowed: readonly string[]): ApiError {
  return new ApiError(405, `Method ${clipText(method)} is not allowed for ${clipText(path)}; use ${allowed.join(' or ')}.`, {
    type: 'invalid_request_error',
    code: 'method_not_allowed',
    headers: { allow: allowed.join(', ') },
  });
}

/** 413: the request body is over the host's limit. */
export function payloadTooLarge(limitBytes: number): ApiError {
  return new ApiError(413, `The request body is larger than the limit of ${limitBytes} bytes.`, {
    type: 'invalid_request_error',
    code: 'request_too_large',
  });
}

/**
 * For errors a retry cannot cure: the openai client otherwise retries a 503 twice, with backoff,
 * before the caller sees it.
 */
export const NO_RETRY: Readonly<Record<string, string>> = { 'x-should-retry': 'false' };

/** 503: the model could not be loaded, so no request can be served. */
export function serviceUnavailable(reason: string, cause?: unknown): ApiError {
  return new ApiError(503, `The model failed to load: ${reason}`, {
    type: 'service_unavailable',
    code: 'model_load_failed',
    headers: NO_RETRY,
    cause,
  });
}

/** 429: the queue of requests waiting for the GPU is full. */
export function queueFull(reason: string, cause?: unknown): ApiError {
  return new ApiError(429, `Too many requests are waiting for the model: ${reason}.`, {
    type: 'rate_limit_error',
    code: 'rate_limit_exceeded',
    headers: { 'retry-after': '1' },
    cause,
  });
}

/** Whether `err` is the engine's QueueFullError (src/engine/scheduler.ts), by name: no engine import here. */
export function isQueueFullError(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'QueueFullError';
}

/**
 * 503: the grammar engine was restarted after another request made it trap, ending this request's
 * constrained sequence; retryable (the openai client retries it by itself), since the same request
 * sent again compiles in the restarted engine.
 */
export function grammarEngineRestarted(reason: string, cause?: unknown): ApiError {
  return new ApiError(503, `The grammar engine was restarted while this request used it: ${reason}.`, {
    type: 'service_unavailable',
    code: 'grammar_engine_restarted',
    cause,
  });
}

/** Whether `err` is the grammar layer's GrammarEngineRestartedError, by name: no grammar import here. */
export function isGrammarEngineRestartedError(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'GrammarEngineRestartedError';
}

/** Whether `err` is an abort (DOMException / Error named 'AbortError'). */
export function isAbortError(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'AbortError';
}

/** A human-readable reason from any thrown value (another value than an Error or a string: an excerpt of it). */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  if (typeof err === 'string') return err;
  return excerpt(err);
}

/**
 * toApiError for a failure the client's own abort did not cause: an AbortError is then the
 * server's (a lost GPU device rejects pending read-backs with one), a 500 that hosts log, not a
 * 499 "aborted by the client" that nobody would see.
 */
export function serverSideError(err: unknown): ApiError {
  return isAbortError(err) ? serverError(err) : toApiError(err);
}

/**
 * 500: anything else that went wrong while answering. Marked not to be retried: the openai client
 * retries 5xx twice by default, and here the same request on the same model and GPU fails the
 * same way (a bug, a GPU error), three runs before the caller hears of it.
 */
function serverError(err: unknown): ApiError {
  return new ApiError(500, `The server had an error while processing your request: ${errorMessage(err)}`, {
    type: 'server_error',
    headers: NO_RETRY,
    cause: err,
  });
}

/**
 * Any thrown value as an ApiError: ApiErrors pass through, an abort becomes 499 (client closed
 * the request; nobody reads it), the engine's QueueFullError 429, the grammar engine's restart
 * 503, everything else a 500 server_error carrying the message.
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (isQueueFullError(err)) return queueFull(errorMessage(err), err);
  if (isGrammarEngineRestartedError(err)) return grammarEngineRestarted(errorMessage(err), err);
  if (isAbortError(err)) {
    return new ApiError(499, 'The request was aborted by the client.', { type: 'invalid_request_error', code: 'aborted', cause: err });
  }
  return serverError(err);
}
