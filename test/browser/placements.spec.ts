// The three engine placements — the page's main thread, a dedicated Web Worker, a Service Worker —
// answer `fetch('/v1/completions')` the same way: the reference completion, a stream of chunks,
// an abort mid-stream after which the engine still answers, and a bad parameter as the OpenAI
// 400 error. The service worker also answers pages that installed nothing (a second tab, an
// iframe), and a tab closed mid-stream frees its request.
import { expect, test, type BrowserContext, type Page } from '@playwright/test';
import { reference } from './reference.ts';

const MODEL = 'stories260K';
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
  expect(completion.body.usage).toEqual({ prompt_tokens: 5, completion_tokens: MAX_TOKENS, total_tokens: 5 + MAX_TOKENS });

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
    // complete, stream, abort, complete, openai stream and error, bad parameter: the abort was seen in the worker.
    expect(stats).toEqual({ inFlight: 0, completed: 6, aborted: 1 });

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

  test('Service Worker: every page of the scope is answered; a tab closed mid-stream frees its request', async ({ context }) => {
    const page = await openReady(context, '/test-pages/placement-sw.html', errors);
    expect(await page.evaluate(() => !!navigator.serviceWorker.controller)).toBe(true);
    await expectAnsweredAsTheApiSays(page);
    // The page's abort reached the service worker too.
    expect(await page.evaluate(() => (window as any).placementStats())).toEqual({ inFlight: 0, completed: 6, aborted: 1 });

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
