// The official `openai` npm client, in the page, against the page's fetch shim: the client is made
// as browser code would make it (baseURL at the shim, dangerouslyAllowBrowser, no custom fetch),
// and answers with stories260K on the page's WebGPU. Non-streamed, streamed, a stream left early,
// and errors as the client's error classes.
import { expect, test, type Page } from '@playwright/test';
import { reference } from './reference.ts';

const MODEL = 'stories260K';
// cached_tokens: 0 on a cold cache, up to 4 when an earlier request left the prompt's K/V.
const USAGE = { prompt_tokens: 5, completion_tokens: 32, total_tokens: 37, prompt_tokens_details: { cached_tokens: expect.any(Number) } };

test.describe('the openai client in the page, against the fetch shim', () => {
  let page: Page;
  const pageErrors: string[] = [];

  test.beforeAll(async ({ browser }) => {
    test.setTimeout(300_000);
    page = await browser.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto('/test-pages/openai.html');
    await page.waitForFunction(() => 'openaiReady' in window);
    expect(await page.evaluate(() => (window as any).openaiReady())).toBe(MODEL);
  });
  test.afterAll(async () => {
    await page?.close();
  });
  test.afterEach(() => {
    expect(pageErrors.splice(0)).toEqual([]);
  });

  test('completions.create, not streamed: the reference greedy text', async () => {
    const completion = await page.evaluate(
      async ({ model, prompt }) => {
        const OpenAI = (window as any).OpenAI;
        const client = new OpenAI({ apiKey: 'unused', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true });
        return client.completions.create({ model, prompt, max_tokens: 32, temperature: 0 });
      },
      { model: MODEL, prompt: reference.prompt },
    );
    expect(completion.object).toBe('text_completion');
    expect(completion.model).toBe(MODEL);
    expect(completion.id).toMatch(/^cmpl-/);
    expect(completion.choices).toHaveLength(1);
    expect(completion.choices[0].index).toBe(0);
    expect(completion.choices[0].text).toBe(reference.completion_text);
    expect(completion.choices[0].finish_reason).toBe('length');
    expect(completion.choices[0].logprobs).toBeNull();
    expect(completion.usage).toEqual(USAGE);
  });

  test('completions.create with stream: true: the chunks spell the reference text', async () => {
    const result = await page.evaluate(
      async ({ model, prompt }) => {
        const OpenAI = (window as any).OpenAI;
        const client = new OpenAI({ apiKey: 'unused', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true });
        const stream = await client.completions.create({
          model,
          prompt,
          max_tokens: 32,
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
        });
        const chunks: any[] = [];
        for await (const chunk of stream) chunks.push(chunk);
        return chunks;
      },
      { model: MODEL, prompt: reference.prompt },
    );
    const withChoices = result.filter((c) => c.choices.length > 0);
    expect(withChoices.length).toBeGreaterThan(1);
    const ids = new Set(result.map((c) => c.id));
    expect(ids.size).toBe(1);
    for (const chunk of result) {
      expect(chunk.object).toBe('text_completion');
      expect(chunk.model).toBe(MODEL);
    }
    expect(withChoices.map((c) => c.choices[0].text).join('')).toBe(reference.completion_text);
    expect(withChoices.slice(0, -1).every((c) => c.choices[0].finish_reason === null)).toBe(true);
    expect(withChoices.at(-1).choices[0].finish_reason).toBe('length');
    // include_usage: one last chunk with no choices carries the usage.
    expect(result.at(-1).choices).toEqual([]);
    expect(result.at(-1).usage).toEqual(USAGE);
  });

  test('a stream left after two chunks (controller.abort) stops; the next request gives the reference', async () => {
    const result = await page.evaluate(
      async ({ model, prompt }) => {
        const OpenAI = (window as any).OpenAI;
        const client = new OpenAI({ apiKey: 'unused', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true });
        const stream = await client.completions.create({ model, prompt, max_tokens: 200, temperature: 0, ignore_eos: true, stream: true });
        let received = 0;
        let ended = 'finished';
        try {
          for await (const chunk of stream) {
            received += chunk.choices.length;
            if (received === 2) stream.controller.abort();
          }
        } catch (err) {
          ended = (err as Error).name;
        }
        const next = await client.completions.create({ model, prompt, max_tokens: 32, temperature: 0 });
        return { received, ended, text: next.choices[0].text };
      },
      { model: MODEL, prompt: reference.prompt },
    );
    test.info().annotations.push({ type: 'abort', description: `${result.received} chunks, then ${result.ended}` });
    // The client reports a user abort as APIUserAbortError (or ends the iteration quietly).
    expect(['APIUserAbortError', 'AbortError', 'finished']).toContain(result.ended);
    expect(result.received).toBeGreaterThanOrEqual(2);
    // Far fewer than the 200 asked for: the generation stopped at the abort.
    expect(result.received).toBeLessThan(50);
    expect(result.text).toBe(reference.completion_text);
  });

  test('errors come as the client’s error classes: unknown model → NotFoundError 404, bad value → BadRequestError 400', async () => {
    const errors = await page.evaluate(async (model) => {
      const OpenAI = (window as any).OpenAI;
      const client = new OpenAI({ apiKey: 'unused', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true, maxRetries: 0 });
      const describe = (e: any) => ({
        notFound: e instanceof OpenAI.NotFoundError,
        badRequest: e instanceof OpenAI.BadRequestError,
        apiError: e instanceof OpenAI.APIError,
        status: e?.status,
        code: e?.code,
        param: e?.param,
        type: e?.type,
        message: String(e?.message),
      });
      const missing = await client.completions.create({ model: 'no-such-model', prompt: 'Once' }).then(() => null, describe);
      const missingStream = await client.completions
        .create({ model: 'no-such-model', prompt: 'Once', stream: true })
        .then(() => null, describe);
      const bad = await client.completions.create({ model, prompt: 'Once', temperature: 5 }).then(() => null, describe);
      return { missing, missingStream, bad };
    }, MODEL);
    for (const missing of [errors.missing, errors.missingStream]) {
      expect(missing).toMatchObject({ notFound: true, apiError: true, status: 404, code: 'model_not_found', param: 'model' });
      expect(missing!.message).toContain('no-such-model');
    }
    expect(errors.bad).toMatchObject({ badRequest: true, apiError: true, status: 400, param: 'temperature' });
  });

  test('models.list names the loaded model', async () => {
    const ids = await page.evaluate(async () => {
      const OpenAI = (window as any).OpenAI;
      const client = new OpenAI({ apiKey: 'unused', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true });
      const out: string[] = [];
      for await (const model of client.models.list()) out.push(model.id);
      return out;
    });
    expect(ids).toContain(MODEL);
  });
});
