// The request handler (src/api/handler.ts) against a fake generator: routes, methods, base paths,
// an engine still loading or failed, aborted requests, and the JSON it parses (parseRequestJson).
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/api/errors.ts';
import { handleApiRequest, parseRequestJson, type ApiEngine } from '../../src/api/handler.ts';
import { fakeEngine } from '../helpers/fake-generator.ts';
import { expectError, get, json, post, PROMPT, type Json } from '../helpers/api-requests.ts';

describe('routes', () => {
  const engine = fakeEngine({ id: 'org/fake-llama', aliases: ['fake'], created: 1_700_000_123 });

  it('lists the model', async () => {
    const r = await get(engine, '/v1/models');
    expect(r.status).toBe(200);
    expect(json(r)).toEqual({
      object: 'list',
      data: [{ id: 'org/fake-llama', object: 'model', created: 1_700_000_123, owned_by: 'webgpu-llama', max_model_len: 64 }],
    });
  });

  it('retrieves the model by id (slash encoded or not) and alias', async () => {
    for (const url of ['/v1/models/org%2Ffake-llama', '/v1/models/org/fake-llama', '/v1/models/fake']) {
      const r = await get(engine, url);
      expect(r.status, url).toBe(200);
      expect(json(r)).toEqual({ id: 'org/fake-llama', object: 'model', created: 1_700_000_123, owned_by: 'webgpu-llama', max_model_len: 64 });
    }
    await expectError(get(engine, '/v1/models/other'), 404, null, 'model_not_found');
  });

  it('accepts ai_project_id and other query parameters', async () => {
    expect((await get(engine, '/v1/models?ai_project_id=abc')).status).toBe(200);
    const r = await post(engine, { model: 'fake', prompt: PROMPT }, '/v1/completions?ai_project_id=abc');
    expect(r.status).toBe(200);
  });

  it('answers other paths with 404 and wrong methods with 405', async () => {
    await expectError(get(engine, '/v1/audio/speech'), 404, null, 'not_found');
    await expectError(get(engine, '/v1'), 404, null, 'not_found');
    await expectError(get(engine, '/v2/models'), 404, null, 'not_found');
    const r = await get(engine, '/v1/completions');
    await expectError(Promise.resolve(r), 405, null, 'method_not_allowed');
    expect(r.headers.allow).toBe('POST');
    for (const path of ['/v1/chat/completions', '/v1/embeddings', '/tokenize', '/v1/detokenize']) {
      const other = await get(engine, path);
      await expectError(Promise.resolve(other), 405, null, 'method_not_allowed');
      expect(other.headers.allow).toBe('POST');
    }
    const m = await post(engine, {}, '/v1/models');
    await expectError(Promise.resolve(m), 405, null, 'method_not_allowed');
    expect(m.headers.allow).toBe('GET, HEAD');
  });

  it('answers HEAD where GET is answered, without a body', async () => {
    for (const url of ['/v1/models', '/v1/models/fake']) {
      const r = await handleApiRequest(engine, { method: 'HEAD', url, body: null });
      expect(r.status, url).toBe(200);
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.body).toBe('');
    }
    const c = await handleApiRequest(engine, { method: 'HEAD', url: '/v1/completions', body: null });
    expect(c.status).toBe(405);
  });

  it('takes a trailing slash and another base path', async () => {
    expect((await get(engine, '/v1/models/')).status).toBe(200);
    const r = await handleApiRequest(engine, { method: 'GET', url: '/api/llm/v1/models', body: null }, { basePath: '/api/llm/v1/' });
    expect(r.status).toBe(200);
  });

  it('waits for an engine that is still loading', async () => {
    let resolve!: (e: ApiEngine) => void;
    const loading = new Promise<ApiEngine>((r) => (resolve = r));
    const pending = post(loading, { model: 'fake', prompt: PROMPT });
    setTimeout(() => resolve(engine), 20);
    expect((await pending).status).toBe(200);
  });

  it('answers an aborted request with 499, not as a server error', async () => {
    const slow = fakeEngine({ delayMs: 5, script: ' a'.repeat(40) });
    const controller = new AbortController();
    const errors: ApiError[] = [];
    setTimeout(() => controller.abort('client left'), 20);
    const r = await handleApiRequest(
      slow,
      { method: 'POST', url: '/v1/completions', body: JSON.stringify({ model: 'fake', prompt: PROMPT, max_tokens: 40 }), signal: controller.signal },
      { onError: (e) => errors.push(e) },
    );
    await expectError(Promise.resolve(r), 499, null, 'aborted');
    expect(errors).toEqual([]);
    expect(slow.generator.active).toBe(0);
  });

  it('answers 503 with the reason when the engine failed to load', async () => {
    const failed = Promise.reject(new Error('out of GPU memory'));
    failed.catch(() => {});
    const errors: ApiError[] = [];
    const r = await handleApiRequest(failed, { method: 'POST', url: '/v1/completions', body: '{}' }, { onError: (e) => errors.push(e) });
    const error = await expectError(Promise.resolve(r), 503, null);
    expect(error.type).toBe('service_unavailable');
    expect(error.message).toContain('out of GPU memory');
    expect(errors).toHaveLength(1);
    await expectError(get(failed, '/v1/models'), 503, null);
  });
});

describe('parseRequestJson', () => {
  it('reads the NaN and Infinity that Python writes, outside strings only', () => {
    expect(parseRequestJson('{"a": 1}')).toEqual({ a: 1 });
    const parsed = parseRequestJson('{"t": NaN, "p": -Infinity, "q": Infinity, "s": "NaN \\" Infinity"}') as Json;
    expect(parsed.t).toBeNaN();
    expect(parsed.p).toBe(-Infinity);
    expect(parsed.q).toBe(Infinity);
    expect(parsed.s).toBe('NaN " Infinity');
    expect(() => parseRequestJson('{"a": }')).toThrow();
    expect(() => parseRequestJson('{"a": NaN,}')).toThrow();
  });

  it('names the parameter holding it', async () => {
    const engine = fakeEngine();
    await expectError(post(engine, '{"model": "fake", "prompt": "NaN and Infinity", "top_p": -Infinity}'), 400, 'top_p', 'invalid_type');
    await expectError(post(engine, '{"model": "fake", "extra_body": {"min_p": NaN}}'), 400, 'extra_body.min_p', 'invalid_type');
  });
});
