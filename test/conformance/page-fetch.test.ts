// page-fetch.ts (the FetchLike that Playwright runs will use) against a stand-in page whose
// `evaluate` runs the function here, where the fetch shim is installed on globalThis: the whole
// suite passes through it, except the cases that need a live stream ('abort').
import { afterAll, beforeAll, describe, it } from 'vitest';
import { installFetchShim } from '../../src/api/shim.ts';
import { fakeEngine, type FakeGenerator } from '../helpers/fake-generator.ts';
import { CONFORMANCE_CASES } from './cases.ts';
import { pageFetch, type EvaluatingPage } from './page-fetch.ts';
import { Api } from './target.ts';

const BASE = 'http://page.test/v1';
let generator: FakeGenerator;
let uninstall: () => void;
let api: Api;

beforeAll(() => {
  const engine = fakeEngine({ id: 'fake-llama', aliases: ['fake'], contextLength: 256 });
  generator = engine.generator;
  uninstall = installFetchShim(engine, { baseUrl: BASE });
  const page: EvaluatingPage = {
    // Like Playwright: the argument crosses as JSON.
    evaluate: async (fn, arg) => fn(JSON.parse(JSON.stringify(arg))),
  };
  api = new Api({
    fetch: pageFetch(page),
    baseUrl: BASE,
    profile: {
      model: 'fake-llama',
      alias: 'fake',
      contextLength: 256,
      tokenizer: generator.tokenizer,
      prompt: 'Once upon a time',
      otherPrompt: 'The cat sat on the mat',
      logprobTolerance: 1e-9,
    },
    capabilities: ['openai', 'sessions'],
    openSessions: () => generator.active,
  });
});

afterAll(() => uninstall?.());

describe('conformance: through pageFetch (a stand-in page), fake generator', () => {
  for (const c of CONFORMANCE_CASES) {
    // Bodies come back whole through a page: no live stream to abort.
    const run = c.needs?.includes('abort') ? it.skip : it;
    run(`${c.group}: ${c.name}`, async () => {
      await c.run(api);
    });
  }
});
