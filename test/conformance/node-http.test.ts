// The conformance suite (cases.ts) against the Node HTTP server answered by the fake generator
// (test/helpers/fake-generator.ts: real log-softmax logprobs of fake logits, the contract's
// sampling order, one seeded stream per sequence). The real model runs the same cases in
// node-http-real.test.ts.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/node/http.ts';
import { fakeEngine, type FakeGenerator } from '../helpers/fake-generator.ts';
import { CONFORMANCE_CASES } from './cases.ts';
import { fakeTarget } from './fake-target.ts';
import { Api } from './target.ts';

let server: RunningServer;
let generator: FakeGenerator;
let api: Api;

beforeAll(async () => {
  // A little time per token, so that aborts land mid-generation.
  const engine = fakeEngine({ id: 'fake-llama', aliases: ['fake'], contextLength: 256, delayMs: 1 });
  generator = engine.generator;
  server = await startServer(engine, { port: 0, log: () => {} });
  api = new Api(fakeTarget(generator, (url, init) => fetch(url, init), `${server.url}/v1`));
});

afterAll(async () => {
  await server?.close();
});

describe('conformance: Node HTTP server, fake generator', () => {
  for (const c of CONFORMANCE_CASES) {
    it(`${c.group}: ${c.name}`, async () => {
      await c.run(api);
    });
  }
});
