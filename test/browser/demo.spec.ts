// The demo page, used as a person would: wait for the embedded model, type a prompt, click
// Generate, read the streamed answer.
import { expect, test, type Page } from '@playwright/test';
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

// ---- local files: a visitor's own model, picked or dropped --------------------------------

const MODEL_DIR = 'public/models/stories260K';
const HF_FILES = ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'model.safetensors'];

async function readyWithDefaultModel(page: Page): Promise<void> {
  await page.goto('/');
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 240_000 });
}

/** Waits for the new model, generates 32 tokens greedily and checks the reference text. */
async function expectReferenceCompletion(page: Page, format: string): Promise<void> {
  const body = page.locator('body');
  await expect(body).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(body).toHaveAttribute('data-state', 'ready');
  await expect(page.locator('#model-name')).toContainText(`(${format}`);
  await expect(page.locator('#model-name')).toContainText('from local files');
  await page.locator('#prompt').fill(reference.prompt);
  await page.locator('#max-tokens').fill('32');
  await page.locator('#temperature').fill('0');
  await page.locator('#generate').click();
  const output = page.locator('#output');
  await expect(output).toHaveAttribute('data-finish', /.+/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  expect(await output.textContent()).toBe(reference.completion_text);
}

test('a .gguf file picked with the file input replaces the model', async ({ page }) => {
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await readyWithDefaultModel(page);
  await page.locator('#model-files').setInputFiles(`${MODEL_DIR}/stories260K.gguf`);
  await expectReferenceCompletion(page, 'gguf');
  expect(pageErrors).toEqual([]);
});

test("a Hugging Face folder's files picked with the folder input load the safetensors model", async ({ page }) => {
  await readyWithDefaultModel(page);
  // Playwright uploads a directory to a webkitdirectory input (webkitRelativePath hf/...).
  await page.locator('#model-folder').setInputFiles(`${MODEL_DIR}/hf`);
  await expectReferenceCompletion(page, 'safetensors');
});

test("the same files picked one by one with the file input load too", async ({ page }) => {
  await readyWithDefaultModel(page);
  await page.locator('#model-files').setInputFiles(HF_FILES.map((name) => `${MODEL_DIR}/hf/${name}`));
  await expectReferenceCompletion(page, 'safetensors');
});

test('files dropped on the page load', async ({ page }) => {
  await readyWithDefaultModel(page);
  await page.evaluate(async (names) => {
    const transfer = new DataTransfer();
    for (const name of names) {
      const bytes = await (await fetch(`/models/stories260K/hf/${name}`)).blob();
      transfer.items.add(new File([bytes], name));
    }
    document.body.dispatchEvent(new DragEvent('dragover', { dataTransfer: transfer, bubbles: true, cancelable: true }));
    document.body.dispatchEvent(new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true }));
  }, HF_FILES);
  await expectReferenceCompletion(page, 'safetensors');
});

test('a file that is not a model is reported in the page, and a model can be loaded after it', async ({ page }) => {
  await readyWithDefaultModel(page);
  await page.locator('#model-files').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hello') });
  await expect(page.locator('body')).toHaveAttribute('data-state', 'error', { timeout: 120_000 });
  await expect(page.locator('#error')).toBeVisible();
  await expect(page.locator('#generate')).toBeDisabled();
  await page.locator('#model-files').setInputFiles(`${MODEL_DIR}/stories260K.gguf`);
  await expectReferenceCompletion(page, 'gguf');
});

test('loading a model while a completion streams stops it cleanly first', async ({ page }) => {
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await readyWithDefaultModel(page);
  await page.locator('#max-tokens').fill('400');
  await page.locator('#generate').click();
  const output = page.locator('#output');
  await expect(output).not.toHaveText('', { timeout: 120_000 }); // some text has streamed in
  await page.locator('#model-files').setInputFiles(`${MODEL_DIR}/stories260K.gguf`);
  await expect(output).toHaveAttribute('data-finish', 'aborted');
  await expectReferenceCompletion(page, 'gguf');
  expect(pageErrors).toEqual([]);
});
