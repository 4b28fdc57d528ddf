// The prefix cache in Chromium: the same multi-turn conversations as test/api/prefix-cache.test.ts
// (test/helpers/multi-turn.ts) on the page's GPU, with f32 and f16 KV caches: stories260K's growing
// completions prompt, and chat on a random-weight model of each family generated here (served by
// Vite from the repo's ignored generated-models/). Each turn reports the cached_tokens the engine
// held and equals the same request with cache_prompt false.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test, type Page } from '@playwright/test';
import { FAMILIES, generateModel } from '../../scripts/model-families.ts';
import { CHATML_TEMPLATE, turnProblems, type TurnResult } from '../helpers/multi-turn.ts';
import type { PrefixCacheRun } from '../../demo/test-pages/prefix-cache.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

test.describe.serial('prefix cache in the page', () => {
  let page: Page;
  let modelsDir: string;
  const pageErrors: string[] = [];

  test.beforeAll(async ({ browser }) => {
    mkdirSync(join(ROOT, 'generated-models'), { recursive: true });
    modelsDir = mkdtempSync(join(ROOT, 'generated-models', 'prefix-cache-'));
    for (const family of FAMILIES) generateModel({ family, shape: 'tiny', out: join(modelsDir, family), seed: 8, dtype: 'f32' });
    page = await browser.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto('/test-pages/prefix-cache.html');
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
  });
  test.afterAll(async () => {
    await page?.close();
    if (modelsDir) rmSync(modelsDir, { recursive: true, force: true });
  });
  test.afterEach(() => {
    expect(pageErrors.splice(0)).toEqual([]);
  });

  const run = (options: PrefixCacheRun): Promise<TurnResult[]> => page.evaluate((o) => window.prefixCache.run(o), options);

  for (const kvCacheDType of ['f32', 'f16'] as const) {
    test(`stories260K, ${kvCacheDType} KV: a completions prompt that grows by each answer`, async () => {
      const turns = await run({ url: '/models/stories260K/stories260K.gguf', kvCacheDType, endpoint: 'completions', turns: 5, maxTokens: 12 });
      expect(turnProblems(turns)).toEqual([]);
    });

    test(`every family, ${kvCacheDType} KV: chat turns reuse the conversation and equal the uncached requests`, async () => {
      for (const family of FAMILIES) {
        const turns = await run({ url: `/@fs${join(modelsDir, family)}/`, kvCacheDType, endpoint: 'chat', turns: 3, chatTemplate: CHATML_TEMPLATE });
        expect(turnProblems(turns), family).toEqual([]);
      }
    });
  }
});
