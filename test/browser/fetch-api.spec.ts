// Plain fetch() inside the demo page is answered by the model on the page's GPU, in the shape of
// the OpenAI completions API (shared/spec/completions-api.md).
import { expect, test, type Page } from '@playwright/test';
import { reference } from './reference.ts';

const MODEL = 'stories260K';

async function openDemo(page: Page): Promise<void> {
  await page.goto('/');
  // The demo installs the fetch shim as its module runs; requests sent before the model has
  // loaded wait for it, so there is nothing else to wait for here.
  await page.waitForFunction(() => document.body.dataset.state !== undefined);
}

test.describe('fetch shim in the demo page', () => {
  // One page for all (the model loads once); a failing test restarts the worker, which reopens it.
  let page: Page;

  test.beforeAll(async ({ browser }) => {
    page = await browser.newPage();
    await openDemo(page);
  });
  test.afterAll(async () => {
    await page.close();
  });

  test('non-streamed greedy completion equals the reference (sent as soon as the page opens)', async () => {
    const result = await page.evaluate(async (model) => {
      const response = await fetch('/v1/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 32, temperature: 0 }),
      });
      return { status: response.status, contentType: response.headers.get('content-type'), body: await response.json() };
    }, MODEL);

    expect(result.status, JSON.stringify(result.body)).toBe(200);
    expect(result.contentType).toContain('application/json');
    const body = result.body;
    expect(body.object).toBe('text_completion');
    expect(typeof body.id).toBe('string');
    expect(Number.isInteger(body.created)).toBe(true);
    expect(body.model).toBe(MODEL);
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0].index).toBe(0);
    expect(body.choices[0].text).toBe(reference.completion_text);
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 32, total_tokens: 37, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
  });

  test('streamed greedy completion (SSE) equals the reference', async () => {
    const result = await page.evaluate(async (model) => {
      const response = await fetch('/v1/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({
          model,
          prompt: 'Once upon a time',
          max_tokens: 32,
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
      const contentType = response.headers.get('content-type');
      if (!response.ok) return { status: response.status, contentType, raw: await response.text(), events: [] as string[] };
      const raw = await response.text();
      const events = raw
        .split(/\r?\n\r?\n/)
        .map((event) =>
          event
            .split(/\r?\n/)
            .filter((line) => line.startsWith('data:'))
            .map((line) => line.slice(5).trimStart())
            .join('\n'),
        )
        .filter((data) => data !== '');
      return { status: response.status, contentType, raw, events };
    }, MODEL);

    expect(result.status, result.raw).toBe(200);
    expect(result.contentType).toContain('text/event-stream');
    expect(result.events.at(-1)).toBe('[DONE]');
    const chunks = result.events.slice(0, -1).map((data) => JSON.parse(data));
    expect(chunks.length).toBeGreaterThan(1);
    let text = '';
    let finishReason: string | null = null;
    let usage: unknown;
    for (const chunk of chunks) {
      expect(chunk.object).toBe('text_completion');
      expect(chunk.model).toBe(MODEL);
      for (const choice of chunk.choices) {
        text += choice.text;
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(reference.completion_text);
    expect(finishReason).toBe('length');
    expect(usage).toEqual({ prompt_tokens: 5, completion_tokens: 32, total_tokens: 37, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
  });

  test('GET /v1/models lists the loaded model', async () => {
    const result = await page.evaluate(async () => {
      const response = await fetch('/v1/models');
      return { status: response.status, body: await response.json() };
    });
    expect(result.status).toBe(200);
    expect(result.body.object).toBe('list');
    expect(result.body.data.map((m: { id: string }) => m.id)).toContain(MODEL);
  });

  test('requests outside /v1 still reach the network', async () => {
    const config = await page.evaluate(async () => (await fetch('/models/stories260K/hf/config.json')).json());
    expect(config.model_type).toBe('llama');
  });
});
