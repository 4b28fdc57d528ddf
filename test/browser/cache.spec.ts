// The persistent weight cache in Chromium: stories260K loaded from its URL is kept in Cache
// Storage; after a reload the same load makes no request for the model's files; the cache is
// listed and deleted through the public API; and a failing cache (Cache Storage refused, no
// quota) still loads, with a console warning.
import { statSync } from 'node:fs';
import { expect, test, type Page } from '@playwright/test';
import { reference } from './reference.ts';

const MODEL_PATH = '/models/stories260K/hf/';
const GGUF_PATH = '/models/stories260K/stories260K.gguf';
const N = reference.completion_token_ids.length;

test.describe.serial('weight cache', () => {
  let page: Page;
  /** Requests the page made for files under /models/. */
  const modelRequests: string[] = [];
  const warnings: string[] = [];
  const pageErrors: string[] = [];

  test.beforeAll(async ({ browser }) => {
    // One context for the whole file: Cache Storage persists across reloads within it.
    const context = await browser.newContext();
    page = await context.newPage();
    page.on('request', (request) => {
      const path = new URL(request.url()).pathname;
      if (path.startsWith('/models/')) modelRequests.push(`${request.method()} ${path}`);
    });
    page.on('console', (message) => {
      if (message.type() === 'warning') warnings.push(message.text());
    });
    page.on('pageerror', (error) => pageErrors.push(error.message));
  });
  test.afterAll(async () => {
    await page?.context().close();
  });
  test.afterEach(() => {
    expect(pageErrors.splice(0)).toEqual([]);
  });

  async function open() {
    await page.goto('/test-pages/cache.html');
    await page.waitForFunction(() => (window as any).cacheReady === true);
    modelRequests.length = 0;
    warnings.length = 0;
  }

  async function loadAndRun(path: string, options: Record<string, unknown> = {}) {
    const result = await page.evaluate(
      ({ path, prompt, n, options }) => (window as any).loadAndRun(path, prompt, n, options),
      { path, prompt: reference.prompt_token_ids, n: N, options },
    );
    expect(result.id).toBe('stories260K');
    expect(result.tokens).toEqual(reference.completion_token_ids);
    return result;
  }

  const list = () => page.evaluate(() => (window as any).listCachedModels());

  test('the first load downloads into the cache; after a reload the second reads no network', async () => {
    await open();
    expect(await list()).toEqual([]);
    const weightsSize = statSync('public/models/stories260K/hf/model.safetensors').size;
    const isCacheDownload = (p: { loadedBytes: number; totalBytes: number }) => p.loadedBytes === weightsSize && p.totalBytes === weightsSize;
    const first = await loadAndRun(MODEL_PATH);
    expect(modelRequests.some((r) => r.endsWith('/model.safetensors'))).toBe(true);
    expect(warnings).toEqual([]);
    // The download into the cache is reported through onProgress.
    expect(first.progress.some(isCacheDownload)).toBe(true);

    await open(); // a reload: nothing of the first load is left in the page's memory
    const second = await loadAndRun(MODEL_PATH);
    expect(modelRequests).toEqual([]);
    expect(second.progress.some(isCacheDownload)).toBe(false);
    expect(second.progress.at(-1).phase).toBe('upload');
    expect(warnings).toEqual([]);
  });

  test('listCachedModels gives the model with its size; deleteCachedModel removes it', async () => {
    await open();
    const models = await list();
    expect(models).toHaveLength(1);
    const [model] = models;
    expect(model.id).toBe('hf');
    expect(new URL(model.url).pathname).toBe(MODEL_PATH);
    expect(model.files).toEqual(expect.arrayContaining(['config.json', 'tokenizer.json', 'model.safetensors']));
    const onDisk = model.files.reduce((sum: number, f: string) => sum + statSync(`public/models/stories260K/hf/${f}`).size, 0);
    expect(model.bytes).toBe(onDisk);
    expect(model.bytes).toBeGreaterThan(statSync('public/models/stories260K/hf/model.safetensors').size);

    expect(await page.evaluate((url) => (window as any).deleteCachedModel(url), model.url)).toBe(1);
    expect(await list()).toEqual([]);
    expect(await page.evaluate(async () => (await caches.open('webgpu-llama-files-v1').then((c) => c.keys())).length)).toBe(0);

    await open();
    await loadAndRun(MODEL_PATH);
    expect(modelRequests.some((r) => r.endsWith('/model.safetensors'))).toBe(true);
    // And by id, for a GGUF file too.
    await loadAndRun(GGUF_PATH);
    await open();
    await loadAndRun(GGUF_PATH);
    expect(modelRequests).toEqual([]);
    expect((await list()).map((m: { id: string }) => m.id).sort()).toEqual(['hf', 'stories260K']);
    expect(await page.evaluate(() => (window as any).deleteCachedModel('stories260K'))).toBe(1);
    expect(await page.evaluate(() => (window as any).deleteCachedModel('hf'))).toBe(1);
    expect(await list()).toEqual([]);
  });

  test('cache: false loads from the network and stores nothing', async () => {
    await open();
    await loadAndRun(MODEL_PATH, { cache: false });
    expect(modelRequests.some((r) => r.endsWith('/model.safetensors'))).toBe(true);
    expect(await list()).toEqual([]);
    expect(warnings).toEqual([]);
  });

  test('Cache Storage refused: the model still loads, with a warning', async () => {
    await open();
    await page.evaluate(() => (window as any).breakCache('open'));
    await loadAndRun(MODEL_PATH);
    expect(modelRequests.some((r) => r.endsWith('/model.safetensors'))).toBe(true);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/weight cache failed .*simulated: Cache Storage is unavailable/);
  });

  test('quota exceeded while storing: the model still loads, with a warning, and nothing is cached', async () => {
    await open();
    await page.evaluate(() => (window as any).breakCache('quota'));
    await loadAndRun(MODEL_PATH);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/QuotaExceededError/);
    expect(await list()).toEqual([]);
  });
});
