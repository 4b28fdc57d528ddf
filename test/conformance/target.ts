// What a conformance run talks to: a fetch-like function and the API's base URL (the Node
// server over HTTP, the page's fetch shim, ...), and what it knows about the model.
import OpenAI from 'openai';
import { eq, fail, keys, ok } from './assert.ts';

/** The part of `fetch` the cases use. A Response as in the Fetch standard comes back. */
export type FetchLike = (
  url: string,
  init?: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal },
) => Promise<Response>;

/** The tokenizer of the model under test (the same ids and text the server uses). */
export interface ProfileTokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  encode(text: string, options?: { addBos?: boolean }): number[];
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
  isSpecial(id: number): boolean;
}

export interface ModelProfile {
  /** The id requests name in `model`. */
  model: string;
  /** Another name the model answers to, if it has one. */
  alias?: string;
  /** Positions of the context (prompt + completion). */
  contextLength: number;
  tokenizer: ProfileTokenizer;
  /** A prompt the model continues with ordinary text. */
  prompt: string;
  /** A second prompt, for batches. */
  otherPrompt: string;
  /** How far two computations of the same logprob may differ (prefill vs decode, GPU rounding). */
  logprobTolerance: number;
}

export type Capability =
  /** Aborting a request mid-way (AbortSignal reaches the server). */
  | 'abort'
  /** The official openai client can be pointed at the target. */
  | 'openai'
  /** The target can tell how many sessions are open (fake generator). */
  | 'sessions';

export interface ConformanceTarget {
  fetch: FetchLike;
  /** The API base, e.g. 'http://127.0.0.1:8080/v1' or '/v1' in a page. */
  baseUrl: string;
  profile: ModelProfile;
  capabilities: readonly Capability[];
  /** With 'sessions': sessions open now. */
  openSessions?: () => number;
}

export type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

/** One server-sent event's data: parsed JSON, or '[DONE]'. */
export type SseData = Json | '[DONE]';

/** Request helpers over a target, used by every case. */
export class Api {
  constructor(readonly target: ConformanceTarget) {}

  get profile(): ModelProfile {
    return this.target.profile;
  }

  url(path: string): string {
    return this.target.baseUrl.replace(/\/+$/, '') + path;
  }

  /** A body with the model and the profile's prompt, then `body` over it. */
  body(body: Record<string, unknown> = {}): Record<string, unknown> {
    return { model: this.profile.model, prompt: this.profile.prompt, ...body };
  }

  raw(path: string, init: Parameters<FetchLike>[1] = {}): Promise<Response> {
    return this.target.fetch(this.url(path), init);
  }

  post(body: unknown, init: { signal?: AbortSignal; path?: string } = {}): Promise<Response> {
    return this.raw(init.path ?? '/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      ...(init.signal ? { signal: init.signal } : {}),
    });
  }

  /** POST a non-streamed request; the JSON of a 200 answer (anything else fails the case). */
  async complete(body: Record<string, unknown>): Promise<Json> {
    const r = await this.post(this.body(body));
    const text = await r.text();
    if (r.status !== 200) fail(`expected 200 for ${JSON.stringify(body)}, got ${r.status}: ${text}`);
    ok((r.headers.get('content-type') ?? '').includes('application/json'), 'a completion is application/json');
    return JSON.parse(text);
  }

  /** POST a streamed request; the data of every event (the last one '[DONE]'). */
  async stream(body: Record<string, unknown>): Promise<SseData[]> {
    const r = await this.post(this.body({ ...body, stream: true }));
    const text = await r.text();
    if (r.status !== 200) fail(`expected 200 for ${JSON.stringify(body)}, got ${r.status}: ${text}`);
    ok((r.headers.get('content-type') ?? '').includes('text/event-stream'), 'a stream is text/event-stream');
    return parseSse(text);
  }

  /** POST `body` as it is; checks an OpenAI error answer and returns its `error`. */
  async error(body: unknown, status: number, param: string | null, code?: string | null): Promise<Json> {
    const r = await this.post(body);
    return checkError(r, status, param, code, typeof body === 'string' ? body : JSON.stringify(body));
  }

  /**
   * The id of the token that reads `text` after `context`. When several do, the one whose raw
   * logprob there is `logprob` (asked of the server by scoring each), else the highest id (in
   * SentencePiece vocabularies the byte tokens come first, the pieces after them).
   */
  async tokenId(context: readonly number[], text: string, logprob?: number): Promise<number> {
    const candidates = idsOfText(this.profile.tokenizer, context, text);
    if (candidates.length === 1) return candidates[0]!;
    if (logprob !== undefined) {
      let best = candidates[candidates.length - 1]!;
      let bestDistance = Infinity;
      for (const id of candidates) {
        const scored = await this.complete({ prompt: [...context, id], max_tokens: 0, echo: true, logprobs: 0 });
        const distance = Math.abs(scored.choices[0].logprobs.token_logprobs.at(-1) - logprob);
        if (distance < bestDistance) {
          bestDistance = distance;
          best = id;
        }
      }
      return best;
    }
    return candidates[candidates.length - 1]!;
  }

  openai(): OpenAI {
    return new OpenAI({
      apiKey: 'conformance',
      baseURL: this.target.baseUrl,
      maxRetries: 0,
      dangerouslyAllowBrowser: true,
      fetch: this.target.fetch as unknown as typeof fetch,
    });
  }
}

/** Checks an error response: status, JSON body {error: {message, type, param, code}}. */
export async function checkError(r: Response, status: number, param: string | null, code: string | null | undefined, what: string): Promise<Json> {
  const text = await r.text();
  if (r.status !== status) fail(`expected ${status} for ${what}, got ${r.status}: ${text}`);
  ok((r.headers.get('content-type') ?? '').includes('application/json'), `the ${status} is application/json`);
  const body = JSON.parse(text);
  keys(body, ['error'], `error body for ${what}`);
  keys(body.error, ['code', 'message', 'param', 'type'], `error object for ${what}`);
  ok(typeof body.error.message === 'string' && body.error.message.length > 0, `error message for ${what}`);
  ok(typeof body.error.type === 'string', `error type for ${what}`);
  eq(body.error.param, param, `error param for ${what} (${body.error.message})`);
  if (code !== undefined) eq(body.error.code, code, `error code for ${what} (${body.error.message})`);
  return body.error;
}

export function parseSse(text: string): SseData[] {
  ok(text.endsWith('\n\n'), `the event stream ends with a blank line: ${JSON.stringify(text.slice(-40))}`);
  return text
    .split(/\r?\n\r?\n/)
    .filter((e) => e.trim() !== '')
    .map((event) => {
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trimStart())
        .join('\n');
      return data === '[DONE]' ? data : JSON.parse(data);
    });
}

/** The chunks of a stream (without [DONE] and without a usage-only chunk). */
export function chunksOf(events: SseData[]): Json[] {
  return events.filter((e) => e !== '[DONE]' && Array.isArray(e.choices) && e.choices.length > 0);
}

/** Per choice index: the streamed text, logprob entries, finish_reason chunks. */
export function streamedChoices(events: SseData[]): Map<number, { text: string; logprobs: Json | null; finishes: (string | null)[] }> {
  const out = new Map<number, { text: string; logprobs: Json | null; finishes: (string | null)[] }>();
  for (const chunk of chunksOf(events)) {
    for (const c of chunk.choices) {
      let entry = out.get(c.index);
      if (!entry) out.set(c.index, (entry = { text: '', logprobs: null, finishes: [] }));
      entry.text += c.text;
      entry.finishes.push(c.finish_reason);
      if (c.logprobs) {
        entry.logprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
        for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) entry.logprobs[k].push(...c.logprobs[k]);
      }
    }
  }
  return out;
}

/**
 * The token ids whose text after `context` is `text` (the tokenizer's view), special tokens left out.
 * Usually one; a character that is both a piece and a byte token ('.' and <0x2E>) gives two.
 */
export function idsOfText(tokenizer: ProfileTokenizer, context: readonly number[], text: string): number[] {
  const window = context.slice(-6);
  const before = tokenizer.decode(window, { skipSpecialTokens: true });
  const candidates: number[] = [];
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    if (tokenizer.isSpecial(id)) continue;
    let after: string;
    try {
      after = tokenizer.decode([...window, id], { skipSpecialTokens: true });
    } catch {
      continue;
    }
    if (after.startsWith(before) && after.slice(before.length) === text) candidates.push(id);
  }
  if (candidates.length === 0) fail(`no token of the vocabulary reads ${JSON.stringify(text)} here`);
  return candidates;
}
