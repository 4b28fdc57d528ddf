// Requests to the request layer (src/api/handler.ts) and what tests read from its answers: the
// JSON body, the server-sent events of a stream, the OpenAI error shape. Shared by the api tests
// against the fake generator (test/api/*.test.ts).
import { expect } from 'vitest';
import { handleApiRequest, type ApiEngine, type ApiResponse } from '../../src/api/handler.ts';

export type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

export function post(engine: ApiEngine | Promise<ApiEngine>, body: unknown, url = '/v1/completions', signal?: AbortSignal): Promise<ApiResponse> {
  return handleApiRequest(engine, {
    method: 'POST',
    url,
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

export function get(engine: ApiEngine | Promise<ApiEngine>, url: string): Promise<ApiResponse> {
  return handleApiRequest(engine, { method: 'GET', url, body: null });
}

export function json(response: ApiResponse): Json {
  expect(typeof response.body).toBe('string');
  return JSON.parse(response.body as string);
}

/** The data of each server-sent event: parsed JSON, or the '[DONE]' string. */
export async function events(response: ApiResponse): Promise<Json[]> {
  expect(typeof response.body).not.toBe('string');
  let text = '';
  for await (const piece of response.body as AsyncIterable<string>) text += piece;
  expect(text.endsWith('\n\n')).toBe(true);
  return text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => {
      expect(e.startsWith('data: ')).toBe(true);
      const data = e.slice('data: '.length);
      return data === '[DONE]' ? data : JSON.parse(data);
    });
}

/** The status of a response, after reading its body (a stream holds the model until read). */
export async function statusOf(pending: Promise<ApiResponse>): Promise<number> {
  const r = await pending;
  if (typeof r.body !== 'string') for await (const _ of r.body);
  return r.status;
}

export function streamedText(evs: Json[]): string {
  return evs
    .filter((e) => e !== '[DONE]' && e.choices?.length)
    .map((e) => e.choices[0].text)
    .join('');
}

export const PROMPT = 'Once upon a time';

export async function expectError(response: Promise<ApiResponse>, status: number, param: string | null, code?: string | null): Promise<Json> {
  const r = await response;
  expect(r.status).toBe(status);
  expect(r.headers['content-type']).toContain('application/json');
  const body = json(r);
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.param).toBe(param);
  if (code !== undefined) expect(body.error.code).toBe(code);
  return body.error;
}
