// Whom the Node host answers (src/node/access.ts), over real HTTP with the fake generator: web
// origins, Host names, API keys (the openai client included), and the CLI flags that set them.
import { request as httpRequest, type OutgoingHttpHeaders } from 'node:http';
import OpenAI from 'openai';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { isLocalOrigin, keyAccepted, accessPolicy, hostNameOf } from '../../src/node/access.ts';
import { runCli } from '../../src/node/cli.ts';
import { startServer, type RunningServer, type ServerOptions } from '../../src/node/http.ts';
import { DEFAULT_STORY, fakeEngine } from '../helpers/fake-generator.ts';

const COMPLETION = JSON.stringify({ model: 'fake-llama', prompt: 'Once upon a time', temperature: 0, max_tokens: 50 });

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function start(options: ServerOptions = {}) {
  const logged: string[] = [];
  const engine = fakeEngine();
  server = await startServer(engine, { port: 0, log: (m) => logged.push(m), ...options });
  return { url: server.url, logged, engine };
}

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A request with exactly these headers (fetch would not let a test set Host). */
function raw(url: string, path: string, options: { method?: string; headers?: OutgoingHttpHeaders; body?: string } = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method: options.method ?? 'GET', headers: options.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** A POST as a page's form or `fetch` with text/plain sends it: no preflight. */
function simplePost(url: string, headers: OutgoingHttpHeaders) {
  return raw(url, '/v1/completions', { method: 'POST', headers: { 'content-type': 'text/plain', ...headers }, body: COMPLETION });
}

function expectOpenAiError(response: RawResponse, status: number, code: string, message: RegExp) {
  expect(response.status).toBe(status);
  const { error } = JSON.parse(response.body);
  expect(error).toEqual({ message: expect.stringMatching(message), type: 'invalid_request_error', param: null, code });
}

describe('origins', () => {
  it('serves programs that send no Origin, with no CORS grant', async () => {
    const { url } = await start();
    const r = await simplePost(url, {});
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body).choices[0].text).toBe(DEFAULT_STORY);
    expect(r.headers['access-control-allow-origin']).toBeUndefined();
    expect(r.headers.vary).toBe('Origin');
  });

  it('serves pages of this machine, naming their origin in the grant', async () => {
    const { url } = await start();
    for (const origin of ['http://localhost:5173', 'https://localhost', 'http://127.0.0.1:8000', 'http://[::1]:3000']) {
      const r = await simplePost(url, { origin });
      expect(r.status, origin).toBe(200);
      expect(r.headers['access-control-allow-origin']).toBe(origin);
      expect(r.headers['access-control-expose-headers']).toContain('x-request-id');
      expect(r.headers.vary).toBe('Origin');
    }
  });

  it("refuses another site's page with a 403 and no grant, before the model runs", async () => {
    const { url, engine } = await start();
    for (const origin of ['https://evil.example', 'http://localhost.evil.example', 'http://127.0.0.1.nip.io', 'null', 'file://']) {
      const r = await simplePost(url, { origin });
      expectOpenAiError(r, 403, 'origin_not_allowed', /--allow-origin/);
      expect(JSON.parse(r.body).error.message).toContain(`'${origin}'`);
      expect(r.headers['access-control-allow-origin']).toBeUndefined();
    }
    expect(engine.generator.endings).toHaveLength(0);
  });

  it('grants preflights, Private Network Access included, to allowed origins only', async () => {
    const { url } = await start();
    const preflight = (origin: string) =>
      raw(url, '/v1/chat/completions', {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type', 'access-control-request-private-network': 'true' },
      });
    const local = await preflight('http://localhost:3000');
    expect(local.status).toBe(204);
    expect(local.headers['access-control-allow-origin']).toBe('http://localhost:3000');
    expect(local.headers['access-control-allow-private-network']).toBe('true');
    const foreign = await preflight('https://evil.example');
    expectOpenAiError(foreign, 403, 'origin_not_allowed', /evil\.example/);
    expect(foreign.headers['access-control-allow-origin']).toBeUndefined();
    expect(foreign.headers['access-control-allow-private-network']).toBeUndefined();
  });

  it('--allow-origin widens it: the named origin only, or every one with a warning', async () => {
    const { url, logged } = await start({ allowedOrigins: ['https://App.example:443/'] });
    expect(logged).toEqual([]);
    const allowed = await simplePost(url, { origin: 'https://app.example' });
    expect(allowed.status).toBe(200);
    expect(allowed.headers['access-control-allow-origin']).toBe('https://app.example');
    expect((await simplePost(url, { origin: 'https://app.example:8443' })).status).toBe(403);
    expect((await simplePost(url, { origin: 'http://app.example' })).status).toBe(403);
    await server!.close();

    const any = await start({ allowedOrigins: ['*'] });
    expect(any.logged.join('\n')).toMatch(/warning: every web origin is allowed/);
    const r = await simplePost(any.url, { origin: 'https://anything.example' });
    expect(r.status).toBe(200);
    expect(r.headers['access-control-allow-origin']).toBe('https://anything.example');
  });

  it('refuses a malformed allowed origin at start', async () => {
    await expect(startServer(fakeEngine(), { port: 0, allowedOrigins: ['app.example'] })).rejects.toThrow(/not an origin/);
    await expect(startServer(fakeEngine(), { port: 0, allowedOrigins: ['https://app.example/path'] })).rejects.toThrow(/without a path/);
  });

  it('knows local origins by their host, not by a prefix', () => {
    expect(isLocalOrigin('http://localhost')).toBe(true);
    expect(isLocalOrigin('https://[::1]:8443')).toBe(true);
    expect(isLocalOrigin('http://localhost.evil.example')).toBe(false);
    expect(isLocalOrigin('ftp://localhost')).toBe(false);
    expect(isLocalOrigin('null')).toBe(false);
  });
});

describe('Host names', () => {
  it('answers localhost, IP literals and the listening name; refuses another name with a 403', async () => {
    const { url, engine } = await start();
    const port = new URL(url).port;
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `app.localhost:${port}`, '10.0.0.7', `LOCALHOST.:${port}`]) {
      expect((await raw(url, '/v1/models', { headers: { host } })).status, host).toBe(200);
    }
    const rebound = await simplePost(url, { host: `attacker.example:${port}`, origin: 'http://attacker.example' });
    expectOpenAiError(rebound, 403, 'host_not_allowed', /'attacker\.example'.*--allow-host attacker\.example/);
    expect(rebound.headers.connection).toBe('close');
    expect(engine.generator.endings).toHaveLength(0);
  });

  it('--allow-host widens it; * turns the check off', async () => {
    const { url } = await start({ allowedHosts: ['llm.lan'] });
    expect((await raw(url, '/v1/models', { headers: { host: 'LLM.lan:9000' } })).status).toBe(200);
    expect((await raw(url, '/v1/models', { headers: { host: 'other.lan' } })).status).toBe(403);
    await server!.close();
    const any = await start({ allowedHosts: ['*'] });
    expect((await raw(any.url, '/v1/models', { headers: { host: 'whatever.example' } })).status).toBe(200);
  });

  it('answers to the name given as the listening host', async () => {
    const { url } = await start({ host: 'localhost' });
    expect((await raw(url, '/v1/models', { headers: { host: 'localhost' } })).status).toBe(200);
    expect(hostNameOf('[::1]:80')).toBe('[::1]');
    expect(hostNameOf('Name.Example.:8080')).toBe('name.example');
  });
});

describe('API keys', () => {
  it('needs a key on every route but GET /health: none or a wrong one is a 401 in OpenAI shape', async () => {
    const { url } = await start({ apiKeys: ['sk-one', 'sk-two'] });
    const none = await simplePost(url, {});
    expectOpenAiError(none, 401, 'invalid_api_key', /No API key provided/);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    expectOpenAiError(await simplePost(url, { authorization: 'Bearer sk-three' }), 401, 'invalid_api_key', /Incorrect API key/);
    expectOpenAiError(await simplePost(url, { authorization: 'sk-one' }), 401, 'invalid_api_key', /Incorrect API key/);
    expectOpenAiError(await raw(url, '/v1/models'), 401, 'invalid_api_key', /No API key/);
    expectOpenAiError(await raw(url, '/v1/nothing'), 401, 'invalid_api_key', /No API key/);
    for (const authorization of ['Bearer sk-one', 'bearer sk-two']) {
      expect((await simplePost(url, { authorization })).status, authorization).toBe(200);
    }
    expect((await raw(url, '/health')).status).toBe(200);
    expect((await raw(url, '/health', { method: 'HEAD' })).status).toBe(200);
  });

  it("answers a local page's preflight without a key, and its 401 with the grant (so the page can read it)", async () => {
    const { url } = await start({ apiKeys: ['sk-one'] });
    const origin = 'http://localhost:5173';
    const preflight = await raw(url, '/v1/completions', { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST' } });
    expect(preflight.status).toBe(204);
    const refused = await simplePost(url, { origin });
    expect(refused.status).toBe(401);
    expect(refused.headers['access-control-allow-origin']).toBe(origin);
  });

  it('the openai client works with the key and raises AuthenticationError without it', async () => {
    const { url } = await start({ apiKeys: ['sk-secret'] });
    const client = new OpenAI({ apiKey: 'sk-secret', baseURL: `${url}/v1`, maxRetries: 0 });
    const completion = await client.completions.create({ model: 'fake-llama', prompt: 'Once upon a time', temperature: 0, max_tokens: 50 });
    expect(completion.choices[0]!.text).toBe(DEFAULT_STORY);
    const wrong = new OpenAI({ apiKey: 'sk-guess', baseURL: `${url}/v1`, maxRetries: 0 });
    const error = await wrong.models.list().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(error).toMatchObject({ status: 401, code: 'invalid_api_key', type: 'invalid_request_error' });
  });

  it('compares keys whole: a prefix, a longer key or an empty one is refused', () => {
    const policy = accessPolicy('127.0.0.1', { apiKeys: ['sk-abc'] });
    expect(keyAccepted(policy, 'Bearer sk-abc')).toBe(true);
    for (const header of ['Bearer sk-ab', 'Bearer sk-abcd', 'Bearer ', 'Basic sk-abc', undefined]) expect(keyAccepted(policy, header), String(header)).toBe(false);
    expect(() => accessPolicy('127.0.0.1', { apiKeys: [''] })).toThrow(/non-empty/);
  });

  it('warns when listening beyond loopback without a key, not with one', async () => {
    const open = await start({ host: '0.0.0.0' });
    expect(open.logged.join('\n')).toMatch(/warning: listening on 0\.0\.0\.0 without an API key/);
    await server!.close();
    const keyed = await start({ host: '0.0.0.0', apiKeys: ['sk-one'] });
    expect(keyed.logged).toEqual([]);
  });
});

describe('serve flags', () => {
  function cli(env: Record<string, string> = {}) {
    const out: string[] = [];
    const err: string[] = [];
    let listening!: (s: RunningServer) => void;
    const started = new Promise<RunningServer>((r) => (listening = r));
    const controller = new AbortController();
    const io = {
      stdout: { write: (s: string) => out.push(s) },
      stderr: { write: (s: string) => err.push(s) },
      env,
      loadModel: async () => fakeEngine(),
      signal: controller.signal,
      onListening: listening,
    };
    return { out, err, io, started, stop: () => controller.abort() };
  }

  it('--api-key and $WEBGPU_LLAMA_API_KEY each give a key the server then needs', async () => {
    const t = cli({ WEBGPU_LLAMA_API_KEY: 'sk-env' });
    const done = runCli(['serve', '--model', 'm.gguf', '--port', '0', '--api-key', 'sk-flag'], t.io);
    const running = await t.started;
    expect((await raw(running.url, '/v1/models')).status).toBe(401);
    for (const key of ['sk-env', 'sk-flag']) {
      expect((await raw(running.url, '/v1/models', { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    }
    t.stop();
    expect(await done).toBe(0);
  });

  it('--allow-origin and --allow-host reach the server; --host 0.0.0.0 without a key warns', async () => {
    const t = cli();
    const done = runCli(['serve', '--model', 'm.gguf', '--port', '0', '--host', '0.0.0.0', '--allow-origin', 'https://app.example', '--allow-host', 'llm.lan'], t.io);
    const running = await t.started;
    const port = new URL(running.url).port;
    const url = `http://127.0.0.1:${port}`;
    expect((await simplePost(url, { origin: 'https://app.example', host: 'llm.lan' })).status).toBe(200);
    expect((await simplePost(url, { origin: 'https://other.example' })).status).toBe(403);
    await vi.waitFor(() => expect(t.err.join('')).toMatch(/warning: listening on 0\.0\.0\.0 without an API key/));
    t.stop();
    expect(await done).toBe(0);
  });

  it('refuses malformed values, and the flags outside serve, before loading', async () => {
    for (const args of [
      ['serve', '--model', 'm', '--allow-origin', 'app.example'],
      ['serve', '--model', 'm', '--allow-host', 'http://llm.lan'],
      ['serve', '--model', 'm', '--api-key', 'two words'],
      ['complete', '--model', 'm', '--prompt', 'x', '--api-key', 'sk'],
    ]) {
      const t = cli();
      expect(await runCli(args, t.io), args.join(' ')).toBe(1);
      expect(t.err.join('')).toMatch(/--allow-origin|--allow-host|--api-key/);
      expect(t.err.join('')).toContain("Run 'webgpu-llama --help'");
    }
  });

  it('lists the flags and their defaults in --help', async () => {
    const t = cli();
    expect(await runCli(['--help'], t.io)).toBe(0);
    const help = t.out.join('');
    for (const text of ['--api-key KEY', 'WEBGPU_LLAMA_API_KEY', '--allow-origin ORIGIN', '--allow-host NAME', 'GET /health']) expect(help).toContain(text);
  });
});
