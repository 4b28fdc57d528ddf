// The three engine placements — the page's main thread, a dedicated Web Worker, a Service Worker —
// answer `fetch('/v1/completions')` (and chat) the same way: the reference completion, a stream of chunks,
// an abort mid-stream after which the engine still answers, and a bad parameter as the OpenAI
// 400 error. The service worker also answers pages that installed nothing (a second tab, an
// iframe), and a tab closed mid-stream frees its request. Then the placements' options and edge
// cases: a page loaded past the service worker (Shift+Reload), claimClients: false, a worker's own
// baseUrl, what an unload leaves, and a Worker the page gives.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test, type BrowserContext, type Page } from '@playwright/test';
import { THINKING_REPLY, writeThinkingModel } from '../helpers/thinking-model.ts';
import { reference } from './reference.ts';

const MODEL = 'stories260K';
const SOURCE = '/models/stories260K/stories260K.gguf';
const MAX_TOKENS = 32;

/** What placement-client.ts puts on window. */
type Client = {
  complete(prompt: string, maxTokens: number): Promise<{ status: number; body: any }>;
  stream(prompt: string, maxTokens: number): Promise<{
    status: number;
    contentType: string | null;
    reads: number;
    texts: string[];
    finishReason: string | null;
    endsWithDone: boolean;
  }>;
  abortMidStream(): Promise<{ status: number; first: string; error: string }>;
  holdLongStream(): Promise<{ status: number; first: string }>;
  badParameter(): Promise<{ status: number; contentType: string | null; body: any }>;
  openaiStream(prompt: string, maxTokens: number): Promise<{ texts: string[]; errorStatus: number | null; errorParam: string | null }>;
  openaiChat(maxTokens: number): Promise<{ texts: string[]; finishReason: string | null; completionText: string; promptTokens: number }>;
  structured(): Promise<{ refusals: Record<string, number>; chatContent: string | null; chatFinish: string; choiceText: string; choiceFinish: string }>;
};

const call = <K extends keyof Client>(page: Page, name: K, ...args: Parameters<Client[K]>): Promise<Awaited<ReturnType<Client[K]>>> =>
  page.evaluate(
    ({ name, args }) => ((window as any).placementClient[name] as (...a: unknown[]) => Promise<any>)(...args),
    { name, args: args as unknown[] },
  ) as Promise<Awaited<ReturnType<Client[K]>>>;

async function openReady(context: BrowserContext, path: string, errors: string[]): Promise<Page> {
  const page = await context.newPage();
  page.on('pageerror', (error) => errors.push(`${path}: ${error.message}`));
  await page.goto(path);
  await page.waitForFunction(() => 'placementReady' in window && 'placementClient' in window);
  expect(await page.evaluate(() => (window as any).placementReady())).toBe(MODEL);
  return page;
}

/** The checks every placement passes, on a page whose /v1 is answered by it. */
async function expectAnsweredAsTheApiSays(page: Page): Promise<void> {
  const completion = await call(page, 'complete', reference.prompt, MAX_TOKENS);
  expect(completion.status, JSON.stringify(completion.body)).toBe(200);
  expect(completion.body.object).toBe('text_completion');
  expect(completion.body.model).toBe(MODEL);
  expect(completion.body.choices[0].text).toBe(reference.completion_text);
  expect(completion.body.usage).toEqual({ prompt_tokens: 5, completion_tokens: MAX_TOKENS, total_tokens: 5 + MAX_TOKENS, prompt_tokens_details: { cached_tokens: expect.any(Number) } });

  const stream = await call(page, 'stream', reference.prompt, MAX_TOKENS);
  expect(stream.status).toBe(200);
  expect(stream.contentType).toContain('text/event-stream');
  expect(stream.texts.length).toBeGreaterThan(1);
  expect(stream.texts.join('')).toBe(reference.completion_text);
  expect(stream.finishReason).toBe('length');
  expect(stream.endsWithDone).toBe(true);

  const aborted = await call(page, 'abortMidStream');
  expect(aborted.status).toBe(200);
  expect(aborted.first).toMatch(/^data: \{/);
  expect(aborted.error).toBe('AbortError');
  // The aborted request freed the engine: the next one completes, with the same text.
  const after = await call(page, 'complete', reference.prompt, MAX_TOKENS);
  expect(after.status).toBe(200);
  expect(after.body.choices[0].text).toBe(reference.completion_text);

  // The official openai client, unchanged, in this placement too; its errors as its own classes.
  const viaOpenai = await call(page, 'openaiStream', reference.prompt, MAX_TOKENS);
  expect(viaOpenai.texts.length).toBeGreaterThan(1);
  expect(viaOpenai.texts.join('')).toBe(reference.completion_text);
  expect(viaOpenai).toMatchObject({ errorStatus: 400, errorParam: 'temperature' });

  // Chat: the same tokens as a completion of the prompt the chat template rendered.
  const chat = await call(page, 'openaiChat', MAX_TOKENS);
  expect(chat.promptTokens).toBeGreaterThan(5);
  expect(chat.texts.length).toBeGreaterThan(1);
  expect(chat.texts.join('')).toBe(chat.completionText);
  expect(chat.finishReason).not.toBeNull();

  // Structured output: the grammar engine loads and constrains decoding in this placement too.
  const structured = await call(page, 'structured');
  expect(structured.refusals).toEqual({ '400': 120 });
  expect(structured.choiceFinish).toBe('stop');
  expect(['happy', 'sad']).toContain(structured.choiceText);
  if (structured.chatFinish === 'stop') {
    const hero = JSON.parse(structured.chatContent!);
    expect(Object.keys(hero).sort()).toEqual(['age', 'name']);
    expect(hero.age).toBeGreaterThanOrEqual(1);
  } else {
    expect(structured.chatFinish).toBe('length');
  }

  const bad = await call(page, 'badParameter');
  expect(bad.status).toBe(400);
  expect(bad.contentType).toContain('application/json');
  expect(bad.body).toEqual({
    error: { message: expect.stringContaining('temperature'), type: 'invalid_request_error', param: 'temperature', code: expect.anything() },
  });
}

test.describe('engine placements', () => {
  const errors: string[] = [];
  test.afterEach(() => {
    expect(errors.splice(0)).toEqual([]);
  });

  test('main thread: loadModel + installFetchShim', async ({ context }) => {
    const page = await openReady(context, '/test-pages/placement-main.html', errors);
    await expectAnsweredAsTheApiSays(page);
  });

  test('dedicated Web Worker: loadModelInWorker + installFetchShim; the abort reaches the worker', async ({ context }) => {
    const page = await openReady(context, '/test-pages/placement-worker.html', errors);
    // The model runs in a worker: the page's realm has no generator, only the proxy.
    expect(await page.evaluate(async () => 'generator' in (await (window as any).placementEngine))).toBe(false);
    await expectAnsweredAsTheApiSays(page);
    const stats = await page.evaluate(() => (window as any).placementStats());
    // complete, stream, abort, complete, openai stream and error, chat, tokenize and completion, bad
    // parameter, the 120 refused grammars and the two structured ones: the abort was seen in the worker.
    expect(stats).toEqual({ inFlight: 0, completed: 131, aborted: 1 });

    // A local File loads in a worker too, and the RemoteEngine answers complete() as an Engine does.
    const direct = await page.evaluate(([prompt, max]) => (window as any).placementFileEngine(prompt, max), [reference.prompt, MAX_TOKENS] as const);
    expect(direct.id).toBe('stories260K');
    expect(direct.text).toBe(reference.completion_text);
    expect(direct.chunks.length).toBeGreaterThan(1);
    expect(direct.chunks.join('')).toBe(reference.completion_text);
    expect(direct.error).toEqual({ name: 'ApiError', status: 400, param: 'top_p' });

    // A model that fails to load in a worker: the promise rejects with the worker's error, and
    // a shim installed on it answers 503 in the OpenAI shape, as on the main thread.
    const failed = await page.evaluate(() => (window as any).placementFailedLoad('/models/no-such-model.gguf'));
    expect(failed.message).toMatch(/^Error: .*no-such-model/);
    expect(failed.status).toBe(503);
    expect(failed.body.error).toMatchObject({ type: 'service_unavailable', message: expect.stringContaining('no-such-model') });
  });

  test('dedicated Web Worker: a thinking model (bigram weights, the real Qwen3 tokenizer and template) returns its thinking apart', async ({ context }) => {
    const root = fileURLToPath(new URL('../..', import.meta.url));
    mkdirSync(join(root, 'generated-models'), { recursive: true });
    const dir = mkdtempSync(join(root, 'generated-models', 'thinking-'));
    try {
      writeThinkingModel(dir);
      const page = await openReady(context, '/test-pages/placement-worker.html', errors);
      const result = await page.evaluate((url) => (window as any).placementThinking(url), `/@fs${dir}/`);
      expect(result.message).toEqual({ role: 'assistant', content: THINKING_REPLY.content, refusal: null, reasoning: THINKING_REPLY.reasoning, reasoning_content: THINKING_REPLY.reasoning });
      expect(result.finish).toBe('stop');
      expect(result).toMatchObject({ reasoning: THINKING_REPLY.reasoning, content: THINKING_REPLY.content, aliased: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('Service Worker: every page of the scope is answered; a tab closed mid-stream frees its request', async ({ context }) => {
    const page = await openReady(context, '/test-pages/placement-sw.html', errors);
    expect(await page.evaluate(() => !!navigator.serviceWorker.controller)).toBe(true);
    await expectAnsweredAsTheApiSays(page);
    // The page's abort reached the service worker too.
    expect(await page.evaluate(() => (window as any).placementStats())).toEqual({ inFlight: 0, completed: 131, aborted: 1 });

    // A second tab that installs nothing: plain fetch, answered by the service worker.
    const other = await context.newPage();
    other.on('pageerror', (error) => errors.push(`other: ${error.message}`));
    await other.goto('/test-pages/placement-plain.html');
    await other.waitForFunction(() => 'placementClient' in window && !!navigator.serviceWorker.controller);
    const fromOther = await call(other, 'complete', reference.prompt, MAX_TOKENS);
    expect(fromOther.status).toBe(200);
    expect(fromOther.body.choices[0].text).toBe(reference.completion_text);

    // A frame of the first page, likewise.
    const frameText = await page.evaluate(async (prompt) => {
      const frame = document.createElement('iframe');
      frame.src = '/test-pages/placement-plain.html';
      document.body.append(frame);
      await new Promise((resolve) => frame.addEventListener('load', resolve, { once: true }));
      const win = frame.contentWindow as any;
      while (!win.placementClient) await new Promise((resolve) => setTimeout(resolve, 50));
      const result = await win.placementClient.complete(prompt, 32);
      return result.body.choices[0].text as string;
    }, reference.prompt);
    expect(frameText).toBe(reference.completion_text);

    // The second tab starts a stream that would run until the context is full, and closes.
    const before = await page.evaluate(() => (window as any).placementStats());
    const held = await call(other, 'holdLongStream');
    expect(held.status).toBe(200);
    expect(held.first).toMatch(/^data: \{/);
    await other.close();
    // The service worker saw the client go: the request ended as aborted, not run to its end.
    await expect
      .poll(() => page.evaluate(() => (window as any).placementStats()), { timeout: 60_000 })
      .toEqual({ inFlight: 0, completed: before.completed, aborted: before.aborted + 1 });
    const after = await call(page, 'complete', reference.prompt, MAX_TOKENS);
    expect(after.body.choices[0].text).toBe(reference.completion_text);
  });
});

test.describe('placement options and edge cases', () => {
  const errors: string[] = [];
  test.afterEach(() => {
    expect(errors.splice(0)).toEqual([]);
  });

  /** placement-options.html: the library on window (placementLib), nothing started. */
  async function openOptions(context: BrowserContext): Promise<Page> {
    const page = await context.newPage();
    page.on('pageerror', (error) => errors.push(`options: ${error.message}`));
    await page.goto('/test-pages/placement-options.html');
    await page.waitForFunction(() => 'placementLib' in window);
    return page;
  }

  test('Service Worker: a page loaded past the worker (Shift+Reload) is claimed, not left waiting', async ({ context }) => {
    const page = await openReady(context, '/test-pages/placement-sw.html', errors);
    // A reload that bypasses the cache is Shift+Reload: the page loads past its service worker.
    const cdp = await context.newCDPSession(page);
    const loaded = page.waitForEvent('load');
    await cdp.send('Page.reload', { ignoreCache: true });
    await loaded;
    await page.waitForFunction(() => 'placementReady' in window);
    const state = await page.evaluate(async () => {
      // No worker started for the navigation: the page was not controlled when it loaded.
      const navigation = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming;
      const timeout = new Promise((resolve) => setTimeout(() => resolve('still waiting after 30 s'), 30_000));
      const ready = await Promise.race([(window as any).placementReady(), timeout]);
      return { workerStart: navigation.workerStart, ready, controlled: !!navigator.serviceWorker.controller };
    });
    expect(state).toEqual({ workerStart: 0, ready: MODEL, controlled: true });
    const completion = await call(page, 'complete', reference.prompt, MAX_TOKENS);
    expect(completion.body.choices[0].text).toBe(reference.completion_text);
  });

  test('Service Worker with claimClients: false: an uncontrolled page is refused, saying what to do; reloaded, it is served', async ({ context }) => {
    const page = await openOptions(context);
    const register = () =>
      page.evaluate(async ({ source, id }) => {
        const { registerServiceWorkerEngine } = (window as any).placementLib;
        const timeout = new Promise((resolve) => setTimeout(() => resolve('still waiting after 30 s'), 30_000));
        const registered = registerServiceWorkerEngine('./placement-sw-options-script.ts?claimClients=false', { source, id }).then(
          (remote: any) => `loaded ${remote.info.id}`,
          (err: Error) => err.message,
        );
        return Promise.race([registered, timeout]);
      }, { source: SOURCE, id: MODEL });
    expect(await register()).toMatch(/claimClients: false.*reload the page/);
    // As the message says: the reloaded page loads under the worker's control.
    await page.reload();
    await page.waitForFunction(() => 'placementLib' in window);
    expect(await register()).toBe(`loaded ${MODEL}`);
    expect(await page.evaluate(async () => (await fetch('/v1/models')).status)).toBe(200);
  });

  test("Service Worker with its own baseUrl: complete() and handle() reach it; after unload() it answers 503 until a page registers again", async ({ context }) => {
    const page = await openOptions(context);
    const result = await page.evaluate(
      async ({ source, id, prompt, maxTokens }) => {
        const { registerServiceWorkerEngine, installFetchShim } = (window as any).placementLib;
        const script = `./placement-sw-options-script.ts?baseUrl=${encodeURIComponent('/api/v1')}`;
        const remote = await registerServiceWorkerEngine(script, { source, id });
        const completion = await remote.complete({ model: id, prompt, max_tokens: maxTokens, temperature: 0 });
        const models = await remote.handle({ method: 'GET', url: '/v1/models', body: null });
        const plain = (await fetch('/api/v1/models')).status;
        // A shim on the RemoteEngine at a base URL of its own reaches the worker's too.
        const uninstall = installFetchShim(remote, { baseUrl: '/shim/v1' });
        const shimmed = (await fetch('/shim/v1/models')).status;
        uninstall();

        await remote.unload();
        const post = () => fetch('/api/v1/completions', { method: 'POST', body: JSON.stringify({ model: id, prompt, max_tokens: 4 }) });
        const afterUnload = await post();
        const unloadedError = (await afterUnload.json()).error;
        // A page registering again (no source: the worker keeps the one it was given) loads the model again.
        const again = await registerServiceWorkerEngine(script);
        const reloaded = await post();
        return {
          text: completion.choices[0].text,
          models: models.status,
          plain,
          shimmed,
          afterUnload: afterUnload.status,
          unloadedError,
          again: again.info.id,
          reloaded: reloaded.status,
        };
      },
      { source: SOURCE, id: MODEL, prompt: reference.prompt, maxTokens: MAX_TOKENS },
    );
    expect(result).toEqual({
      text: reference.completion_text,
      models: 200,
      plain: 200,
      shimmed: 200,
      afterUnload: 503,
      unloadedError: expect.objectContaining({ type: 'service_unavailable', code: 'model_unloaded' }),
      again: MODEL,
      reloaded: 200,
    });
  });

  test('dedicated Web Worker: requestStats() after unload() rejects; a Worker the page gives loads again after a failed load and after unload()', async ({ context }) => {
    const page = await openOptions(context);
    const result = await page.evaluate(
      async ({ source, id, prompt, maxTokens }) => {
        const { loadModelInWorker, workerEntryUrl } = (window as any).placementLib;
        const settled = (promise: Promise<unknown>) =>
          Promise.race([
            promise.then(() => 'resolved', (err: Error) => err.message),
            new Promise((resolve) => setTimeout(() => resolve('still waiting after 10 s'), 10_000)),
          ]);
        const request = { model: id, prompt, max_tokens: maxTokens, temperature: 0 };

        const owned = await loadModelInWorker(source, { id });
        await owned.unload();
        const stats = await settled(owned.requestStats());

        const worker = new Worker(workerEntryUrl, { type: 'module' });
        const failed = await settled(loadModelInWorker('/models/no-such-model.gguf', { worker }));
        const first = await loadModelInWorker(source, { worker, id });
        const firstText = (await first.complete(request)).choices[0].text;
        await first.unload();
        const second = await loadModelInWorker(source, { worker, id });
        const secondText = (await second.complete(request)).choices[0].text;
        await second.unload();
        worker.terminate();
        return { stats, failed, firstText, secondText };
      },
      { source: SOURCE, id: MODEL, prompt: reference.prompt, maxTokens: MAX_TOKENS },
    );
    expect(result.stats).toMatch(/unloaded/);
    expect(result.failed).toMatch(/no-such-model/);
    expect(result.firstText).toBe(reference.completion_text);
    expect(result.secondText).toBe(reference.completion_text);
  });
});
