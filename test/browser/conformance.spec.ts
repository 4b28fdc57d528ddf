// The conformance suite (test/conformance/cases.ts: the same case data as the Node server suite,
// node-http-real.test.ts) run inside the page against the fetch shim, answered by stories260K on
// the page's WebGPU (SwiftShader without a GPU). demo/test-pages/conformance.ts loads the model
// (context 96, as the Node run), installs the shim and runs each case in the page through the
// page's own fetch, so streams are live: the abort cases abort a streaming fetch with an
// AbortController in the page, and the openai cases run the official client in the page.
// Every case runs (about 1.5 min on SwiftShader); one Playwright test per case.
import { expect, test, type Page } from '@playwright/test';
import { CONFORMANCE_CASES } from '../conformance/cases.ts';
import { reference } from './reference.ts';

const MODEL = 'stories260K';

test.describe('conformance in the page (fetch shim, stories260K)', () => {
  // One page for all (the model loads once); a failing test restarts the worker, which reopens it.
  let page: Page;
  const pageErrors: string[] = [];

  test.beforeAll(async ({ browser }) => {
    test.setTimeout(300_000);
    page = await browser.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto('/test-pages/conformance.html');
    await page.waitForFunction(() => 'conformance' in window);
    const info = await page.evaluate(() => (window as any).conformance.ready());
    expect(info).toEqual({ id: MODEL, contextLength: 96 });
  });
  test.afterAll(async () => {
    await page?.close();
  });
  test.afterEach(() => {
    expect(pageErrors.splice(0), 'errors in the page').toEqual([]);
  });

  test('the page runs the same cases as this process lists', async () => {
    const listed: { id: string }[] = await page.evaluate(() => (window as any).conformance.list());
    expect(listed.map((c) => c.id)).toEqual(CONFORMANCE_CASES.map((c) => `${c.group}: ${c.name}`));
  });

  for (const c of CONFORMANCE_CASES) {
    const id = `${c.group}: ${c.name}`;
    test(id, async () => {
      const result = await page.evaluate((name) => (window as any).conformance.run(name), id);
      test.info().annotations.push({ type: 'in-page time', description: `${result.ms.toFixed(0)} ms` });
      expect(result.ok, result.error).toBe(true);
    });
  }

  test('abort in the page: a streaming fetch aborted after its first chunk stops; the next request gives the reference', async () => {
    const result = await page.evaluate(
      async ({ model, prompt }) => {
        const post = (body: object, signal?: AbortSignal) =>
          fetch('/v1/completions', {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ model, prompt, ...body }),
            ...(signal ? { signal } : {}),
          });
        const outcomes: { chunks: number; ended: string }[] = [];
        // Aborted with an AbortController, then cancelled through the body: both stop it.
        for (const how of ['signal', 'cancel'] as const) {
          const controller = new AbortController();
          const r = await post({ max_tokens: 91, temperature: 0, ignore_eos: true, stream: true }, controller.signal);
          const reader = r.body!.getReader();
          const decoder = new TextDecoder();
          let text = decoder.decode((await reader.read()).value, { stream: true });
          if (how === 'signal') controller.abort();
          else await reader.cancel();
          let ended = 'done';
          try {
            for (;;) {
              const step = await reader.read();
              if (step.done) break;
              text += decoder.decode(step.value, { stream: true });
            }
          } catch (err) {
            ended = (err as Error).name;
          }
          outcomes.push({ chunks: text.split('\n\n').filter((e) => e.startsWith('data:') && !e.includes('[DONE]')).length, ended });
        }
        const next = await (await post({ max_tokens: 32, temperature: 0 })).json();
        return { outcomes, text: next.choices[0].text, finish: next.choices[0].finish_reason };
      },
      { model: MODEL, prompt: reference.prompt },
    );
    const [signalled, cancelled] = result.outcomes;
    expect(signalled!.ended).toBe('AbortError');
    expect(signalled!.chunks).toBeLessThan(20); // of 91: it stopped
    expect(cancelled!.ended).toBe('done'); // a cancelled reader reads done
    expect(result.text).toBe(reference.completion_text);
    expect(result.finish).toBe('length');
  });
});
