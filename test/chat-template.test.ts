// src/tokenizer/chat-template.ts against Python: test/fixtures/chat-templates.json holds what
// Python Jinja2, set up as transformers' apply_chat_template sets it up, renders for the chat
// templates of Llama 3.2 and Qwen2.5 and for small templates of single features
// (scripts/chat-template-fixtures.py writes it). Each render must match byte for byte.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ChatTemplateError, renderChatTemplate, type ChatTemplateInput } from '../src/tokenizer/chat-template.ts';
import { root } from './helpers/model-files.ts';

interface FixtureCase {
  name: string;
  template: string;
  input: ChatTemplateInput;
  expected?: string;
  error?: string;
  syntaxError?: string;
}
const fixture = JSON.parse(readFileSync(`${root}test/fixtures/chat-templates.json`, 'utf8')) as {
  now: number[];
  templates: Record<string, string>;
  cases: FixtureCase[];
};
const [year, month, day, hour, minute, second] = fixture.now;
const now = new Date(year, month - 1, day, hour, minute, second);

async function renderError(template: string, input: ChatTemplateInput): Promise<unknown> {
  try {
    await renderChatTemplate(template, input);
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('chat templates render as Python Jinja2 in transformers', () => {
  for (const c of fixture.cases) {
    it(c.name, async () => {
      const template = fixture.templates[c.template];
      const input = { ...c.input, now };
      if (c.expected !== undefined) {
        expect(await renderChatTemplate(template, input)).toBe(c.expected);
        return;
      }
      const err = await renderError(template, input);
      expect(err).toBeInstanceOf(ChatTemplateError);
      if (c.error !== undefined) expect((err as Error).message).toBe(c.error);
      else expect((err as Error).message).toMatch(/^Chat template syntax error: /);
    });
  }
});
