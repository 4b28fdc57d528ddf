// The in-page fetch shim: interception, pass-through, Response streaming, abort, and the
// official `openai` client talking to it.
import OpenAI from 'openai';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { installFetchShim } from '../../src/api/shim.ts';
import { DEFAULT_STORY, fakeEngine } from '../helpers/fake-generator.ts';

const PROMPT = 'Once upon a time';
const BASE = 'http://127.0.0.1:1234/v1';

/** A stand-in global object: its own fetch (recording calls) and a page location. */
function fakeGlobal(href?: string) {
  const passed = vi.fn(async (..._args: unknown[]) => new Response('from the network', { status: 299 }));
  const target = { fetch: passed as unknown as typeof fetch, ...(href ? { location: { href } } : {}) } as unknown as typeof globalThis;
  return { target, passed };
}

async function sseData(response: Response): Promise<string[]> {
  const text = await response.text();
  return text
    .split('\n\n')
    .filter(Boolean)
    .map((e) => e.replace(/^data: /, ''));
}

let uninstall: (() => void) | undefined;
afterEach(() => {
  uninstall?.();
  uninstall = undefined;
});

describe('installFetchShim', () => {
  it('patches fetch and puts the previous one back', () => {
    const { target, passed } = fakeGlobal('https://page.example/app/');
    const remove = installFetchShim(fakeEngine(), { target });
    expect(target.fetch).not.toBe(passed);
    remove();
    expect(target.fetch).toBe(passed);
    remove(); // twice is harmless
    expect(target.fetch).toBe(passed);
  });

  it('passes other requests to the previous fetch with the same arguments', async () => {
    const { target, passed } = fakeGlobal('https://page.example/app/');
    uninstall = installFetchShim(fakeEngine(), { target });
    const init = { method: 'POST', body: 'x' };
    for (const url of [
      'https://other.example/v1/completions',
      'https://page.example/v2/models',
      'https://page.example/v1x',
      '/api/data',
      new URL('https://page.example/index.html'),
    ]) {
      passed.mockClear();
      const r = await target.fetch(url, init);
      expect(r.status).toBe(299);
      expect(passed).toHaveBeenCalledTimes(1);
      expect(passed.mock.calls[0]![0]).toBe(url);
      expect(passed.mock.calls[0]![1]).toBe(init);
    }
    passed.mockClear();
    const request = new Request('https://other.example/v1/models');
    await target.fetch(request);
    expect(passed.mock.calls[0]).toEqual([request]);
  });

  it('answers same-origin /v1 by default, relative URLs resolved against the page', async () => {
    const { target, passed } = fakeGlobal('https://page.example/app/index.html');
    uninstall = installFetchShim(fakeEngine(), { target });
    for (const url of ['/v1/models', 'https://page.example/v1/models', new URL('https://page.example/v1/models?ai_project_id=1')]) {
      const r = await target.fetch(url);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toContain('application/json');
      expect((await r.json()).data[0].id).toBe('fake-llama');
    }
    expect(passed).not.toHaveBeenCalled();
    // Relative to the page's folder: /app/v1/models is not under /v1.
    await target.fetch('v1/models');
    expect(passed).toHaveBeenCalledTimes(1);
  });

  it('once uninstalled, passes every request on, also through references kept to it', async () => {
    const { target, passed } = fakeGlobal('https://page.example/');
    const remove = installFetchShim(fakeEngine(), { target });
    const kept = target.fetch; // as the openai client keeps the fetch it was made with
    expect((await kept('/v1/models')).status).toBe(200);
    remove();
    expect((await kept('/v1/models')).status).toBe(299);
    expect(passed).toHaveBeenCalledTimes(1);
  });

  it('leaves a shim installed over it in place when uninstalled first', async () => {
    const { target, passed } = fakeGlobal('https://page.example/');
    const removeA = installFetchShim(fakeEngine({ id: 'a' }), { target });
    const removeB = installFetchShim(fakeEngine({ id: 'b' }), { target, baseUrl: '/b/v1' });
    removeA();
    const models = async (path: string) => (await (await target.fetch(path)).json()) as { data: { id: string }[] };
    expect((await models('/b/v1/models')).data[0]!.id).toBe('b');
    expect((await target.fetch('/v1/models')).status).toBe(299); // A's path now reaches the network
    removeB();
    expect((await target.fetch('/b/v1/models')).status).toBe(299);
    expect(passed).toHaveBeenCalledTimes(2);
  });

  it("resolves URLs against the document's base URL, as fetch does", async () => {
    const { target } = fakeGlobal('about:srcdoc'); // a srcdoc frame: its base is its parent's URL
    Object.assign(target, { document: { baseURI: 'https://page.example/app/' } });
    uninstall = installFetchShim(fakeEngine(), { target, baseUrl: 'api/v1' });
    expect((await target.fetch('https://page.example/app/api/v1/models')).status).toBe(200);
    expect((await target.fetch('api/v1/models')).status).toBe(200);
  });

  it('takes a base URL', async () => {
    const { target, passed } = fakeGlobal('https://page.example/');
    uninstall = installFetchShim(fakeEngine(), { target, baseUrl: '/llm/v1/' });
    expect((await target.fetch('/llm/v1/models')).status).toBe(200);
    await target.fetch('/v1/models');
    expect(passed).toHaveBeenCalledTimes(1);
  });

  it('answers a Request object and (url, init) pairs', async () => {
    const { target } = fakeGlobal('https://page.example/');
    uninstall = installFetchShim(fakeEngine(), { target });
    const body = JSON.stringify({ model: 'fake-llama', prompt: PROMPT, temperature: 0 });
    const viaRequest = await target.fetch(
      new Request('https://page.example/v1/completions', { method: 'POST', body, headers: { 'content-type': 'application/json' } }),
    );
    expect(viaRequest.status).toBe(200);
    expect((await viaRequest.json()).choices[0].text).toBe(DEFAULT_STORY);
    const viaInit = await target.fetch('/v1/completions', { method: 'POST', body });
    expect((await viaInit.json()).choices[0].text).toBe(DEFAULT_STORY);
    // init overrides the Request's own fields, as in fetch.
    const overridden = await target.fetch(new Request('https://page.example/v1/completions', { method: 'POST', body: '{' }), {
      method: 'POST',
      body,
    });
    expect(overridden.status).toBe(200);
  });

  it('answers errors with their status and JSON', async () => {
    const { target } = fakeGlobal('https://page.example/');
    uninstall = installFetchShim(fakeEngine(), { target });
    const r = await target.fetch('/v1/completions', { method: 'POST', body: JSON.stringify({ model: 'nope' }) });
    expect(r.status).toBe(404);
    expect((await r.json()).error.code).toBe('model_not_found');
    const m = await target.fetch('/v1/completions');
    expect(m.status).toBe(405);
    expect(m.headers.get('allow')).toBe('POST');
    const head = await target.fetch('/v1/models', { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  it('answers 503 when the engine failed to load, without an unhandled rejection', async () => {
    const { target } = fakeGlobal('https://page.example/');
    uninstall = installFetchShim(Promise.reject(new Error('no adapter')), { target });
    const r = await target.fetch('/v1/models');
    expect(r.status).toBe(503);
    // A retry cannot cure it: the openai client would otherwise retry twice first.
    expect(r.headers.get('x-should-retry')).toBe('false');
    expect((await r.json()).error.message).toContain('no adapter');
  });

  it('streams the events as the Response body', async () => {
    const { target } = fakeGlobal('https://page.example/');
    uninstall = installFetchShim(fakeEngine({ delayMs: 1 }), { target });
    const r = await target.fetch('/v1/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'fake', prompt: PROMPT, temperature: 0, stream: true }),
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    expect(r.body).toBeInstanceOf(ReadableStream);
    const data = await sseData(r);
    expect(data.at(-1)).toBe('[DONE]');
    const text = data
      .slice(0, -1)
      .map((d) => JSON.parse(d).choices[0].text)
      .join('');
    expect(text).toBe(DEFAULT_STORY);
  });

  it('rejects with an AbortError for a signal aborted before or while waiting', async () => {
    const { target } = fakeGlobal('https://page.example/');
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(50) });
    uninstall = installFetchShim(engine, { target });
    const body = JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 50 });
    const early = new AbortController();
    early.abort();
    await expect(target.fetch('/v1/completions', { method: 'POST', body, signal: early.signal })).rejects.toMatchObject({ name: 'AbortError' });
    expect(engine.generator.events).toHaveLength(0);

    const later = new AbortController();
    setTimeout(() => later.abort(), 30);
    await expect(target.fetch('/v1/completions', { method: 'POST', body, signal: later.signal })).rejects.toMatchObject({ name: 'AbortError' });
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(50);

    // Through a Request's own signal.
    const viaRequest = new AbortController();
    setTimeout(() => viaRequest.abort(), 30);
    const request = new Request('https://page.example/v1/completions', { method: 'POST', body, signal: viaRequest.signal });
    await expect(target.fetch(request)).rejects.toMatchObject({ name: 'AbortError' });

    // While the body is still being read (a streamed request body).
    const whileReading = new AbortController();
    const slowBody = new ReadableStream<Uint8Array>({
      start(c) {
        setTimeout(() => whileReading.abort(), 5);
        setTimeout(() => (c.enqueue(new TextEncoder().encode(body)), c.close()), 30);
      },
    });
    const sessions = engine.generator.sessions.length;
    const init = { method: 'POST', body: slowBody, signal: whileReading.signal, duplex: 'half' } as RequestInit;
    await expect(target.fetch('/v1/completions', init)).rejects.toMatchObject({ name: 'AbortError' });
    expect(engine.generator.sessions.length).toBe(sessions);
  });

  it('aborting during a stream errors the body and ends the generation', async () => {
    const { target } = fakeGlobal('https://page.example/');
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(50) });
    uninstall = installFetchShim(engine, { target });
    const controller = new AbortController();
    const r = await target.fetch('/v1/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 50, stream: true }),
      signal: controller.signal,
    });
    const reader = r.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toMatch(/^data: /);
    controller.abort();
    await expect(
      (async () => {
        for (;;) if ((await reader.read()).done) return 'done';
      })(),
    ).rejects.toMatchObject({ name: 'AbortError' });
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    expect(engine.generator.endings[0]!.how).toBe('aborted');
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(50);
  });

  it('cancelling the body ends the generation', async () => {
    const { target } = fakeGlobal('https://page.example/');
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(50) });
    uninstall = installFetchShim(engine, { target });
    const r = await target.fetch('/v1/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 50, stream: true }),
    });
    const reader = r.body!.getReader();
    await reader.read();
    await reader.cancel();
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(50);
  });

  it('generates to the end even when the body is never read (the model is not held)', async () => {
    const { target } = fakeGlobal('https://page.example/');
    const engine = fakeEngine({ script: ' a'.repeat(20) });
    uninstall = installFetchShim(engine, { target });
    const r = await target.fetch('/v1/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 50, stream: true }),
    });
    await vi.waitFor(() => expect(engine.generator.endings).toHaveLength(1));
    expect(engine.generator.endings[0]).toMatchObject({ how: 'stop', tokens: 20 });
    expect((await sseData(r)).at(-1)).toBe('[DONE]');
  });
});

describe('the openai client against the shim', () => {
  function client(options: { explicitFetch?: boolean } = {}) {
    return new OpenAI({
      apiKey: 'x',
      baseURL: BASE,
      maxRetries: 0,
      dangerouslyAllowBrowser: true,
      ...(options.explicitFetch ? { fetch: globalThis.fetch } : {}),
    });
  }

  it('creates a completion', async () => {
    uninstall = installFetchShim(fakeEngine(), { baseUrl: BASE });
    for (const explicitFetch of [false, true]) {
      const completion = await client({ explicitFetch }).completions.create({ model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 50 });
      expect(completion.object).toBe('text_completion');
      expect(completion.choices[0]!.text).toBe(DEFAULT_STORY);
      expect(completion.choices[0]!.finish_reason).toBe('stop');
      expect(completion.usage?.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
      expect((completion as { _request_id?: string | null })._request_id).toMatch(/^req_[A-Za-z0-9]{24}$/);
    }
  });

  it('streams a completion, with usage', async () => {
    uninstall = installFetchShim(fakeEngine(), { baseUrl: BASE });
    const stream = await client().completions.create({
      model: 'fake',
      prompt: PROMPT,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const finish: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        text += choice.text;
        finish.push(choice.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(DEFAULT_STORY);
    expect(finish.at(-1)).toBe('stop');
    expect(usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('stops a stream early with the client controller', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(50) });
    uninstall = installFetchShim(engine, { baseUrl: BASE });
    const stream = await client().completions.create({ model: 'fake', prompt: PROMPT, max_tokens: 50, stream: true });
    let chunks = 0;
    for await (const _chunk of stream) {
      if (++chunks === 2) break;
    }
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(50);
  });

  it('lists and retrieves models', async () => {
    uninstall = installFetchShim(fakeEngine(), { baseUrl: BASE });
    const models = [];
    for await (const model of client().models.list()) models.push(model);
    expect(models.map((m) => m.id)).toEqual(['fake-llama']);
    expect((await client().models.retrieve('fake')).id).toBe('fake-llama');
  });

  it('surfaces errors as the client error classes', async () => {
    uninstall = installFetchShim(fakeEngine(), { baseUrl: BASE });
    const bad = await client()
      .completions.create({ model: 'fake', prompt: PROMPT, temperature: 5 })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');
    const missing = await client()
      .completions.create({ model: 'gpt-3.5-turbo-instruct', prompt: PROMPT })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
  });

  it('aborts through the request signal', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(50) });
    uninstall = installFetchShim(engine, { baseUrl: BASE });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    const err = await client()
      .completions.create({ model: 'fake', prompt: PROMPT, max_tokens: 50 }, { signal: controller.signal })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIUserAbortError);
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
  });
});
