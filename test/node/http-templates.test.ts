// Hostile chat templates over real HTTP: a model's template or a request's chat_template that
// loops or explodes ends in a 400 naming the template, quickly, and the server keeps serving.
import { afterEach, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { chatGenerator, CHATML } from '../helpers/chat-fakes.ts';

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const LOOPS = '{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}';
const EXPLODES = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}";

function chat(url: string, extra: Record<string, unknown> = {}) {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-llama', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, ...extra }),
  });
}

describe('hostile chat templates', () => {
  it("a model's template that loops or explodes is a 400 naming it, and the server keeps serving", async () => {
    for (const template of [LOOPS, EXPLODES]) {
      server = await startServer({ generator: chatGenerator({}, template) }, { port: 0, log: () => {} });
      const start = performance.now();
      const refused = await chat(server.url);
      expect(refused.status).toBe(400);
      const { error } = await refused.json();
      expect(error).toMatchObject({ type: 'invalid_request_error', param: 'messages', code: 'chat_template_error' });
      expect(error.message).toMatch(/the model's chat template: Chat template rendering stopped: (more than|a string of over)/);
      expect(performance.now() - start).toBeLessThan(10_000); // a bound on a hang, not a timing assertion
      const served = await chat(server.url, { chat_template: CHATML });
      expect(served.status).toBe(200);
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
      await server.close();
      server = undefined;
    }
  });

  it("a request's chat_template that explodes is a 400 naming chat_template; the next request is answered", async () => {
    server = await startServer({ generator: chatGenerator() }, { port: 0, log: () => {} });
    const refused = await chat(server.url, { chat_template: EXPLODES });
    expect(refused.status).toBe(400);
    const { error } = await refused.json();
    expect(error).toMatchObject({ param: 'chat_template', code: 'chat_template_error' });
    expect(error.message).toMatch(/the request's chat_template: .*string of over 2097152 characters/);
    const both = await Promise.all([chat(server.url, { chat_template: LOOPS }), chat(server.url)]);
    expect(both.map((r) => r.status)).toEqual([400, 200]);
  });
});
