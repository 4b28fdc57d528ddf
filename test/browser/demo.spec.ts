// The demo page, used as a person would: wait for the embedded model, type a prompt, click
// Generate, read the streamed answer.
import { expect, test } from '@playwright/test';
import { reference } from './reference.ts';

test('the demo loads stories260K and streams the reference completion', async ({ page }) => {
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));

  await page.goto('/');
  const body = page.locator('body');
  await expect(body).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(body).toHaveAttribute('data-state', 'ready');
  await expect(page.locator('#status')).toContainText('Ready');
  await expect(page.locator('#adapter')).toContainText('GPU:');

  await page.locator('#prompt').fill(reference.prompt);
  await page.locator('#max-tokens').fill('32');
  await page.locator('#temperature').fill('0');
  await page.locator('#generate').click();

  const output = page.locator('#output');
  await expect(output).toHaveAttribute('data-finish', /.+/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  expect(await output.getAttribute('data-finish')).toBe('length');
  expect(await output.textContent()).toBe(reference.completion_text);
  expect(pageErrors).toEqual([]);
});

test('?model= loads the Hugging Face (safetensors) copy, which gives the same completion', async ({ page }) => {
  await page.goto('/?model=/models/stories260K/hf/&id=stories260K');
  const body = page.locator('body');
  await expect(body).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(page.locator('#model-name')).toContainText('safetensors');

  await page.locator('#max-tokens').fill('32');
  await page.locator('#generate').click();
  const output = page.locator('#output');
  await expect(output).toHaveAttribute('data-finish', /.+/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  expect(await output.textContent()).toBe(reference.completion_text);
});

test('a model that cannot be loaded is reported in the page', async ({ page }) => {
  await page.goto('/?model=/models/does-not-exist.gguf');
  await expect(page.locator('body')).toHaveAttribute('data-state', 'error', { timeout: 120_000 });
  await expect(page.locator('#error')).toBeVisible();
  expect((await page.locator('#error').textContent())!.length).toBeGreaterThan(0);
  await expect(page.locator('#generate')).toBeDisabled();
});

test('Stop ends a running completion, and the next one runs', async ({ page }) => {
  await page.goto('/');
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 240_000 });
  await page.locator('#max-tokens').fill('400');
  await page.locator('#generate').click();
  const output = page.locator('#output');
  await expect(output).not.toHaveText('', { timeout: 120_000 }); // some text has streamed in
  await page.locator('#generate').click(); // now labelled Stop
  await expect(output).toHaveAttribute('data-finish', 'aborted');
  await expect(page.locator('#status')).toHaveText('Stopped.');
  expect(await page.locator('#error').textContent()).toBe('');

  await page.locator('#max-tokens').fill('32');
  await page.locator('#generate').click();
  await expect(output).toHaveAttribute('data-finish', 'length', { timeout: 240_000 });
  expect(await output.textContent()).toBe(reference.completion_text);
});
