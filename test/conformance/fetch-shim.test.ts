// The conformance suite (cases.ts) through the page's fetch shim (src/api/shim.ts), in Node: the
// shim patches a stand-in global's fetch, and the cases call that fetch with a page-relative
// base URL, as code in a page would. The same cases run in Chromium through Playwright (test/browser/conformance.spec.ts);
// this proves the shim host answers exactly as the Node server does.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { installFetchShim } from '../../src/api/shim.ts';
import { fakeEngine, type FakeGenerator } from '../helpers/fake-generator.ts';
import { CONFORMANCE_CASES } from './cases.ts';
import { fakeTarget } from './fake-target.ts';
import { Api, type FetchLike } from './target.ts';

let generator: FakeGenerator;
let uninstall: () => void;
let api: Api;

beforeAll(() => {
  const engine = fakeEngine({ id: 'fake-llama', aliases: ['fake'], contextLength: 256, delayMs: 1 });
  generator = engine.generator;
  const page = {
    fetch: (async () => new Response('not the API', { status: 599 })) as unknown as typeof fetch,
    location: { href: 'https://page.example/app/index.html' },
  } as unknown as typeof globalThis;
  uninstall = installFetchShim(engine, { target: page });
  const pageFetch: FetchLike = (url, init) => page.fetch(url, init);
  api = new Api(fakeTarget(generator, pageFetch, 'https://page.example/v1'));
});

afterAll(() => uninstall?.());

describe('conformance: fetch shim (in Node), fake generator', () => {
  for (const c of CONFORMANCE_CASES) {
    it(`${c.group}: ${c.name}`, async () => {
      await c.run(api);
    });
  }
});
