// The demo's Hugging Face token field: what is typed there goes with a repo load as
// `Authorization: Bearer …` (loadModel's accessToken), and nowhere else: not in the page's
// address, not in the requests' URLs, not in the page's storage.
import { expect, test } from '@playwright/test';

const TOKEN = 'hf_demo_test_token_123';

test('the token goes with a repo load as a bearer token, and is kept nowhere', async ({ page, baseURL }) => {
  const seen: { url: string; authorization: string | undefined }[] = [];
  // A mirror of the hub on this server: /hub/{repo}/resolve/{revision}/{file} serves the HF copy.
  await page.route('**/hub/test-org/gated-stories/resolve/main/**', (route) => {
    seen.push({ url: route.request().url(), authorization: route.request().headers().authorization });
    return route.continue({ url: route.request().url().replace('/hub/test-org/gated-stories/resolve/main/', '/models/stories260K/hf/') });
  });
  await page.goto(`/?hub=${encodeURIComponent(`${baseURL}/hub`)}`);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 240_000 });

  await expect(page.getByTestId('hf-token')).toHaveAttribute('type', 'password');
  await page.getByTestId('hf-token').fill(TOKEN);
  await page.locator('#model-source').fill('test-org/gated-stories');
  await page.locator('#load-source').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(page.locator('#model-name')).toContainText('gated-stories (safetensors');

  expect(seen.length).toBeGreaterThan(0);
  for (const request of seen) {
    expect(request.authorization, request.url).toBe(`Bearer ${TOKEN}`);
    expect(request.url).not.toContain(TOKEN);
  }
  expect(page.url()).not.toContain(TOKEN);
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
  expect(stored).not.toContain(TOKEN);
  await expect(page.getByTestId('cached-models')).not.toContainText(TOKEN);
  for (const url of await page.getByTestId('cached-model').evaluateAll((items) => items.map((li) => (li as HTMLElement).dataset.url))) {
    expect(url).not.toContain(TOKEN);
  }
});
