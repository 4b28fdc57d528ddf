// The demo's Search view, used as a person would: with the embedded model (stories260K, a
// generative model: it embeds by its last token's hidden state), rank passages against a query
// through fetch('/v1/embeddings'). A passage that is the query itself has the query's vector, so
// it ranks first with a cosine of 1, whatever the model's vectors are worth. The ranking needs the
// engine's embed() (the model's `info.embedding`); without it the view shows the API's 400.
import { expect, test, type Page } from '@playwright/test';

const body = (page: Page) => page.locator('body');
const results = (page: Page) => page.getByTestId('search-results').locator('li');

async function openSearch(page: Page): Promise<void> {
  await page.goto('/#search');
  await expect(body(page)).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(body(page)).toHaveAttribute('data-view', 'search');
  await expect(page.getByTestId('search-run')).toBeEnabled();
}

test('the Search view opens from its button and from #search', async ({ page }) => {
  await page.goto('/');
  await page.getByRole('button', { name: 'Search' }).click();
  await expect(page).toHaveURL(/#search$/);
  await expect(body(page)).toHaveAttribute('data-view', 'search');
  await expect(page.getByTestId('search-query')).toBeVisible();
  await expect(page.getByTestId('prompt')).toBeHidden();
  await page.getByRole('button', { name: 'Completions' }).click();
  await expect(page).not.toHaveURL(/#/);
  await expect(page.getByTestId('search-query')).toBeHidden();
});

test('ranks the passages by cosine similarity to the query, in one /v1/embeddings request', async ({ page }) => {
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await openSearch(page);
  await page.evaluate(() => {
    const w = window as unknown as { embeddingRequests: unknown[] };
    w.embeddingRequests = [];
    const inner = window.fetch;
    window.fetch = (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      if (url.endsWith('/embeddings') && typeof init?.body === 'string') w.embeddingRequests.push(JSON.parse(init.body));
      return inner(input, init);
    };
  });
  const passages = ['Lily went to the park with her dog.', 'The cat sat on the mat.', 'A little robot named Bob fixed the old clock.'];
  await page.getByTestId('search-passages').fill(`${passages[0]}\n\n${passages[1]}\n  ${passages[2]}  \n`);
  await page.getByTestId('search-query').fill('The cat sat on the mat.');
  await page.getByTestId('search-run').click();
  // The answer: the ranking, or the API's error (a model that cannot embed says so there).
  await expect(results(page).first().or(page.locator('[data-testid="search-error"]:not([hidden])'))).toBeVisible({ timeout: 240_000 });
  // At once: the answer is in. A model that cannot embed fails here, with the API's message.
  await expect(page.getByTestId('search-error')).toBeHidden({ timeout: 1 });
  await expect(results(page)).toHaveCount(3);
  await expect(results(page).first().locator('.passage')).toHaveText('The cat sat on the mat.');
  await expect(results(page).first().locator('.score')).toHaveText(/^(1\.000|0\.99\d)$/);
  const scores = (await results(page).locator('.score').allTextContents()).map(Number);
  expect([...scores].sort((a, b) => b - a)).toEqual(scores);
  expect(new Set(await results(page).locator('.passage').allTextContents())).toEqual(new Set(passages));
  await expect(page.getByTestId('search-stats')).toContainText('4 inputs');
  const requests = await page.evaluate(() => (window as unknown as { embeddingRequests: { model: string; input: string[] }[] }).embeddingRequests);
  expect(requests).toHaveLength(1);
  expect(requests[0]!.input).toEqual(['The cat sat on the mat.', ...passages]);
  expect(pageErrors).toEqual([]);
});

test('says what is missing: no passages, or no query', async ({ page }) => {
  await openSearch(page);
  await page.getByTestId('search-passages').fill('  \n');
  await page.getByTestId('search-run').click();
  await expect(page.getByTestId('search-error')).toHaveText(/at least one passage/);
  await page.getByTestId('search-passages').fill('The cat sat on the mat.');
  await page.getByTestId('search-query').fill('');
  await page.getByTestId('search-run').click();
  await expect(page.getByTestId('search-error')).toHaveText(/Give a query/);
});
