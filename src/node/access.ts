// Who the Node host answers: which web origins (CORS, and a refusal for the others), which names
// in the Host header (against DNS rebinding), and which API keys. The defaults let in programs on
// this machine and pages served from it, nothing else.
import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import { ApiError } from '../api/errors.ts';

/** What startServer and `webgpu-llama serve` take to widen or narrow who is answered. */
export interface AccessOptions {
  /**
   * Origins whose pages may call the server, besides the local ones (http(s)://localhost,
   * 127.0.0.1 and [::1], any port), e.g. 'https://app.example'; '*' allows any, 'null' the
   * opaque origin of sandboxed frames and file:// pages. Requests without an Origin are always allowed.
   */
  allowedOrigins?: readonly string[];
  /** Names accepted in the Host header, besides localhost, IP literals and the listening host; '*' accepts any. */
  allowedHosts?: readonly string[];
  /** When given, every request but GET /health needs `Authorization: Bearer <one of them>`. */
  apiKeys?: readonly string[];
}

/** The rules one server applies, from its AccessOptions and the interface it listens on. */
export interface AccessPolicy {
  anyOrigin: boolean;
  origins: ReadonlySet<string>;
  anyHost: boolean;
  hosts: ReadonlySet<string>;
  /** SHA-256 digests of the keys: compared in constant time, whatever their lengths. */
  keyDigests: readonly Uint8Array[];
}

const LOCAL_HOSTNAMES = new Set(['localhost', '127.0.0.1', '[::1]']);

/** An --allow-origin value as the Origin header writes it ('https://app.example:8443'); throws when it is not an origin. */
export function normalizeOrigin(value: string): string {
  if (value === '*' || value === 'null') return value;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`'${value}' is not an origin: write it as scheme://host[:port], e.g. https://app.example`);
  }
  if (url.origin === 'null' || url.pathname.replace(/\/$/, '') !== '' || url.search || url.hash || url.username || url.password) {
    throw new Error(`'${value}' is not an origin: write it as scheme://host[:port], without a path, e.g. https://app.example`);
  }
  return url.origin;
}

/** A Host name as compared: lower case, without a trailing dot. */
function normalizeHostName(name: string): string {
  return name.trim().toLowerCase().replace(/\.$/, '');
}

/** An --allow-host value; throws when it is not a host name. */
export function normalizeAllowedHost(value: string): string {
  if (value === '*') return value;
  const name = normalizeHostName(value);
  if (!/^(\[[0-9a-f:.]+\]|[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*)$/.test(name)) {
    throw new Error(`'${value}' is not a host name (give the name alone, without scheme or port, e.g. llm.lan)`);
  }
  return name;
}

/** An API key as given; throws when it is empty or has characters a header cannot carry. */
export function checkApiKey(key: string): string {
  if (key === '' || !/^[\x21-\x7e]+$/.test(key)) throw new Error('an API key must be a non-empty run of printable ASCII characters, without spaces');
  return key;
}

function digest(text: string): Uint8Array {
  return createHash('sha256').update(text).digest();
}

/** The policy of a server listening on `listenHost` (its name is accepted in Host). Throws on a malformed option. */
export function accessPolicy(listenHost: string, options: AccessOptions = {}): AccessPolicy {
  const origins = (options.allowedOrigins ?? []).map(normalizeOrigin);
  const hosts = (options.allowedHosts ?? []).map(normalizeAllowedHost);
  const listening = normalizeHostName(listenHost);
  if (listening !== '' && isIP(listening) === 0) hosts.push(listening);
  return {
    anyOrigin: origins.includes('*'),
    origins: new Set(origins),
    anyHost: hosts.includes('*'),
    hosts: new Set(hosts),
    keyDigests: (options.apiKeys ?? []).map((key) => digest(checkApiKey(key))),
  };
}

/** Whether an Origin header is a page on this machine: http(s) on localhost, 127.0.0.1 or [::1], any port. */
export function isLocalOrigin(origin: string): boolean {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  return (url.protocol === 'http:' || url.protocol === 'https:') && LOCAL_HOSTNAMES.has(url.hostname);
}

/** Whether a request with this Origin header (undefined: none, as from programs) is served. */
export function originAllowed(policy: AccessPolicy, origin: string | undefined): boolean {
  if (origin === undefined) return true;
  if (policy.anyOrigin || isLocalOrigin(origin)) return true;
  if (origin === 'null') return policy.origins.has('null');
  try {
    return policy.origins.has(new URL(origin).origin);
  } catch {
    return false;
  }
}

/** The name of a Host header ('llm.lan:8080' → 'llm.lan', '[::1]:80' → '[::1]'). */
export function hostNameOf(hostHeader: string): string {
  const host = hostHeader.trim();
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.replace(/:\d*$/, '');
  return normalizeHostName(name);
}

/**
 * Whether a request with this Host header is served: localhost (and names under .localhost, which
 * browsers resolve to this machine themselves), IP literals, the listening host and the allowed
 * names. A page that rebinds its own name to 127.0.0.1 sends that name, and is refused. No header
 * at all (HTTP/1.0 programs) is allowed: browsers always send one.
 */
export function hostAllowed(policy: AccessPolicy, hostHeader: string | undefined): boolean {
  if (hostHeader === undefined || policy.anyHost) return true;
  const name = hostNameOf(hostHeader);
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  if (name.startsWith('[') ? isIP(name.slice(1, -1)) === 6 : isIP(name) === 4) return true;
  return policy.hosts.has(name);
}

/** Whether the policy asks for a key. */
export function requiresKey(policy: AccessPolicy): boolean {
  return policy.keyDigests.length > 0;
}

/** Whether an Authorization header carries one of the keys (`Bearer KEY`), compared in constant time. */
export function keyAccepted(policy: AccessPolicy, authorization: string | undefined): boolean {
  const match = /^\s*bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  const given = digest(match ? match[1]! : '');
  let accepted = false;
  for (const key of policy.keyDigests) accepted = timingSafeEqual(given, key) || accepted; // every key compared, matched or not
  return accepted && match !== null;
}

/** Whether `host` (what the server listens on) is reachable from this machine only. */
export function isLoopbackHost(host: string): boolean {
  const name = normalizeHostName(host).replace(/^\[(.*)\]$/, '$1');
  return name === 'localhost' || name === '::1' || /^127\.\d+\.\d+\.\d+$/.test(name);
}

/** What a server started with this policy on `host` should warn about: doors opened wide. */
export function accessWarnings(policy: AccessPolicy, host: string): string[] {
  const warnings: string[] = [];
  if (policy.anyOrigin) {
    warnings.push('every web origin is allowed (--allow-origin *): any page open in a browser on this machine can use the model');
  }
  if (!isLoopbackHost(host) && !requiresKey(policy)) {
    warnings.push(`listening on ${host} without an API key: anyone who can reach this machine can use the model (give --api-key KEY)`);
  }
  return warnings;
}

/** 403: the request's Origin is not allowed (a page of another site). */
export function originRefused(origin: string): ApiError {
  return new ApiError(
    403,
    `Requests from the web origin '${origin}' are not allowed: this server answers pages of this machine only ` +
      `(http(s)://localhost, 127.0.0.1, [::1]). Start it with --allow-origin ${origin} (startServer: allowedOrigins) to allow that origin.`,
    { type: 'invalid_request_error', code: 'origin_not_allowed' },
  );
}

/** 403: the Host header names a host this server does not answer to (DNS rebinding, or a name not allowed). */
export function hostRefused(host: string): ApiError {
  return new ApiError(
    403,
    `The host name '${host}' is not allowed: this server answers localhost, IP addresses and the name it listens on. ` +
      `Start it with --allow-host ${host} (startServer: allowedHosts) to answer to that name.`,
    { type: 'invalid_request_error', code: 'host_not_allowed' },
  );
}

/** 401: no API key, or a wrong one (the openai client raises AuthenticationError). */
export function keyRefused(given: boolean): ApiError {
  const message = given
    ? 'Incorrect API key provided. This server takes the keys it was started with (--api-key or WEBGPU_LLAMA_API_KEY).'
    : 'No API key provided. This server needs one, sent as an Authorization header: Authorization: Bearer YOUR_KEY.';
  return new ApiError(401, message, { type: 'invalid_request_error', code: 'invalid_api_key', headers: { 'www-authenticate': 'Bearer' } });
}
