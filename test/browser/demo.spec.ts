// The demo page, used as a person would: wait for the embedded model, type a prompt, change
// parameters, generate, stop, hover tokens, copy the code, load other models (by URL, repo id,
// local files), and read the errors the page shows. Screenshots at desktop and phone width are
// saved as test artifacts (test-results/, attached to the report).
import { expect, test, type Locator, type Page } from '@playwright/test';
import { COMPLETION_PARAMS } from '../../src/api/schema.ts';
import { STRUCTURED_PARAMS } from '../../demo/params-panel.ts';
import { SCHEMA_EXAMPLES } from '../../demo/structured-panel.ts';
import { reference } from './reference.ts';
import { runInConsole } from './console.ts';

const body = (page: Page) => page.locator('body');
const param = (page: Page, name: string) => page.locator(`#param-${name}`);
/** The completion text of the first (or only) choice, without the dimmed prompt. */
const completion = (page: Page) => page.locator('#output .choice-text').first();
const output = (page: Page) => page.locator('#output');
const errorBox = (page: Page) => page.locator('#error');

/** Records uncaught page errors; the test ends by checking there were none. */
function watchPageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  return errors;
}

async function readyWithDefaultModel(page: Page, url = '/'): Promise<void> {
  await page.goto(url);
  await expect(body(page)).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await errorBox(page).textContent()).toBe('');
  await expect(body(page)).toHaveAttribute('data-state', 'ready');
}

/** Clicks Generate and waits for the completion to end (any finish: length, stop, aborted, error). */
async function generate(page: Page): Promise<void> {
  await page.locator('#generate').click();
  await expect(output(page)).toHaveAttribute('data-finish', /.+/, { timeout: 240_000 });
}

async function greedy(page: Page, maxTokens: number, prompt = reference.prompt): Promise<void> {
  await page.locator('#prompt').fill(prompt);
  await param(page, 'max_tokens').fill(String(maxTokens));
  await param(page, 'temperature').fill('0');
}

async function popoverRows(page: Page): Promise<Locator> {
  const popover = page.getByTestId('token-popover');
  await expect(popover).toBeVisible();
  return popover.locator('table.alternatives tr');
}

test('the embedded model loads at once and streams the reference completion, tinted, with live figures', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await readyWithDefaultModel(page);

  await test.step('adapter, progress, model and cache are shown', async () => {
    await expect(page.locator('#adapter')).toContainText('GPU:');
    await expect(page.locator('#adapter')).toContainText(/shader-f16: (yes|no)/);
    await expect(page.locator('#status')).toContainText('Ready');
    await expect(page.locator('#progress')).toHaveAttribute('data-phase', /^(download|upload)$/);
    expect(await page.locator('#progress').evaluate((p: HTMLProgressElement) => p.value)).toBeGreaterThan(0);
    await expect(page.locator('#model-name')).toContainText('stories260K (gguf');
    // Loaded from its URL, the model went into the weight cache: listed with its size.
    await expect(page.getByTestId('cached-model')).toHaveCount(1);
    await expect(page.getByTestId('cached-model')).toContainText(/stories260K\s*\d+(\.\d)? (KiB|MiB)/);
  });

  await test.step('stream 32 tokens greedily', async () => {
    await greedy(page, 32);
    await generate(page);
    expect(await errorBox(page).textContent()).toBe('');
    await expect(output(page)).toHaveAttribute('data-finish', 'length');
    expect(await completion(page).textContent()).toBe(reference.completion_text);
    await expect(output(page).locator('.prompt-text')).toHaveText(reference.prompt);
  });

  await test.step('every token is a tinted span; the figures and the JSON are shown', async () => {
    // The demo asks for logprobs 5 by default: tokens carry their probability in --p.
    const tokens = output(page).locator('.tok');
    expect(await tokens.count()).toBeGreaterThan(20);
    const joined = (await tokens.allTextContents()).join('');
    expect(joined).toBe(reference.completion_text);
    const probabilities = await tokens.evaluateAll((spans) => spans.map((s) => Number((s as HTMLElement).style.getPropertyValue('--p'))));
    for (const p of probabilities) {
      expect(p).toBeGreaterThan(0);
      expect(p).toBeLessThanOrEqual(1);
    }
    await expect(page.locator('#stats')).toHaveText(/time to first token \d+ ms · 32 tokens · \d+(\.\d)? tokens\/s/);

    const request = JSON.parse((await page.getByTestId('request-json').textContent())!);
    expect(request).toMatchObject({ model: 'stories260K', prompt: reference.prompt, max_tokens: 32, temperature: 0, logprobs: 5, stream: true });
    const lastChunks = JSON.parse((await page.getByTestId('response-json').textContent())!);
    expect(lastChunks.length).toBe(3);
    expect(lastChunks.at(-1).usage).toMatchObject({ completion_tokens: 32 });
    expect(lastChunks.at(-2).choices[0].finish_reason).toBe('length');
  });

  await test.step('hover, focus or tap a token: its alternatives, with probabilities', async () => {
    const tokens = output(page).locator('.tok');
    await tokens.nth(2).hover();
    const rows = await popoverRows(page);
    // logprobs 5: five alternatives, plus the chosen token when it is not among them.
    expect(await rows.count()).toBeGreaterThanOrEqual(5);
    expect(await rows.count()).toBeLessThanOrEqual(6);
    await expect(rows.first()).toContainText('%');
    const chosen = page.getByTestId('token-popover').locator('tr.chosen');
    await expect(chosen).toHaveCount(1);
    await expect(chosen).toContainText(JSON.stringify(await tokens.nth(2).textContent()));
    await page.keyboard.press('Escape');
    await expect(page.getByTestId('token-popover')).toBeHidden();

    await tokens.nth(5).focus();
    await expect(page.getByTestId('token-popover')).toContainText(JSON.stringify(await tokens.nth(5).textContent()));
    await page.locator('h1').click(); // a tap elsewhere hides it
    await expect(page.getByTestId('token-popover')).toBeHidden();
    await tokens.nth(7).click(); // a tap on a token shows it
    await expect(page.getByTestId('token-popover')).toContainText(JSON.stringify(await tokens.nth(7).textContent()));
  });
  expect(pageErrors).toEqual([]);
});

test('the panel has a control for every API parameter; changed parameters are sent and answered', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await readyWithDefaultModel(page);

  // Every parameter of the API's own table, except the ones set elsewhere (model, prompt) or
  // that only wrap others (extra_body), has a control showing its default (and range).
  for (const [name, row] of Object.entries(COMPLETION_PARAMS)) {
    if (['model', 'prompt', 'extra_body', ...STRUCTURED_PARAMS].includes(name)) continue;
    const control = page.locator(`#params [data-param="${name}"]`);
    await expect(control, name).toHaveCount(1);
    await expect(control.locator('.hint'), name).toContainText('default');
    if (row.range) await expect(control.locator('.hint'), name).toContainText(row.range);
  }
  await expect(param(page, 'temperature')).toHaveAttribute('min', '0');
  await expect(param(page, 'temperature')).toHaveAttribute('max', '2');
  // Touch keyboards: digits only where the range allows neither negatives nor fractions, a minus
  // key (the default keyboard of a number field) where it allows negatives.
  await expect(param(page, 'max_tokens')).toHaveAttribute('inputmode', 'numeric');
  await expect(param(page, 'temperature')).toHaveAttribute('inputmode', 'decimal');
  for (const name of ['presence_penalty', 'frequency_penalty', 'top_k', 'seed']) {
    await expect(param(page, name), name).not.toHaveAttribute('inputmode', /./, { timeout: 5_000 });
  }
  // What a parameter does is not only in a hover title: tapping its facts line shows it.
  const doc = page.locator('#params [data-param="temperature"] .param-doc');
  await expect(doc).toBeHidden();
  await page.locator('#params [data-param="temperature"] summary').click();
  await expect(doc).toBeVisible({ timeout: 5_000 });
  await expect(doc).toHaveText(COMPLETION_PARAMS.temperature.doc);

  // Two sampled choices, not streamed, with a seed and a stop string.
  await page.locator('#prompt').fill(reference.prompt);
  await param(page, 'max_tokens').fill('6');
  await param(page, 'temperature').fill('0.9');
  await page.locator('#params summary', { hasText: 'Choices' }).click();
  await param(page, 'n').fill('2');
  await page.locator('#params summary', { hasText: 'Streaming' }).click();
  await param(page, 'stream').uncheck();
  await expect(param(page, 'stream_options')).toBeDisabled();
  await param(page, 'seed').fill('7');
  await param(page, 'stop').fill('["\\n\\n"]');
  const request = JSON.parse((await page.getByTestId('request-json').textContent())!);
  expect(request).toEqual({
    model: 'stories260K',
    prompt: reference.prompt,
    max_tokens: 6,
    temperature: 0.9,
    n: 2,
    seed: 7,
    stop: ['\n\n'],
    logprobs: 5,
  });

  await generate(page);
  expect(await errorBox(page).textContent()).toBe('');
  await expect(output(page).locator('.choice')).toHaveCount(2);
  const response = JSON.parse((await page.getByTestId('response-json').textContent())!);
  expect(response.object).toBe('text_completion');
  expect(response.choices).toHaveLength(2);
  const texts = await output(page).locator('.choice-text').allTextContents();
  expect(texts).toEqual(response.choices.map((c: { text: string }) => c.text));
  await expect(page.locator('#stats')).toContainText('not streamed');
  expect(pageErrors).toEqual([]);
});

test('Structured output: an example schema constrains the completion, shown pretty-printed', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await readyWithDefaultModel(page);
  await page.locator('#prompt').fill(reference.prompt);
  await param(page, 'max_tokens').fill('96');
  await page.locator('#structured-kind').selectOption('json_schema');
  await page.locator('#params .structured-examples button', { hasText: 'A character' }).click();
  const request = JSON.parse((await page.getByTestId('request-json').textContent())!);
  expect(request.guided_json).toEqual(SCHEMA_EXAMPLES['A character']);
  await generate(page);
  expect(await errorBox(page).textContent()).toBe('');
  await expect(output(page)).toHaveAttribute('data-finish', 'stop');
  const text = (await output(page).locator('.choice-text').allTextContents()).join('');
  const pretty = page.getByTestId('structured-json').locator('pre');
  await expect(pretty).toHaveCount(1);
  expect(await pretty.textContent()).toBe(JSON.stringify(JSON.parse(text), null, 2));
  expect(Object.keys(JSON.parse(text))).toEqual(expect.arrayContaining(['name', 'age', 'mood']));

  // A regex, and a choice: the text is one of them.
  await page.locator('#structured-kind').selectOption('choice');
  await page.locator('#structured-spec').fill('happy\nsad');
  await generate(page);
  await expect(output(page)).toHaveAttribute('data-finish', 'stop');
  expect(['happy', 'sad']).toContain((await output(page).locator('.choice-text').allTextContents()).join(''));
  await expect(page.getByTestId('structured-json')).toBeHidden();
  expect(pageErrors).toEqual([]);
});

test('a bad parameter shows the API error message in the page', async ({ page }) => {
  await readyWithDefaultModel(page);
  await greedy(page, 4);

  await param(page, 'temperature').fill('5');
  await generate(page);
  await expect(output(page)).toHaveAttribute('data-finish', 'error');
  await expect(errorBox(page)).toBeVisible();
  await expect(errorBox(page)).toContainText("400 invalid_request_error, value_above_maximum (param: temperature): Invalid 'temperature': 5 is out of range");
  const answer = JSON.parse((await page.getByTestId('response-json').textContent())!);
  expect(answer.error.param).toBe('temperature');

  // A field that is not JSON is caught before anything is sent, and named.
  await param(page, 'temperature').fill('0');
  await page.locator('#params summary', { hasText: 'Penalties' }).click();
  await param(page, 'logit_bias').fill('{13: -100}');
  await page.locator('#generate').click();
  await expect(errorBox(page)).toContainText('logit_bias must be JSON');

  // Fixed, it runs.
  await param(page, 'logit_bias').fill('');
  await generate(page);
  await expect(output(page)).toHaveAttribute('data-finish', 'length');
  await expect(errorBox(page)).toBeHidden();
});

test('Stop ends a running completion, and the next one runs', async ({ page }) => {
  await readyWithDefaultModel(page);
  await param(page, 'max_tokens').fill('1500');
  await param(page, 'ignore_eos').check(); // it cannot end by itself before Stop
  await page.locator('#generate').click();
  await expect(completion(page)).not.toHaveText('', { timeout: 120_000 }); // some text has streamed in
  await expect(page.locator('#generate')).toHaveText('Stop');
  // A click within the double-click time of Generate would count as its second click, which the
  // page ignores: wait that out. The completion is long enough (1500 tokens) to be still streaming then.
  await page.waitForTimeout(600);
  await page.locator('#generate').click();
  await expect(output(page)).toHaveAttribute('data-finish', 'aborted');
  await expect(page.locator('#status')).toHaveText('Stopped.');
  await expect(page.locator('#response-note')).toContainText('stopped');
  expect(await errorBox(page).textContent()).toBe('');

  await param(page, 'ignore_eos').uncheck();
  await greedy(page, 32);
  await generate(page);
  await expect(output(page)).toHaveAttribute('data-finish', 'length');
  expect(await completion(page).textContent()).toBe(reference.completion_text);
});

test('a double click on Generate starts one completion, and does not stop it at once', async ({ page }) => {
  await readyWithDefaultModel(page);
  await greedy(page, 32);
  await page.locator('#generate').dblclick();
  await expect(output(page)).toHaveAttribute('data-finish', /.+/, { timeout: 240_000 });
  await expect(output(page)).toHaveAttribute('data-finish', 'length');
  expect(await completion(page).textContent()).toBe(reference.completion_text);
});

test('an error event in the middle of a stream is reported as such, not as HTTP 200', async ({ page }) => {
  await readyWithDefaultModel(page);
  // The server side of a stream that fails after its first chunk: one chunk, an error event, [DONE].
  await page.evaluate(() => {
    const chunk = { id: 'cmpl-1', object: 'text_completion', created: 0, model: 'stories260K', choices: [{ index: 0, text: ' Once', logprobs: null, finish_reason: null }] };
    const error = { error: { message: 'The GPU device was lost.', type: 'server_error', param: null, code: null } };
    const sse = [chunk, error].map((event) => `data: ${JSON.stringify(event)}\n\n`).join('') + 'data: [DONE]\n\n';
    window.fetch = async () => new Response(sse, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  });
  await generate(page);
  await expect(output(page)).toHaveAttribute('data-finish', 'error');
  await expect(page.locator('#response-note')).toHaveText('(error event in the stream)');
  await expect(errorBox(page)).toContainText('The GPU device was lost.');
  await expect(errorBox(page)).toContainText('Error event in the stream (server_error): The GPU device was lost.');
  await expect(errorBox(page)).not.toContainText('200');
});

test('the openai snippet runs as copied in the page and gives the same text; the curl snippet targets the CLI server', async ({ page, context }) => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await readyWithDefaultModel(page);
  await greedy(page, 12);
  await generate(page);
  const text = await completion(page).textContent();

  const curl = (await page.getByTestId('curl-snippet').textContent())!;
  expect(curl).toContain('curl -N http://127.0.0.1:8080/v1/completions');
  expect(curl).toContain('npx webgpu-llama serve --model PATH');
  expect(curl).toContain('"max_tokens": 12');

  await expect(page.locator('.exchange .hint')).toContainText("this page's DevTools console");
  await page.locator('#copy-openai').click();
  await expect(page.locator('#copy-status')).toHaveText('Copied.');
  const snippet = await page.evaluate(() => navigator.clipboard.readText());
  expect(snippet).toBe(await page.getByTestId('openai-snippet').textContent());
  expect(snippet).toContain("apiKey: 'unused', dangerouslyAllowBrowser: true })");
  expect(snippet).toContain("import OpenAI from 'openai'"); // as a comment: what an app writes
  // Unmodified, in the demo page itself.
  expect(await runInConsole(page, snippet)).toEqual([text]);

  // Streamed with n = 2: each choice's text on its own, as the page shows them.
  await page.locator('#params summary', { hasText: 'Choices' }).click();
  await param(page, 'n').fill('2');
  await param(page, 'temperature').fill('0.9');
  await param(page, 'seed').fill('7');
  await generate(page);
  const texts = await output(page).locator('.choice-text').allTextContents();
  expect(texts).toHaveLength(2);
  await page.locator('#copy-openai').click();
  const streamed = await page.evaluate(() => navigator.clipboard.readText());
  expect(streamed).toContain('"stream": true');
  expect(await runInConsole(page, streamed)).toEqual([texts.join('\n---\n')]);
});

test('a URL or a Hugging Face repo id loads; the cached models list shows sizes and deletes', async ({ page, baseURL }) => {
  const pageErrors = watchPageErrors(page);
  // A mirror of the hub on this server: /hub/{repo}/resolve/{revision}/{file} serves the HF copy.
  await page.route('**/hub/test-org/tiny-stories/resolve/main/**', (route) =>
    route.continue({ url: route.request().url().replace('/hub/test-org/tiny-stories/resolve/main/', '/models/stories260K/hf/') }),
  );
  await readyWithDefaultModel(page, `/?hub=${encodeURIComponent(`${baseURL}/hub`)}`);

  await page.locator('#model-source').fill('nonsense here');
  await page.locator('#load-source').click();
  await expect(errorBox(page)).toContainText('neither a Hugging Face repo id');

  await page.locator('#model-source').fill('test-org/tiny-stories');
  await page.locator('#load-source').click();
  await expect(body(page)).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await errorBox(page).textContent()).toBe('');
  await expect(page.locator('#model-name')).toContainText('tiny-stories (safetensors');
  await greedy(page, 32);
  await generate(page);
  expect(await completion(page).textContent()).toBe(reference.completion_text);

  const cached = page.getByTestId('cached-model');
  await expect(cached).toHaveCount(2);
  const mirrored = cached.filter({ hasText: 'tiny-stories' });
  await expect(mirrored).toContainText(/\d+(\.\d)? (KiB|MiB)/);
  await mirrored.getByRole('button', { name: 'Delete' }).click();
  await expect(cached).toHaveCount(1);
  await expect(cached).toContainText('stories260K');

  await page.locator('#model-source').fill('/models/stories260K/hf/');
  await page.locator('#load-source').click();
  await expect(body(page)).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await errorBox(page).textContent()).toBe('');
  await expect(page.locator('#model-name')).toContainText('(safetensors');
  expect(pageErrors).toEqual([]);
});

test('?hub= takes a bare host name (https:// is added)', async ({ page }) => {
  const requested: string[] = [];
  await page.route('https://hf-mirror.example/**', (route) => {
    requested.push(route.request().url());
    return route.abort();
  });
  await readyWithDefaultModel(page, '/?hub=hf-mirror.example');
  await page.locator('#model-source').fill('test-org/tiny-stories');
  await page.locator('#load-source').click();
  await expect(body(page)).toHaveAttribute('data-state', 'error', { timeout: 120_000 });
  expect(requested[0]).toMatch(/^https:\/\/hf-mirror\.example\/test-org\/tiny-stories\/resolve\/main\//);
  await expect(errorBox(page)).not.toContainText('Not a valid hub host');
});

test('?model= loads the Hugging Face (safetensors) copy, which gives the same completion', async ({ page }) => {
  await readyWithDefaultModel(page, '/?model=/models/stories260K/hf/&id=stories260K');
  await expect(page.locator('#model-name')).toContainText('safetensors');
  await greedy(page, 32);
  await generate(page);
  expect(await errorBox(page).textContent()).toBe('');
  expect(await completion(page).textContent()).toBe(reference.completion_text);
});

test.describe('errors are shown in the page', () => {
  async function expectLoadError(page: Page, url: string, message: RegExp): Promise<void> {
    await page.goto(url);
    await expect(body(page)).toHaveAttribute('data-state', 'error', { timeout: 120_000 });
    await expect(errorBox(page)).toBeVisible();
    await expect(errorBox(page)).toContainText(message);
    await expect(page.locator('#generate')).toBeDisabled();
  }

  test('a model that cannot be loaded', async ({ page }) => {
    await expectLoadError(page, '/?model=/models/does-not-exist.gguf', /does-not-exist|404/);
  });

  test('a model too large for the memory budget', async ({ page }) => {
    await expectLoadError(page, '/?memoryBudgetMiB=0.5', /Model stories260K needs \d+ bytes .* of GPU memory but the budget allows 524288 bytes/);
  });

  test('a ?memoryBudgetMiB= that is empty or not a number', async ({ page }) => {
    for (const value of ['', 'lots', '-1']) {
      await expectLoadError(page, `/?memoryBudgetMiB=${value}`, /\?memoryBudgetMiB= must be a number of MiB/);
      await expect(errorBox(page)).toContainText(JSON.stringify(value));
      await expect(errorBox(page)).not.toContainText('memoryBudgetBytes');
    }
  });

  test('a browser without WebGPU', async ({ page }) => {
    await page.addInitScript(() => Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined }));
    await expectLoadError(page, '/', /no WebGPU/);
    await expect(page.locator('#adapter')).toHaveText('GPU: none (this browser has no WebGPU)');
  });

  test('Ctrl+Enter sends nothing while Generate is disabled', async ({ page }) => {
    await expectLoadError(page, '/?model=/models/does-not-exist.gguf', /does-not-exist|404/);
    const loadError = await errorBox(page).textContent();
    await page.locator('#prompt').press('Control+Enter');
    await page.waitForTimeout(1000);
    await expect(body(page)).toHaveAttribute('data-state', 'error');
    await expect(output(page)).not.toHaveAttribute('data-finish');
    expect(await errorBox(page).textContent()).toBe(loadError);
  });
});

// ---- local files: a visitor's own model, picked or dropped --------------------------------

const MODEL_DIR = 'public/models/stories260K';
const HF_FILES = ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'model.safetensors'];

/** Waits for the new model, generates 32 tokens greedily and checks the reference text. */
async function expectReferenceCompletion(page: Page, format: string): Promise<void> {
  await expect(body(page)).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await errorBox(page).textContent()).toBe('');
  await expect(body(page)).toHaveAttribute('data-state', 'ready');
  await expect(page.locator('#model-name')).toContainText(`(${format}`);
  await expect(page.locator('#model-name')).toContainText('from local files');
  await greedy(page, 32);
  await generate(page);
  expect(await errorBox(page).textContent()).toBe('');
  expect(await completion(page).textContent()).toBe(reference.completion_text);
}

test('a .gguf file picked with the file input replaces the model', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
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

test('the same files picked one by one with the file input load too', async ({ page }) => {
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
  await expect(body(page)).toHaveAttribute('data-state', 'error', { timeout: 120_000 });
  await expect(errorBox(page)).toBeVisible();
  await expect(page.locator('#generate')).toBeDisabled();
  await page.locator('#model-files').setInputFiles(`${MODEL_DIR}/stories260K.gguf`);
  await expectReferenceCompletion(page, 'gguf');
});

test('while a model loads, cached models cannot be loaded and a dropped file is ignored with a message', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await readyWithDefaultModel(page);
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  await page.route('**/models/stories260K/hf/**', async (route) => {
    await gate;
    await route.continue();
  });
  await page.locator('#model-source').fill('/models/stories260K/hf/');
  await page.locator('#load-source').click();
  await expect(body(page)).toHaveAttribute('data-state', 'loading');
  const cachedLoad = page.getByTestId('cached-model').getByRole('button', { name: /^Load / });
  await expect(cachedLoad).toBeDisabled({ timeout: 5_000 });
  await page.evaluate(async () => {
    const transfer = new DataTransfer();
    transfer.items.add(new File([await (await fetch('/models/stories260K/stories260K.gguf')).blob()], 'stories260K.gguf'));
    document.body.dispatchEvent(new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true }));
  });
  await expect(page.getByTestId('load-note')).toHaveText(/ignored .*a model was loading/i, { timeout: 5_000 });
  release();
  await expect(body(page)).toHaveAttribute('data-state', 'ready', { timeout: 240_000 });
  await expect(page.locator('#model-name')).toContainText('(safetensors');
  await expect(page.locator('#model-name')).not.toContainText('from local files');
  await expect(cachedLoad.first()).toBeEnabled();
  expect(pageErrors).toEqual([]);
});

test('loading a model while a completion streams stops it cleanly first', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await readyWithDefaultModel(page);
  await param(page, 'max_tokens').fill('400');
  await param(page, 'ignore_eos').check();
  await page.locator('#generate').click();
  await expect(completion(page)).not.toHaveText('', { timeout: 120_000 }); // some text has streamed in
  await page.locator('#model-files').setInputFiles(`${MODEL_DIR}/stories260K.gguf`);
  await expect(output(page)).toHaveAttribute('data-finish', 'aborted');
  await param(page, 'ignore_eos').uncheck();
  await expectReferenceCompletion(page, 'gguf');
  expect(pageErrors).toEqual([]);
});

// ---- screenshots: desktop and phone ---------------------------------------------------------

for (const [name, viewport] of [
  ['desktop', { width: 1280, height: 800 }],
  ['phone', { width: 390, height: 844 }],
] as const) {
  test(`screenshot at ${name} width (${viewport.width}x${viewport.height}), usable there`, async ({ page }, testInfo) => {
    await page.setViewportSize(viewport);
    await readyWithDefaultModel(page);
    if (name === 'phone') {
      // At phone width the parameter groups start closed, so that the output is near the prompt.
      await expect(page.locator('#params details[open]')).toHaveCount(0);
      await page.locator('#params summary', { hasText: 'Length and stop' }).click();
      await page.locator('#params summary', { hasText: 'Sampling' }).click();
    }
    await greedy(page, 16);
    await generate(page);
    await expect(output(page)).toHaveAttribute('data-finish', 'length');
    // Nothing wider than the screen: no sideways scrolling.
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(viewport.width);
    // Tapping a token shows its alternatives, inside the screen.
    await output(page).locator('.tok').nth(3).click();
    const popover = page.getByTestId('token-popover');
    await expect(popover).toBeVisible();
    const box = (await popover.boundingBox())!;
    expect(box.x).toBeGreaterThanOrEqual(0);
    expect(box.x + box.width).toBeLessThanOrEqual(viewport.width);

    const viewportShot = testInfo.outputPath(`demo-${name}.png`);
    await page.screenshot({ path: viewportShot });
    await testInfo.attach(`demo-${name}`, { path: viewportShot, contentType: 'image/png' });
    const fullShot = testInfo.outputPath(`demo-${name}-full.png`);
    await page.screenshot({ path: fullShot, fullPage: true });
    await testInfo.attach(`demo-${name}-full`, { path: fullShot, contentType: 'image/png' });
  });
}
