// The conversation of the Chat view as bubbles: the user's messages, tool results, and the
// assistant's replies growing with each streamed delta. A reply's text is a ChoiceView (the
// completions view's token view: tokens tinted by probability, alternatives on hover); its tool
// calls are shown below the text, name and arguments, as their pieces arrive. A model's thinking
// (`reasoning`) is folded above its answer in a <details> element, growing as it streams.
import type { ChatTokenLogprob, ChatToolCall, ChatToolCallDelta } from '../src/index.ts';
import type { ChatMessage } from './chat-run.ts';
import { ChatLogprobsReader } from './chat-logprobs.ts';
import { ChoiceView } from './token-view.ts';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text = ''): HTMLElementTagNameMap[K] {
  return Object.assign(document.createElement(tag), { className, textContent: text });
}

/** A user message (or a tool result) as a bubble. */
export function messageBubble(message: ChatMessage): HTMLElement {
  const bubble = el('div', 'msg');
  bubble.dataset.role = message.role;
  const head = message.role === 'tool' ? `tool result · ${message.tool_call_id}` : message.role;
  bubble.append(el('div', 'msg-role', head), el('div', 'msg-text', message.content ?? ''));
  return bubble;
}

/** The tool calls of one choice, each a line: `name(arguments)`, with the call's id. */
class ToolCallsView {
  readonly element = el('div', 'tool-calls');
  readonly calls: ChatToolCall[] = [];
  private readonly rows: HTMLElement[] = [];

  add(delta: ChatToolCallDelta): void {
    let call = this.calls[delta.index];
    if (!call) {
      call = { id: '', type: 'function', function: { name: '', arguments: '' } };
      this.calls[delta.index] = call;
      const row = el('div', 'tool-call');
      row.dataset.testid = 'tool-call';
      row.append(el('span', 'tool-call-label', 'tool call'), el('code', 'tool-call-name'), el('code', 'tool-call-args'), el('span', 'tool-call-id'));
      this.rows[delta.index] = row;
      this.element.append(row);
    }
    if (delta.id) call.id = delta.id;
    call.function.name += delta.function?.name ?? '';
    call.function.arguments += delta.function?.arguments ?? '';
    const row = this.rows[delta.index]!;
    row.querySelector('.tool-call-name')!.textContent = call.function.name;
    row.querySelector('.tool-call-args')!.textContent = call.function.arguments;
    row.querySelector('.tool-call-id')!.textContent = call.id;
  }
}

/** A choice's thinking, folded: the summary says whether it is still thinking and how much it wrote. */
class ThinkingView {
  readonly element = el('details', 'thinking');
  private readonly summary = el('summary', 'thinking-summary', 'Thinking…');
  private readonly body = el('div', 'thinking-text');
  text = '';
  private done = false;

  constructor() {
    this.element.dataset.testid = 'thinking';
    this.element.append(this.summary, this.body);
  }

  add(text: string): void {
    this.text += text;
    this.body.textContent = this.text;
    this.summary.textContent = `${this.done ? 'Thought' : 'Thinking…'} (${this.text.length} characters)`;
  }

  /** The answer began, or the reply ended. */
  end(): void {
    if (this.done) return;
    this.done = true;
    this.summary.textContent = `Thought (${this.text.length} characters)`;
  }
}

interface ChoiceParts {
  view: ChoiceView;
  thinking?: ThinkingView;
  logprobs: ChatLogprobsReader;
  tools: ToolCallsView;
  finish?: string;
}

/** The assistant's reply: one part per choice (n > 1 gives several; choice 0 continues the conversation). */
export class AssistantBubble {
  readonly element = el('div', 'msg');
  private readonly role = el('div', 'msg-role', 'assistant');
  private readonly body = el('div', 'msg-choices');
  private readonly choices = new Map<number, ChoiceParts>();

  constructor() {
    this.element.dataset.role = 'assistant';
    this.element.append(this.role, this.body);
  }

  /** Generated tokens seen in logprobs, over every choice. */
  get tokens(): number {
    let count = 0;
    for (const parts of this.choices.values()) count += parts.view.tokens;
    return count;
  }

  reasoning(index: number, text: string): void {
    const parts = this.choice(index);
    if (!parts.thinking) {
      parts.thinking = new ThinkingView();
      parts.view.element.insertBefore(parts.thinking.element, parts.view.element.children[1] ?? null);
    }
    parts.thinking.add(text);
  }

  content(index: number, text: string, logprobs: ChatTokenLogprob[] | null): void {
    const parts = this.choice(index);
    if (text) parts.thinking?.end();
    parts.view.append(text, logprobs ? parts.logprobs.read(logprobs) : null);
  }

  toolCall(index: number, delta: ChatToolCallDelta): void {
    this.choice(index).tools.add(delta);
  }

  finish(index: number, reason: string): void {
    const parts = this.choice(index);
    parts.finish = reason;
    parts.thinking?.end();
    parts.view.finish(reason);
  }

  /** How the reply ended: its choices' finish reasons, or `aborted` / `error`. */
  end(finish: string): void {
    this.element.dataset.finish = finish;
    this.role.textContent = `assistant · ${finish}`;
  }

  /** The reply as the next request's assistant message: choice 0's text and tool calls. */
  message(): ChatMessage {
    const parts = this.choices.get(0);
    const content = parts?.view.textSoFar ?? '';
    const calls = parts?.tools.calls.filter(Boolean) ?? [];
    const thought = parts?.thinking ? { reasoning: parts.thinking.text } : {};
    if (calls.length === 0) return { role: 'assistant', content, ...thought };
    return { role: 'assistant', content: content === '' ? null : content, tool_calls: calls, ...thought };
  }

  private choice(index: number): ChoiceParts {
    let parts = this.choices.get(index);
    if (!parts) {
      parts = { view: new ChoiceView(index, 0), logprobs: new ChatLogprobsReader(), tools: new ToolCallsView() };
      parts.view.element.append(parts.tools.element);
      this.choices.set(index, parts);
      // Choices in index order, whatever order they arrive in.
      const after = [...this.body.children].find((c) => Number((c as HTMLElement).dataset.index) > index);
      this.body.insertBefore(parts.view.element, after ?? null);
    }
    return parts;
  }
}
