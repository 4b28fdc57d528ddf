// The demo's Chat view, used as a person would: with the embedded model (stories260K, which has
// no chat template of its own) and the ChatML template the view starts with, chat over several
// turns, stop a reply, reset, copy the code; and read the errors it shows (no template, tools
// that are not JSON). A tool call, which the tiny model cannot make, comes from a fake answer.
import { expect, test, type Page } from '@playwright/test';
import { runInConsole } from './console.ts';

const body = (page: Page) => page.locator('body');
const log = (page: Page) => page.getByTestId('chat-log');
const chatError = (page: Page) => page.getByTestId('chat-error');
const bubbles = (page: Page, role: string) => log(page).locator(`.msg[data-role="${role}"]`);
/** The reply text of the assistant's `n`th bubble (choice 0). */
const replyText = (page: Page, n: number) => bubbles(page, 'assistant').nth(n).locator('.choice-text').first();
const chatParam = (page: Page, name: string) => page.locator(`#chat-param-${name}`);

function watchPageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  return errors;
}

async function openChat(page: Page, url = '/#chat'): Promise<void> {
  await page.goto(url);
  await expect(body(page)).toHaveAttribute('data-state', /^(ready|error)$/, { timeout: 240_000 });
  expect(await page.locator('#error').textContent()).toBe('');
  await expect(body(page)).toHaveAttribute('data-view', 'chat');
  await expect(page.getByTestId('chat-send')).toBeEnabled();
}

/** Records the body of every chat request the page sends (a request inspector over the page's fetch). */
async function recordChatRequests(page: Page): Promise<void> {
  await page.evaluate(() => {
    const w = window as unknown as { chatRequests: unknown[] };
    w.chatRequests = [];
    const inner = window.fetch;
    window.fetch = (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      if (url.endsWith('/chat/completions') && typeof init?.body === 'string') w.chatRequests.push(JSON.parse(init.body));
      return inner(input, init);
    };
  });
}

async function chatRequests(page: Page): Promise<{ messages: { role: string; content: string | null }[]; [key: string]: unknown }[]> {
  return page.evaluate(() => (window as unknown as { chatRequests: never[] }).chatRequests);
}

/** Types a message, sends it, and waits for the turn to end (any finish). */
async function say(page: Page, text: string): Promise<void> {
  await page.getByTestId('chat-input').fill(text);
  await page.getByTestId('chat-send').click();
  await expect(log(page)).toHaveAttribute('data-finish', /^(stop|length|tool_calls)(, (stop|length|tool_calls))*$/, { timeout: 240_000 }); // replies, not an error
}

test('a streamed multi-turn chat with the ChatML template: each turn sends the whole history, and the prompt shows it', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await page.goto('/');
  await page.getByRole('button', { name: 'Chat' }).click();
  await expect(page).toHaveURL(/#chat$/);
  await openChat(page, '/#chat');
  await recordChatRequests(page);
  await expect(page.getByTestId('chat-template')).toHaveValue(/^\{% for m in messages %\}<\|im_start\|>/);
  await chatParam(page, 'max_completion_tokens').fill('24');
  await page.getByTestId('chat-system').fill('You tell short stories.');

  // The bubble grows with the stream: count the distinct lengths its text goes through.
  await page.evaluate(() => {
    const w = window as unknown as { lengths: Set<number> };
    w.lengths = new Set();
    new MutationObserver(() => {
      const reply = document.querySelector('#chat-log .msg[data-role="assistant"] .choice-text');
      if (reply) w.lengths.add(reply.textContent!.length);
    }).observe(document.getElementById('chat-log')!, { subtree: true, childList: true, characterData: true });
  });
  await say(page, 'Tell me about a cat.');
  expect(await chatError(page).textContent()).toBe('');
  await expect(log(page)).toHaveAttribute('data-finish', /^(length|stop)$/);
  await expect(bubbles(page, 'user')).toHaveText(['userTell me about a cat.']);
  const first = (await replyText(page, 0).textContent())!;
  expect(first.length).toBeGreaterThan(5);
  expect(await page.evaluate(() => (window as unknown as { lengths: Set<number> }).lengths.size)).toBeGreaterThan(3);
  await expect(page.getByTestId('chat-stats')).toHaveText(/time to first token \d+ ms · \d+ tokens · \d+(\.\d)? tokens\/s/);
  // Tinted by probability (logprobs with 5 alternatives by default), alternatives on hover.
  const tokens = bubbles(page, 'assistant').first().locator('.tok');
  expect(await tokens.count()).toBeGreaterThan(3);
  expect((await tokens.allTextContents()).join('')).toBe(first);
  await tokens.nth(1).hover();
  await expect(page.getByTestId('token-popover').locator('tr.chosen')).toContainText(JSON.stringify(await tokens.nth(1).textContent()));
  const chunks = JSON.parse((await page.getByTestId('chat-response-json').textContent())!);
  expect(chunks.at(-1).object).toBe('chat.completion.chunk');

  await say(page, 'What happened next?');
  await expect(log(page)).toHaveAttribute('data-finish', /^(length|stop)$/);
  const second = (await replyText(page, 1).textContent())!;
  expect(second.length).toBeGreaterThan(5);
  // The second turn reused the first's K/V (the prefix cache): the stats say how much.
  await expect(page.getByTestId('chat-stats')).toHaveText(/ · prompt \d+ tokens, [1-9]\d* cached$/);
  const sent = await chatRequests(page);
  expect(sent).toHaveLength(2);
  expect(sent[0]!.messages).toEqual([
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'Tell me about a cat.' },
  ]);
  // The second turn carries the first, with the reply as the page shows it.
  expect(sent[1]!.messages).toEqual([
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'Tell me about a cat.' },
    { role: 'assistant', content: first },
    { role: 'user', content: 'What happened next?' },
  ]);
  expect(sent[1]).toMatchObject({ model: 'stories260K', stream: true, logprobs: true, top_logprobs: 5, max_completion_tokens: 24 });
  expect(sent[1]!.chat_template).toContain('<|im_start|>');
  // The request inspector shows the last request sent.
  await expect(page.getByTestId('chat-request-note')).toHaveText('(last sent)');
  expect(JSON.parse((await page.getByTestId('chat-request-json').textContent())!)).toEqual(sent[1]);

  // The rendered prompt, from /v1/tokenize and /v1/detokenize: the whole conversation in ChatML.
  await page.getByTestId('chat-show-prompt').check();
  const prompt = page.getByTestId('chat-prompt');
  await expect(page.getByTestId('chat-prompt-note')).toHaveText(/\(\d+ tokens of \d+\)/);
  await expect(prompt).toContainText('<|im_start|>system\nYou tell short stories.<|im_end|>\n<|im_start|>user\nTell me about a cat.<|im_end|>');
  await expect(prompt).toContainText(`<|im_start|>assistant\n${first}<|im_end|>\n<|im_start|>user\nWhat happened next?<|im_end|>`);
  await expect(prompt).toContainText(`<|im_start|>assistant\n${second}<|im_end|>`);
  expect((await prompt.textContent())!.endsWith('<|im_start|>assistant\n')).toBe(true);

  await test.step('Reset empties the conversation: the next turn starts afresh', async () => {
    await page.getByTestId('chat-reset').click();
    await expect(bubbles(page, 'assistant')).toHaveCount(0);
    await expect(bubbles(page, 'user')).toHaveCount(0);
    await expect(page.getByTestId('chat-prompt-note')).toContainText('the conversation is empty');
    await say(page, 'Hello.');
    const after = await chatRequests(page);
    expect(after.at(-1)!.messages).toEqual([
      { role: 'system', content: 'You tell short stories.' },
      { role: 'user', content: 'Hello.' },
    ]);
    await expect(bubbles(page, 'assistant')).toHaveCount(1);
  });
  expect(pageErrors).toEqual([]);
});

test('with the template field empty, the model has no template: the 400 is shown with what to do, and the message is kept', async ({ page }) => {
  await openChat(page);
  await page.getByTestId('chat-template').fill('');
  await page.getByTestId('chat-input').fill('Hello there.');
  await page.getByTestId('chat-send').click();
  await expect(log(page)).toHaveAttribute('data-finish', 'error', { timeout: 60_000 });
  await expect(chatError(page)).toBeVisible();
  await expect(chatError(page)).toContainText('chat_template_missing');
  await expect(chatError(page)).toContainText('Chat template field');
  await expect(bubbles(page, 'user')).toHaveCount(0);
  await expect(page.getByTestId('chat-input')).toHaveValue('Hello there.');
  expect(JSON.parse((await page.getByTestId('chat-response-json').textContent())!).error.code).toBe('chat_template_missing');
  await expect(page.locator('#status')).toHaveText('The request failed.');
  await expect(body(page)).toHaveAttribute('data-state', 'ready');

  // With the template back, the same message goes through.
  await page.getByTestId('chat-template').fill('{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:');
  await page.getByTestId('chat-send').click();
  await expect(log(page)).toHaveAttribute('data-finish', /^(length|stop)$/, { timeout: 240_000 });
  await expect(chatError(page)).toBeHidden();
  await expect(bubbles(page, 'user')).toHaveCount(1);
});

test('tools that are not a JSON array of function tools are shown as an error and nothing is sent', async ({ page }) => {
  await openChat(page);
  await recordChatRequests(page);
  await page.locator('.chat-settings summary', { hasText: 'Tools' }).click();
  await page.getByTestId('chat-tools').fill('[{"type": "function", "function": {"name": "get_weather"}');
  await expect(page.getByTestId('chat-tools-error')).toContainText('Tools: not valid JSON');
  await page.getByTestId('chat-input').fill('Hi');
  await page.getByTestId('chat-send').click();
  await expect(chatError(page)).toContainText('Tools: not valid JSON');
  await page.getByTestId('chat-tools').fill('{"type": "function"}');
  await expect(page.getByTestId('chat-tools-error')).toContainText('expected a JSON array');
  await page.getByTestId('chat-send').click();
  await expect(chatError(page)).toContainText('expected a JSON array');
  expect(await chatRequests(page)).toEqual([]);
  await expect(bubbles(page, 'user')).toHaveCount(0);
  await expect(page.getByTestId('chat-input')).toHaveValue('Hi');

  // Fixed, it is sent with the request.
  await page.getByTestId('chat-tools').fill('[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]');
  await expect(page.getByTestId('chat-tools-error')).toBeHidden();
  await chatParam(page, 'max_completion_tokens').fill('8');
  await page.getByTestId('chat-send').click();
  await expect(log(page)).toHaveAttribute('data-finish', /^(length|stop)$/, { timeout: 240_000 });
  const sent = await chatRequests(page);
  expect(sent).toHaveLength(1);
  expect(sent[0]!.tools).toEqual([{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }]);
});

test('tool calls are shown in the reply and answered as tool results (a fake answer: the tiny model makes none)', async ({ page }) => {
  await openChat(page);
  // The page's fetch answers chat requests with a canned stream: first a tool call in pieces, then text.
  await page.evaluate(() => {
    const inner = window.fetch;
    let turn = 0;
    const chunk = (delta: object, finish: string | null = null) => ({
      id: 'chatcmpl-fake',
      object: 'chat.completion.chunk',
      created: 0,
      model: 'stories260K',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    window.fetch = async (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      if (!url.endsWith('/chat/completions')) return inner(input, init);
      const events =
        turn++ === 0
          ? [
              chunk({ role: 'assistant', content: '' }),
              chunk({ tool_calls: [{ index: 0, id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
              chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city": ' } }] }),
              chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
              chunk({}, 'tool_calls'),
            ]
          : [chunk({ role: 'assistant', content: '' }), chunk({ content: 'It is sunny' }), chunk({ content: ' in Paris.' }), chunk({}, 'stop')];
      const sse = events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('') + 'data: [DONE]\n\n';
      return new Response(sse, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
    };
  });
  await recordChatRequests(page); // over the fake: it sees what the page sends
  await page.locator('.chat-settings summary', { hasText: 'Tools' }).click();
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  await page.getByTestId('chat-tools').fill(JSON.stringify(tools));

  await say(page, 'Weather in Paris?');
  await expect(log(page)).toHaveAttribute('data-finish', 'tool_calls');
  const call = bubbles(page, 'assistant').first().getByTestId('tool-call');
  await expect(call).toHaveCount(1);
  await expect(call.locator('.tool-call-name')).toHaveText('get_weather');
  await expect(call.locator('.tool-call-args')).toHaveText('{"city": "Paris"}');
  await expect(call.locator('.tool-call-id')).toHaveText('call_abc');
  await expect(bubbles(page, 'assistant').first().locator('.msg-role')).toHaveText('assistant · tool_calls');

  // The next message is offered as the call's result.
  const role = page.getByTestId('chat-role');
  await expect(role).toBeVisible();
  await expect(role).toHaveValue('call_abc');
  await say(page, '{"temperature": 21, "sky": "clear"}');
  await expect(bubbles(page, 'tool')).toHaveCount(1);
  await expect(replyText(page, 1)).toHaveText('It is sunny in Paris.');
  await expect(role).toBeHidden();
  const sent = await chatRequests(page);
  expect(sent[1]!.messages).toEqual([
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', content: '{"temperature": 21, "sky": "clear"}', tool_call_id: 'call_abc' },
  ]);
  expect(sent[1]!.tools).toEqual(tools);
});

test('Stop ends a reply; what streamed stays in the conversation, and the next turn runs', async ({ page }) => {
  const pageErrors = watchPageErrors(page);
  await openChat(page);
  await recordChatRequests(page);
  await chatParam(page, 'max_completion_tokens').fill('1500');
  await chatParam(page, 'ignore_eos').check();
  await page.getByTestId('chat-input').fill('Go on forever.');
  await page.getByTestId('chat-send').click();
  await expect(replyText(page, 0)).not.toHaveText('', { timeout: 120_000 });
  await expect(page.getByTestId('chat-send')).toHaveText('Stop');
  // A click within the double-click time of Send would count as its second click, which the
  // page ignores (a double click sends once and does not stop at once): wait that out. The
  // reply is long enough (1500 tokens) to be still streaming then.
  await page.waitForTimeout(600);
  await page.getByTestId('chat-send').click();
  await expect(log(page)).toHaveAttribute('data-finish', 'aborted');
  await expect(page.locator('#status')).toHaveText('Stopped.');
  await expect(bubbles(page, 'assistant').first()).toHaveAttribute('data-finish', 'aborted');
  const partial = (await replyText(page, 0).textContent())!;

  await chatParam(page, 'ignore_eos').uncheck();
  await chatParam(page, 'max_completion_tokens').fill('8');
  await say(page, 'Stop there.');
  await expect(log(page)).toHaveAttribute('data-finish', /^(length|stop)$/);
  const sent = await chatRequests(page);
  expect(sent[1]!.messages[1]).toEqual({ role: 'assistant', content: partial });
  expect(pageErrors).toEqual([]);
});

test('the chat snippet runs as copied in the page and gives the same reply; the curl snippet targets the chat endpoint', async ({ page, context }) => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await openChat(page);
  await chatParam(page, 'max_completion_tokens').fill('16');
  await say(page, 'Tell me a story.');
  await say(page, 'Another one.');
  const reply = await replyText(page, 1).textContent();

  const curl = (await page.getByTestId('chat-curl-snippet').textContent())!;
  expect(curl).toContain('curl -N http://127.0.0.1:8080/v1/chat/completions');
  expect(curl).toContain('"max_completion_tokens": 16');

  await page.locator('#chat-copy-openai').click();
  await expect(page.locator('#chat-copy-status')).toHaveText('Copied.');
  const snippet = await page.evaluate(() => navigator.clipboard.readText());
  expect(snippet).toBe(await page.getByTestId('chat-openai-snippet').textContent());
  expect(snippet).toContain('client.chat.completions.create(');
  expect(snippet).toContain("import OpenAI from 'openai'");
  // The last turn again, with the whole history, through the openai client: the same greedy reply.
  expect(await runInConsole(page, snippet)).toEqual([reply]);

  // Not streamed, with n = 2: both choices, as the bubble shows them.
  await page.locator('#chat-params summary', { hasText: 'Streaming' }).click();
  await chatParam(page, 'stream').uncheck();
  await page.locator('#chat-params summary', { hasText: 'Choices' }).click();
  await chatParam(page, 'n').fill('2');
  await chatParam(page, 'temperature').fill('0.9');
  await chatParam(page, 'seed').fill('7');
  await say(page, 'Two endings.');
  const texts = await bubbles(page, 'assistant').nth(2).locator('.choice-text').allTextContents();
  expect(texts).toHaveLength(2);
  await expect(page.getByTestId('chat-stats')).toContainText('not streamed');
  await page.locator('#chat-copy-openai').click();
  const whole = await page.evaluate(() => navigator.clipboard.readText());
  expect(whole).not.toContain('"stream"');
  expect(await runInConsole(page, whole)).toEqual([texts.join('\n---\n')]);
});

// ---- screenshots: desktop and phone ---------------------------------------------------------

for (const [name, viewport] of [
  ['desktop', { width: 1280, height: 800 }],
  ['phone', { width: 390, height: 844 }],
] as const) {
  test(`chat screenshot at ${name} width (${viewport.width}x${viewport.height}), usable there`, async ({ page }, testInfo) => {
    await page.setViewportSize(viewport);
    await openChat(page);
    if (name === 'phone') await expect(page.locator('#chat-params details[open]')).toHaveCount(0);
    else await chatParam(page, 'max_completion_tokens').fill('24');
    await page.getByTestId('chat-system').fill('You tell short stories.');
    await say(page, 'Tell me about a cat.');
    await say(page, 'What happened next?');
    await page.getByTestId('chat-show-prompt').check();
    await expect(page.getByTestId('chat-prompt-note')).toHaveText(/tokens of/);
    // Nothing wider than the screen: no sideways scrolling.
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(viewport.width);
    for (const [suffix, fullPage] of [['', false], ['-full', true]] as const) {
      const shot = testInfo.outputPath(`chat-${name}${suffix}.png`);
      await page.screenshot({ path: shot, fullPage });
      await testInfo.attach(`chat-${name}${suffix}`, { path: shot, contentType: 'image/png' });
    }
  });
}
