// Driven by test/browser/conformance.spec.ts: loads stories260K onto the page's GPU, installs the
// fetch shim, and runs the conformance cases (test/conformance/cases.ts, the same case data as the
// Node server suite) here in the page, each through the page's own `fetch` (so streams are live,
// and an AbortController on a streaming fetch reaches the generation). The spec asks for one case
// at a time by name: `await window.conformance.run('group: name')`.
import { installFetchShim, loadModel } from '../../src/index.ts';
import { CONFORMANCE_CASES } from '../../test/conformance/cases.ts';
import { Api, type FetchLike } from '../../test/conformance/target.ts';

/** The same model setup as test/conformance/node-http-real.test.ts (a short context keeps "until the context is full" quick). */
const MODEL_URL = '/models/stories260K/stories260K.gguf';
const CONTEXT_LENGTH = 96;

export interface CaseInfo {
  /** 'group: name', unique. */
  id: string;
  group: string;
  name: string;
  needs: string[];
}

export interface CaseResult {
  ok: boolean;
  /** The failure (a ConformanceError's message, or another error's name and message). */
  error?: string;
  stack?: string;
  ms: number;
}

const enginePromise = loadModel(MODEL_URL, { id: 'stories260K', aliases: ['stories'], contextLength: CONTEXT_LENGTH });
// Installed at once, as the demo does: a request sent while the model loads waits for it.
installFetchShim(enginePromise);

const cases = new Map(CONFORMANCE_CASES.map((c) => [`${c.group}: ${c.name}`, c]));

const apiPromise = enginePromise.then((engine) => {
  // Through globalThis.fetch at call time: the shim's patched fetch, as any page code would call it.
  const pageFetch: FetchLike = (url, init) => globalThis.fetch(url, init);
  return new Api({
    fetch: pageFetch,
    baseUrl: `${location.origin}/v1`,
    profile: {
      model: engine.info.id,
      alias: 'stories',
      contextLength: engine.info.contextLength,
      tokenizer: engine.generator.tokenizer,
      prompt: 'Once upon a time',
      otherPrompt: 'The little dog',
      // Prefill and decode run different kernels on float32: allow their rounding.
      logprobTolerance: 2e-3,
    },
    capabilities: ['abort', 'openai'],
  });
});

const log = document.getElementById('log')!;

const conformance = {
  /** Resolves when the model is loaded (rejects with the load error); the engine's info. */
  async ready(): Promise<{ id: string; contextLength: number }> {
    const engine = await enginePromise;
    await apiPromise;
    return { id: engine.info.id, contextLength: engine.info.contextLength };
  },
  list(): CaseInfo[] {
    return [...cases].map(([id, c]) => ({ id, group: c.group, name: c.name, needs: [...(c.needs ?? [])] }));
  },
  async run(id: string): Promise<CaseResult> {
    const c = cases.get(id);
    if (!c) return { ok: false, error: `no conformance case ${JSON.stringify(id)}`, ms: 0 };
    const api = await apiPromise;
    const started = performance.now();
    try {
      await c.run(api);
      const ms = performance.now() - started;
      log.textContent += `ok   ${id} (${ms.toFixed(0)} ms)\n`;
      return { ok: true, ms };
    } catch (err) {
      const ms = performance.now() - started;
      const e = err as Error;
      const error = e instanceof Error ? (e.name === 'ConformanceError' ? e.message : `${e.name}: ${e.message}`) : String(err);
      log.textContent += `FAIL ${id}: ${error}\n`;
      return { ok: false, error, stack: e?.stack, ms };
    }
  },
};

Object.assign(window, { conformance });
