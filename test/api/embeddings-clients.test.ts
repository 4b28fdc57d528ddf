// The official `openai` client's embeddings.create against the Node server (with and without an
// API key) and the page's fetch shim: the base64 it asks for by default, decoded by the client,
// gives the float answer; its errors arrive as the client's error classes.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { clientHosts } from '../helpers/client-hosts.ts';
import { embeddingEngine, fakeVector } from '../helpers/embedding-fakes.ts';

const SHIM_BASE = 'http://embed.test/v1';
const KEY = 'sk-embed';

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const clients = clientHosts(SHIM_BASE, { apiKey: KEY });
afterEach(() => clients.close());
const HOSTS = clients.hosts;

for (const [host, connect] of HOSTS) {
  describe(`the openai client's embeddings.create against ${host}`, () => {
    it('base64 by default (decoded by the client) and float give the same vectors', async () => {
      const engine = embeddingEngine();
      const client = await connect(engine);
      const input = ['Hello world', 'The cat sat on the mat.'];
      const tokens = input.map((t) => engine.generator.tokenizer.encode(t));
      const decoded = await client.embeddings.create({ model: 'fake-llama', input });
      const floats = await client.embeddings.create({ model: 'fake-llama', input, encoding_format: 'float' });
      expect(floats.object).toBe('list');
      expect(floats.model).toBe('fake-llama');
      expect(floats.data.map((d) => d.embedding)).toEqual(tokens.map((t) => Array.from(fakeVector(t, 8, true))));
      expect(decoded.data.map((d) => Array.from(d.embedding))).toEqual(floats.data.map((d) => d.embedding));
      expect(decoded.usage).toEqual({ prompt_tokens: tokens[0]!.length + tokens[1]!.length, total_tokens: tokens[0]!.length + tokens[1]!.length });
      const ids = await client.embeddings.create({ model: 'fake-llama', input: [[5, 6], [7]], encoding_format: 'float' });
      expect(ids.data[1]!.embedding).toEqual(Array.from(fakeVector([7], 8, true)));
    });

    it('a bad request is a BadRequestError naming the parameter; another model a NotFoundError', async () => {
      const client = await connect(embeddingEngine({ embedding: { matryoshka: true } }));
      expect((await client.embeddings.create({ model: 'fake-llama', input: 'a', dimensions: 3, encoding_format: 'float' })).data[0]!.embedding).toHaveLength(3);
      const bad = await client.embeddings.create({ model: 'fake-llama', input: '' }).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
      expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('input');
      const tooLong = await client.embeddings.create({ model: 'fake-llama', input: 'a', dimensions: 9 }).catch((e: unknown) => e);
      expect((tooLong as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('dimensions');
      const missing = await client.embeddings.create({ model: 'other', input: 'a' }).catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    });
  });
}

describe('the Node server guards /v1/embeddings as every route', () => {
  it('a missing or wrong API key is a 401; a foreign origin is refused', async () => {
    server = await startServer(embeddingEngine(), { port: 0, log: () => {}, apiKeys: [KEY] });
    const body = JSON.stringify({ model: 'fake-llama', input: 'a' });
    const url = `${server.url}/v1/embeddings`;
    const none = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(none.status).toBe(401);
    expect((await none.json()).error.code).toBe('invalid_api_key');
    const wrong = await new OpenAI({ apiKey: 'sk-guess', baseURL: `${server.url}/v1`, maxRetries: 0 }).embeddings.create({ model: 'fake-llama', input: 'a' }).catch((e: unknown) => e);
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
    const foreign = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, origin: 'https://elsewhere.example' }, body });
    expect(foreign.status).toBe(403);
    const ok = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body });
    expect(ok.status).toBe(200);
  });
});
