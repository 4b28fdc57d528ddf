// The Node host: a real HTTP server on an ephemeral port with the fake generator, and the CLI.
import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ApiEngine } from '../../src/api/handler.ts';
import { runCli } from '../../src/node/cli.ts';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { DEFAULT_STORY, fakeEngine } from '../helpers/fake-generator.ts';

const PROMPT = 'Once upon a time';

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function start(engine: ApiEngine | Promise<ApiEngine>, options: { maxBodyBytes?: number } = {}) {
  const logged: string[] = [];
  server = await startServer(engine, { port: 0, log: (m) => logged.push(m), ...options });
  return { url: server.url, logged };
}

function postJson(url: string, body: unknown, init: RequestInit = {}) {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...init });
}

describe('startServer', () => {
  it('listens on an ephemeral port of 127.0.0.1', async () => {
    const { url } = await start(fakeEngine());
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(url).not.toMatch(/:8080$/);
  });

  it('answers completions', async () => {
    const { url } = await start(fakeEngine());
    const r = await postJson(`${url}/v1/completions`, { model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 50 });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('application/json');
    expect(r.headers.get('access-control-allow-origin')).toBeNull(); // no Origin: no page to grant
    expect(r.headers.get('vary')).toBe('Origin');
    expect(r.headers.get('x-request-id')).toMatch(/^req_/);
    const body = await r.json();
    expect(body.object).toBe('text_completion');
    expect(body.choices[0].text).toBe(DEFAULT_STORY);
  });

  it('answers models and errors', async () => {
    const { url } = await start(fakeEngine());
    const models = await (await fetch(`${url}/v1/models`)).json();
    expect(models).toEqual({ object: 'list', data: [expect.objectContaining({ id: 'fake-llama', object: 'model', owned_by: 'webgpu-llama' })] });
    const one = await fetch(`${url}/v1/models/fake`);
    expect((await one.json()).id).toBe('fake-llama');
    const missing = await fetch(`${url}/v1/nothing`);
    expect(missing.status).toBe(404);
    expect((await missing.json()).error.type).toBe('not_found_error');
    const bad = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, top_p: 2 });
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.param).toBe('top_p');
    const malformed = await fetch(`${url}/v1/completions`, { method: 'POST', body: '{oops' });
    expect(malformed.status).toBe(400);
    const wrongMethod = await fetch(`${url}/v1/completions`);
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
  });

  it('streams over the wire', async () => {
    const { url } = await start(fakeEngine({ delayMs: 2 }));
    const r = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, temperature: 0, stream: true });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    const reader = r.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let reads = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      reads++;
      text += decoder.decode(value, { stream: true });
    }
    expect(reads).toBeGreaterThan(1); // arrived in pieces, not as one body
    const data = text.split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
    expect(data.at(-1)).toBe('[DONE]');
    expect(data.slice(0, -1).map((d) => JSON.parse(d).choices[0].text).join('')).toBe(DEFAULT_STORY);
  });

  it('answers CORS preflights of a local page, naming its origin', async () => {
    const { url } = await start(fakeEngine());
    const r = await fetch(`${url}/v1/completions`, {
      method: 'OPTIONS',
      headers: {
        origin: 'http://localhost:5173',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, x-stainless-os',
        'access-control-request-private-network': 'true',
      },
    });
    expect(r.status).toBe(204);
    expect(r.headers.get('access-control-allow-origin')).toBe('http://localhost:5173');
    expect(r.headers.get('vary')).toBe('Origin');
    expect(r.headers.get('access-control-allow-methods')).toContain('POST');
    expect(r.headers.get('access-control-allow-headers')).toBe('authorization, content-type, x-stainless-os');
    expect(r.headers.get('access-control-allow-private-network')).toBe('true');
  });

  it('answers a body over the limit with 413', async () => {
    const { url } = await start(fakeEngine());
    const huge = JSON.stringify({ model: 'fake', prompt: 'a'.repeat(5 * 1024 * 1024) });
    const r = await fetch(`${url}/v1/completions`, { method: 'POST', body: huge });
    expect(r.status).toBe(413);
    expect(r.headers.get('x-request-id')).toMatch(/^req_/); // every response has one, this one too
    expect((await r.json()).error.code).toBe('request_too_large');
    // The server is still fine.
    expect((await fetch(`${url}/v1/models`)).status).toBe(200);
  });

  it('reads a body with a byte-order mark as the page does (Request.text() drops it)', async () => {
    const { url } = await start(fakeEngine());
    const json = JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 2 });
    const r = await fetch(`${url}/v1/completions`, { method: 'POST', body: new Uint8Array([0xef, 0xbb, 0xbf, ...new TextEncoder().encode(json)]) });
    expect(r.status).toBe(200);
  });

  it("answers HEAD with GET's headers, its content-length included, and no body", async () => {
    const { url } = await start(fakeEngine());
    const got = await fetch(`${url}/v1/models`);
    const length = (await got.arrayBuffer()).byteLength;
    expect(length).toBeGreaterThan(0);
    const head = await fetch(`${url}/v1/models`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(length));
    expect((await head.arrayBuffer()).byteLength).toBe(0);
  });

  it('answers a request target that is no URL (GET //[/) with 404, and logs no server error', async () => {
    const { url, logged } = await start(fakeEngine());
    const target = new URL(url);
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: target.hostname, port: target.port, path: '//[/v1/models', method: 'GET' }, (res) => {
        let text = '';
        res.on('data', (piece: Buffer) => (text += piece.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body: text }));
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(404);
    expect(JSON.parse(body).error.code).toBe('not_found');
    expect(logged).toEqual([]);
  });

  it('logs nothing for a client that leaves while sending its body', async () => {
    const { url, logged } = await start(fakeEngine());
    const target = new URL(`${url}/v1/completions`);
    await new Promise<void>((resolve) => {
      const req = httpRequest({ host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers: { 'content-length': '100000' } });
      req.on('error', () => resolve());
      req.write('{"model": "fake", "prompt": "');
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 50);
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(logged).toEqual([]);
    expect((await fetch(`${url}/v1/models`)).status).toBe(200);
  });

  it('answers a chunked body over the limit with 413', async () => {
    const { url } = await start(fakeEngine(), { maxBodyBytes: 1000 });
    const parts = [new TextEncoder().encode('{"model": "fake", "prompt": "'), new TextEncoder().encode('a'.repeat(3000)), new TextEncoder().encode('"}')];
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = parts.shift();
        if (next) controller.enqueue(next);
        else controller.close();
      },
    });
    const r = await fetch(`${url}/v1/completions`, { method: 'POST', body, duplex: 'half' } as RequestInit);
    expect(r.status).toBe(413);
  });

  it('answers 503 when the model failed to load', async () => {
    const { url } = await start(Promise.reject(new Error('bad GGUF header')));
    const r = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT });
    expect(r.status).toBe(503);
    expect((await r.json()).error.message).toContain('bad GGUF header');
  });

  it('aborts the generation when the connection closes', async () => {
    const engine = fakeEngine({ delayMs: 10, script: ' a'.repeat(200), contextLength: 512 });
    const { url } = await start(engine);
    const target = new URL(`${url}/v1/completions`);
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        { host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers: { 'content-type': 'application/json' } },
        (res) => {
          res.once('data', () => {
            req.destroy(); // the client goes away mid-stream
            resolve();
          });
        },
      );
      req.on('error', (err) => ((err as NodeJS.ErrnoException).code === 'ECONNRESET' ? undefined : reject(err)));
      req.end(JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 200, stream: true }));
    });
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    expect(engine.generator.endings[0]!.how).toBe('aborted');
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(50);
  });

  it('aborts a non-streamed generation when the connection closes', async () => {
    const engine = fakeEngine({ delayMs: 10, script: ' a'.repeat(200), contextLength: 512 });
    const { url } = await start(engine);
    const controller = new AbortController();
    const pending = postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, max_tokens: 200 }, { signal: controller.signal });
    await vi.waitFor(() => expect(engine.generator.active).toBe(1));
    controller.abort();
    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    expect(engine.generator.endings[0]!.how).toBe('aborted');
  });

  it('serves the openai client', async () => {
    const { url } = await start(fakeEngine());
    const client = new OpenAI({ apiKey: 'x', baseURL: `${url}/v1`, maxRetries: 0 });
    const completion = await client.completions.create({ model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 50 });
    expect(completion.choices[0]!.text).toBe(DEFAULT_STORY);
    const stream = await client.completions.create({ model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 50, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe(DEFAULT_STORY);
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(['fake-llama']);
    await expect(client.completions.create({ model: 'other', prompt: PROMPT })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('reports a mid-stream failure as an error event, then [DONE]', async () => {
    const { url, logged } = await start(fakeEngine({ failAfter: 2 }));
    const r = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, temperature: 0, stream: true });
    const data = (await r.text()).split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
    expect(data.at(-1)).toBe('[DONE]');
    expect(JSON.parse(data.at(-2)!).error.type).toBe('server_error');
    expect(logged.join('\n')).toContain('fake GPU failure');
  });

  it('answers 429 when the queue of waiting requests is full, and recovers', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(10), maxQueued: 1 });
    const { url } = await start(engine);
    const body = { model: 'fake', prompt: PROMPT, max_tokens: 10 };
    const responses = await Promise.all([0, 1, 2].map(() => postJson(`${url}/v1/completions`, body)));
    const statuses = responses.map((r) => r.status);
    expect(statuses).toEqual([200, 200, 429]);
    const error = (await responses[2]!.json()).error;
    expect(error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded', param: null });
    expect(responses[2]!.headers.get('retry-after')).toBe('1');
    for (const r of responses.slice(0, 2)) expect((await r.json()).choices[0].text).toBe(' a'.repeat(10));
    expect((await postJson(`${url}/v1/completions`, body)).status).toBe(200);
  });

  it('ends a stream of several choices that fails midway with an error event, then [DONE]', async () => {
    const { url } = await start(fakeEngine({ failAfter: 3 }));
    const r = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, temperature: 0, stream: true, n: 2 });
    const data = (await r.text()).split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
    expect(data.at(-1)).toBe('[DONE]');
    expect(JSON.parse(data.at(-2)!).error).toMatchObject({ type: 'server_error' });
    // Choice 0 got its text before the failure; nothing claims to have finished.
    const chunks = data.slice(0, -2).map((d) => JSON.parse(d));
    expect(chunks.every((c) => c.choices[0].index === 0 && c.choices[0].finish_reason === null)).toBe(true);
  });

  it('frees the model when a client closes a stream of several choices', async () => {
    const engine = fakeEngine({ delayMs: 10, script: ' a'.repeat(100), contextLength: 512 });
    const { url } = await start(engine);
    const controller = new AbortController();
    const r = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, max_tokens: 100, stream: true, n: 3 }, { signal: controller.signal });
    const reader = r.body!.getReader();
    await reader.read();
    controller.abort();
    await vi.waitFor(() => expect(engine.generator.active).toBe(0));
    // The three choices decode at once: every one ends with the client.
    expect(engine.generator.sequences).toHaveLength(3);
    expect(engine.generator.endings.map((e) => e.how)).toEqual(['aborted', 'aborted', 'aborted']);
    // The next request runs normally.
    const next = await postJson(`${url}/v1/completions`, { model: 'fake', prompt: PROMPT, max_tokens: 3 });
    expect((await next.json()).choices[0].text).toBe(' a a a');
  });

  it('refuses a port in use', async () => {
    const { url } = await start(fakeEngine());
    const port = Number(new URL(url).port);
    await expect(startServer(fakeEngine(), { port, log: () => {} })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });
});

describe('cli', () => {
  function io(engine?: ApiEngine | Error) {
    const out: string[] = [];
    const err: string[] = [];
    const loads: [string, { id?: string; weightStorage?: string }][] = [];
    return {
      out,
      err,
      loads,
      io: {
        stdout: { write: (s: string) => out.push(s) },
        stderr: { write: (s: string) => err.push(s) },
        loadModel: async (path: string, options: { id?: string; weightStorage?: string }) => {
          loads.push([path, options]);
          if (engine instanceof Error) throw engine;
          return engine ?? fakeEngine();
        },
      },
    };
  }

  it('prints help', async () => {
    const t = io();
    expect(await runCli(['--help'], t.io)).toBe(0);
    expect(t.out.join('')).toContain('webgpu-llama serve --model PATH');
    expect(t.out.join('')).toContain('webgpu-llama complete --model PATH --prompt TEXT');
  });

  it('completes a prompt to stdout', async () => {
    const t = io();
    const code = await runCli(['complete', '--model', 'models/x.gguf', '--prompt', PROMPT, '--max-tokens', '5', '--temperature', '0', '--seed', '3'], t.io);
    expect(t.err.join('')).toBe('');
    expect(code).toBe(0);
    expect(t.out.join('')).toBe(' there was a little robot\n');
    expect(t.loads).toEqual([['models/x.gguf', {}]]);
  });

  it('passes --weight-storage to the loader', async () => {
    const t = io();
    expect(await runCli(['complete', '--model', 'hf-folder', '--prompt', PROMPT, '--max-tokens', '1', '--weight-storage', 'q4_0'], t.io)).toBe(0);
    expect(t.loads).toEqual([['hf-folder', { weightStorage: 'q4_0' }]]);
  });

  it('passes stop strings, sampling extensions, logit bias and --json parameters', async () => {
    const engine = fakeEngine({ script: ' Hello world STOP and more' });
    const t = io(engine);
    const code = await runCli(
      ['complete', '--model', 'm', '--prompt', PROMPT, '--stop', 'STOP', '--stop', 'never', '--top-k', '5', '--min-p', '0.1',
        '--repetition-penalty', '1.1', '--presence-penalty', '0.5', '--frequency-penalty', '0.5', '--logit-bias', '7=-100',
        '--json', '{"n": 2, "seed": 1}'],
      t.io,
    );
    expect(t.err.join('')).toBe('');
    expect(code).toBe(0);
    expect(t.out.join('')).toBe(' Hello world \n--- choice 1\n Hello world \n');
    expect(engine.generator.sessions[0]!.sampling).toMatchObject({
      seed: 1,
      topK: 5,
      minP: 0.1,
      repetitionPenalty: 1.1,
      presencePenalty: 0.5,
      frequencyPenalty: 0.5,
      logitBias: new Map([[7, -100]]),
    });
  });

  it('sends --ignore-eos and --json values that validation then checks', async () => {
    const ok = io(fakeEngine({ script: ' a' }));
    expect(await runCli(['complete', '--model', 'm', '--prompt', 'x', '--ignore-eos', '--max-tokens', '3', '--temperature', '0'], ok.io)).toBe(0);
    expect(ok.out.join('')).toMatch(/^ a/);
    const bad = io();
    expect(await runCli(['complete', '--model', 'm', '--prompt', 'x', '--json', '{"top_k": "many"}'], bad.io)).toBe(1);
    expect(bad.err.join('')).toContain('top_k');
  });

  it('fails with a message and exit code 1', async () => {
    const cases: [string[], RegExp][] = [
      [[], /command is required/],
      [['launch', '--model', 'x'], /unknown command 'launch'/],
      [['complete', '--prompt', 'x'], /--model PATH is required/],
      [['complete', '--model', 'x'], /--prompt TEXT is required/],
      [['complete', '--model', 'x', '--prompt', 'y', '--max-tokens', 'many'], /--max-tokens must be an integer/],
      [['complete', '--model', 'x', '--prompt', 'y', '--temperature', '9'], /temperature/],
      [['serve', '--model', 'x', '--port', '99999'], /--port/],
      [['serve', '--model', 'x', '--bogus'], /bogus/],
      [['serve', '--model', 'x', '--stop', 'y'], /--stop is for 'complete'/],
      [['complete', '--model', 'x', '--prompt', 'y', '--logit-bias', 'abc'], /--logit-bias takes ID=BIAS/],
      [['complete', '--model', 'x', '--prompt', 'y', '--json', '[1]'], /--json must be a JSON object/],
      [['complete', '--model', 'x', '--prompt', 'y', '--json', '{oops'], /--json must be a JSON object/],
      [['complete', '--model', 'x', '--prompt', 'y', '--top-k', '1.5'], /--top-k must be an integer/],
      [['serve', '--model', 'x', '--weight-storage', 'q2'], /--weight-storage must be one of f16, f32, source, q8_0, q4_0, got 'q2'/],
    ];
    for (const [argv, message] of cases) {
      const t = io();
      expect(await runCli(argv, t.io), argv.join(' ')).toBe(1);
      expect(t.err.join(''), argv.join(' ')).toMatch(message);
    }
    const failing = io(new Error('no such file'));
    expect(await runCli(['complete', '--model', 'x', '--prompt', 'y'], failing.io)).toBe(1);
    expect(failing.err.join('')).toContain('no such file');
  });

  it('serves until stopped', async () => {
    const t = io(fakeEngine({ id: 'my-model' }));
    const controller = new AbortController();
    let listening!: (s: RunningServer) => void;
    const started = new Promise<RunningServer>((r) => (listening = r));
    const done = runCli(['serve', '--model', 'm.gguf', '--id', 'my-model', '--port', '0'], {
      ...t.io,
      signal: controller.signal,
      onListening: listening,
    });
    const running = await started;
    const models = await (await fetch(`${running.url}/v1/models`)).json();
    expect(models.data[0].id).toBe('my-model');
    expect(t.loads).toEqual([['m.gguf', { id: 'my-model' }]]);
    await vi.waitFor(() => expect(t.out.join('')).toContain(`${running.url}/v1`));
    controller.abort();
    expect(await done).toBe(0);
    await expect(fetch(`${running.url}/v1/models`)).rejects.toThrow();
  });

  it('exits 1 when serving a model that fails to load', async () => {
    const t = io(new Error('unsupported architecture'));
    expect(await runCli(['serve', '--model', 'bad.gguf', '--port', '0'], { ...t.io, signal: new AbortController().signal })).toBe(1);
    expect(t.err.join('')).toContain('unsupported architecture');
  });
});
