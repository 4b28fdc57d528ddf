// The Chat view: a conversation with the loaded model through POST /v1/chat/completions, as any
// OpenAI client has one. Each turn sends the whole history (the system prompt first), streams the
// reply into an assistant bubble, and keeps it for the next turn. The modules beside this one do
// the parts: the bubbles (chat-bubbles.ts), the request body (chat-request.ts), the request
// itself (chat-run.ts), the rendered prompt (chat-prompt.ts). The model is the page's (main.ts).
import { CHAT_PARAMS } from '../src/api/chat-schema.ts';
import type { ChatCompletionChunk } from '../src/index.ts';
import { AssistantBubble, messageBubble } from './chat-bubbles.ts';
import { renderPrompt } from './chat-prompt.ts';
import { CHATML_TEMPLATE, chatBody, parseTools, pendingToolCalls, TOOLS_EXAMPLE } from './chat-request.ts';
import { runChat, type ChatMessage } from './chat-run.ts';
import { ApiRequestError, LiveStats } from './completion-run.ts';
import { errorMessage } from './format.ts';
import { ParamsPanel, STRUCTURED_PARAMS, type ParamTable } from './params-panel.ts';
import { StructuredPanel } from './structured-panel.ts';
import { chatOpenaiSnippet, copyText, curlSnippet } from './snippets.ts';
import type { AlternativesPopover } from './token-view.ts';

/** How many of a stream's chunks the response panel keeps. */
const LAST_CHUNKS = 3;
/** The role select's value for a plain user message (the others are tool call ids). */
const AS_USER = '';

/** What the Chat view needs of the page. */
export interface ChatHost {
  popover: AlternativesPopover;
  /** Phone width: parameter groups start closed. */
  narrow: boolean;
  setState(state: 'ready' | 'generating', status: string): void;
  /** Whether the Completions view has a request running (the page runs one at a time). */
  completionRunning(): boolean;
}

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

export class ChatView {
  private readonly log = $('chat-log');
  private readonly form = $<HTMLFormElement>('chat-form');
  private readonly input = $<HTMLTextAreaElement>('chat-input');
  private readonly role = $<HTMLSelectElement>('chat-role');
  private readonly send = $<HTMLButtonElement>('chat-send');
  private readonly system = $<HTMLTextAreaElement>('chat-system');
  private readonly template = $<HTMLTextAreaElement>('chat-template');
  private readonly tools = $<HTMLTextAreaElement>('chat-tools');
  private readonly toolsError = $('chat-tools-error');
  private readonly errorBox = $('chat-error');
  private readonly stats = $('chat-stats');
  private readonly showPrompt = $<HTMLInputElement>('chat-show-prompt');
  private readonly params: ParamsPanel;
  private readonly structured: StructuredPanel;

  private history: ChatMessage[] = [];
  private modelId = '';
  private ready = false;
  private running: AbortController | undefined;
  private turn: Promise<void> | undefined;
  /** The body of the last turn sent, shown (and copied) until a new message is typed. */
  private lastSent: Record<string, unknown> | undefined;
  private promptRequest: AbortController | undefined;
  private promptTimer = 0;
  /** The click that submits, as its click count: 2 for the second click of a double click. */
  private submitClicks = 0;

  constructor(private readonly host: ChatHost) {
    this.template.value = CHATML_TEMPLATE;
    this.tools.placeholder = TOOLS_EXAMPLE;
    this.params = new ParamsPanel($('chat-params'), {
      table: CHAT_PARAMS as unknown as ParamTable,
      idPrefix: 'chat-param-',
      collapsed: host.narrow,
      // Set in their own fields, or by the conversation itself.
      omit: ['messages', 'tools', 'chat_template', ...STRUCTURED_PARAMS],
      start: { max_tokens: '', max_completion_tokens: '64', logprobs: true, top_logprobs: '5' },
    });
    this.structured = new StructuredPanel($('chat-params'), 'chat', { idPrefix: 'chat-structured-', collapsed: true });
    host.popover.watch(this.log);
    this.wire();
    this.updateRequestView();
  }

  /** Whether a reply is streaming. */
  get generating(): boolean {
    return this.running !== undefined;
  }

  /** The page's model is ready (or another one is): later turns name it. */
  modelReady(id: string): void {
    this.modelId = id;
    this.ready = true;
    this.send.disabled = false;
    this.updateRequestView();
  }

  /** A model is loading: nothing can be sent until it is ready. */
  modelLoading(): void {
    this.ready = false;
    if (!this.running) this.send.disabled = true;
  }

  /** Stops the reply in flight, if any, and waits until it has ended. */
  async stop(): Promise<void> {
    this.running?.abort();
    await this.turn;
  }

  private wire(): void {
    this.send.addEventListener('click', (event) => (this.submitClicks = event.detail));
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      const clicks = this.submitClicks;
      this.submitClicks = 0;
      if (this.send.disabled || clicks > 1) return; // the second click of a double click does nothing
      if (this.running) {
        this.running.abort();
        return;
      }
      this.turn = this.sendTurn();
    });
    this.input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing && !event.repeat) {
        event.preventDefault();
        this.form.requestSubmit();
      }
    });
    $('chat-reset').addEventListener('click', () => void this.reset());
    this.tools.addEventListener('input', () => this.checkTools());
    $<HTMLInputElement>('chat-tint').addEventListener('change', (event) => {
      const on = (event.target as HTMLInputElement).checked;
      this.log.classList.toggle('tinted', on);
      // Tinting needs logprobs: turning it on asks for them, with 5 alternatives.
      const logprobs = this.params.control('logprobs') as HTMLInputElement | undefined;
      const top = this.params.control('top_logprobs');
      if (on && logprobs && !logprobs.checked) {
        logprobs.checked = true;
        if (top && top.value === '') top.value = '5';
        this.updateRequestView();
      }
    });
    this.showPrompt.addEventListener('change', () => {
      $('chat-prompt-box').hidden = !this.showPrompt.checked;
      this.refreshPrompt();
    });
    for (const source of [$('chat-params'), this.input, this.system, this.template, this.tools, this.role]) {
      for (const type of ['input', 'change']) {
        source.addEventListener(type, () => {
          if (source !== this.input) this.lastSent = undefined; // the settings changed: show the next request
          this.updateRequestView();
          this.schedulePromptRefresh();
        });
      }
    }
    for (const [id, snippet] of [
      ['chat-copy-curl', (body: Record<string, unknown>) => curlSnippet(body, '/v1/chat/completions')],
      ['chat-copy-openai', chatOpenaiSnippet],
    ] as const) {
      $(id).addEventListener('click', async () => {
        try {
          await copyText(snippet(this.shownRequest()));
          $('chat-copy-status').textContent = 'Copied.';
        } catch (error) {
          $('chat-copy-status').textContent = errorMessage(error);
        }
      });
    }
  }

  // ---- the request ------------------------------------------------------------------------------

  /** The message the composer holds, as the next turn sends it (null when empty). */
  private draft(): ChatMessage | null {
    if (this.input.value.trim() === '') return null;
    const callId = this.role.value;
    return callId === AS_USER ? { role: 'user', content: this.input.value } : { role: 'tool', content: this.input.value, tool_call_id: callId };
  }

  private body(messages: readonly ChatMessage[]): Record<string, unknown> {
    const settings = { model: this.modelId, system: this.system.value, template: this.template.value, tools: this.tools.value, params: () => ({ ...this.params.read(), ...this.structured.read() }) };
    const body = chatBody(settings, messages);
    // The panel's logprobs count of alternatives goes only with logprobs (the API refuses it alone).
    if (!body.logprobs) delete body.top_logprobs;
    return body;
  }

  /** The request on screen: the next turn's (with the typed message), else the last one sent. */
  private shownRequest(): Record<string, unknown> {
    const draft = this.draft();
    if (!draft && this.lastSent) return this.lastSent;
    return this.body(draft ? [...this.history, draft] : this.history);
  }

  private updateRequestView(): void {
    const note = !this.draft() && this.lastSent ? '(last sent)' : '(the next turn: Send sends this)';
    $('chat-request-note').textContent = note;
    try {
      const body = this.shownRequest();
      $('chat-request-json').textContent = JSON.stringify(body, null, 2);
      $('chat-curl-snippet').textContent = curlSnippet(body, '/v1/chat/completions');
      $('chat-openai-snippet').textContent = chatOpenaiSnippet(body);
    } catch (error) {
      $('chat-request-json').textContent = errorMessage(error);
    }
  }

  /** Shows what is wrong with the tools field as it is typed; true when it is fine. */
  private checkTools(): boolean {
    try {
      parseTools(this.tools.value);
      this.toolsError.hidden = true;
      this.toolsError.textContent = '';
      return true;
    } catch (error) {
      this.toolsError.hidden = false;
      this.toolsError.textContent = errorMessage(error);
      return false;
    }
  }

  // ---- a turn -------------------------------------------------------------------------------------

  private showError(error: unknown): void {
    let text = errorMessage(error);
    if (error instanceof ApiRequestError && error.body?.error.code === 'chat_template_missing') {
      text +=
        '\n\nThis model has no chat template of its own, so it needs one from you: write one in the Chat template field ' +
        '(the ChatML template it starts with works), or load a chat model.';
    }
    this.errorBox.textContent = text;
    this.errorBox.hidden = false;
    this.errorBox.scrollIntoView({ block: 'nearest' });
  }

  private clearError(): void {
    this.errorBox.hidden = true;
    this.errorBox.textContent = '';
  }

  private async sendTurn(): Promise<void> {
    this.clearError();
    this.host.popover.hide();
    const message = this.draft();
    if (!message) {
      this.showError(new Error('Write a message first.'));
      return;
    }
    if (this.host.completionRunning()) {
      this.showError(new Error('A completion is running in the Completions view: stop it first (the page runs one request at a time).'));
      return;
    }
    let body: Record<string, unknown>;
    try {
      if (!this.checkTools()) parseTools(this.tools.value);
      body = this.body([...this.history, message]);
    } catch (error) {
      this.showError(error);
      return;
    }
    const text = this.input.value;
    this.history.push(message);
    const userBubble = messageBubble(message);
    const bubble = new AssistantBubble();
    this.log.querySelector('.chat-empty')?.remove();
    this.log.append(userBubble, bubble.element);
    delete this.log.dataset.finish;
    this.input.value = '';
    this.lastSent = body;
    this.updateRequestView();
    this.updateRole();
    $('chat-response-json').textContent = '';
    $('chat-response-note').textContent = '';
    this.running = new AbortController();
    this.send.textContent = 'Stop';
    this.host.setState('generating', 'Replying…');
    bubble.element.scrollIntoView({ block: 'nearest' });

    const live = new LiveStats();
    const lastChunks: ChatCompletionChunk[] = [];
    let chunkCount = 0;
    const finishes: string[] = [];
    this.stats.textContent = live.describe();
    const showChunks = (note: string) => {
      $('chat-response-json').textContent = JSON.stringify(lastChunks, null, 2);
      $('chat-response-note').textContent = `(${note}the last ${lastChunks.length} of ${chunkCount} chunks)`;
    };
    try {
      const result = await runChat(body, this.running.signal, {
        content: (index, piece, logprobs) => {
          const before = bubble.tokens;
          bubble.content(index, piece, logprobs);
          live.add(logprobs ? bubble.tokens - before : piece ? 1 : 0);
          if (body.stream) this.stats.textContent = live.describe();
        },
        toolCall: (index, delta) => bubble.toolCall(index, delta),
        reasoning: (index, piece) => {
          bubble.reasoning(index, piece);
          live.add(1);
          if (body.stream) this.stats.textContent = live.describe();
        },
        finish: (index, reason) => {
          bubble.finish(index, reason);
          finishes.push(reason);
        },
        chunk: (chunk) => {
          chunkCount++;
          lastChunks.push(chunk);
          if (lastChunks.length > LAST_CHUNKS) lastChunks.shift();
        },
      });
      if (result.usage) live.setUsage(result.usage);
      if (result.response) {
        $('chat-response-json').textContent = JSON.stringify(result.response, null, 2);
        $('chat-response-note').textContent = '(the whole response)';
        this.stats.textContent = `${live.tokens} tokens in ${live.elapsedSeconds.toFixed(2)} s, not streamed (no time to first token)`;
      } else {
        showChunks('');
        this.stats.textContent = live.describe();
      }
      const finish = finishes.length === 1 ? finishes[0]! : finishes.join(', ') || 'done';
      bubble.end(finish);
      this.history.push(bubble.message());
      this.log.dataset.finish = finish;
      this.host.setState('ready', `Done (${finish}): ${live.tokens} tokens in ${live.elapsedSeconds.toFixed(2)} s.`);
    } catch (error) {
      if ((error as Error).name === 'AbortError') {
        // What streamed before Stop stays: the next turn continues from it, as the page shows it.
        const reply = bubble.message();
        if (reply.content || reply.tool_calls) {
          bubble.end('aborted');
          this.history.push(reply);
        } else {
          bubble.element.remove();
        }
        showChunks('stopped: ');
        this.log.dataset.finish = 'aborted';
        this.host.setState('ready', 'Stopped.');
      } else {
        // The turn did not happen: its message goes back to the composer, to send again once fixed.
        bubble.element.remove();
        userBubble.remove();
        this.history.pop();
        this.input.value = text;
        if (error instanceof ApiRequestError && error.body) $('chat-response-json').textContent = JSON.stringify(error.body, null, 2);
        $('chat-response-note').textContent = !(error instanceof ApiRequestError) ? '(failed)' : error.inStream ? '(error event in the stream)' : `(HTTP ${error.status})`;
        this.log.dataset.finish = 'error';
        this.host.setState('ready', 'The request failed.');
        this.showError(error);
      }
    } finally {
      this.running = undefined;
      this.send.textContent = 'Send';
      this.send.disabled = !this.ready;
      this.updateRole();
      this.updateRequestView();
      this.refreshPrompt();
    }
  }

  /** Offers "tool result" as the next message's role while the last reply's tool calls are unanswered. */
  private updateRole(): void {
    const pending = pendingToolCalls(this.history);
    const options = pending.map(({ id, name }) => new Option(`tool result: ${name} (${id})`, id));
    this.role.replaceChildren(new Option('user', AS_USER), ...options);
    if (pending.length > 0) this.role.value = pending[0]!.id;
    this.role.hidden = pending.length === 0;
  }

  private async reset(): Promise<void> {
    await this.stop();
    this.history = [];
    this.lastSent = undefined;
    this.log.replaceChildren(Object.assign(document.createElement('p'), { className: 'hint chat-empty', textContent: 'The conversation starts with your first message.' }));
    delete this.log.dataset.finish;
    this.stats.textContent = '';
    $('chat-response-json').textContent = '';
    $('chat-response-note').textContent = '';
    this.clearError();
    this.updateRole();
    this.updateRequestView();
    this.refreshPrompt();
  }

  // ---- the rendered prompt ------------------------------------------------------------------------

  private schedulePromptRefresh(): void {
    if (!this.showPrompt.checked) return;
    clearTimeout(this.promptTimer);
    this.promptTimer = window.setTimeout(() => this.refreshPrompt(), 300);
  }

  /** Renders the next turn's prompt (the history, and the typed message) through the API. */
  private refreshPrompt(): void {
    if (!this.showPrompt.checked) return;
    this.promptRequest?.abort();
    const request = (this.promptRequest = new AbortController());
    const view = $('chat-prompt');
    const note = $('chat-prompt-note');
    const draft = this.draft();
    const messages = draft ? [...this.history, draft] : this.history;
    if (messages.length === 0) {
      view.textContent = '';
      note.textContent = '(nothing to render yet: the conversation is empty)';
      return;
    }
    let body: Record<string, unknown>;
    try {
      body = this.body(messages);
    } catch (error) {
      note.textContent = `(${errorMessage(error)})`;
      return;
    }
    note.textContent = '(rendering…)';
    renderPrompt(body, request.signal).then(
      ({ prompt, count, maxModelLen }) => {
        if (request !== this.promptRequest) return;
        view.textContent = prompt;
        note.textContent = `(${count} tokens of ${maxModelLen}${draft ? ', with the typed message' : ''})`;
      },
      (error) => {
        if (request !== this.promptRequest || (error as Error).name === 'AbortError') return;
        view.textContent = '';
        note.textContent = `(${errorMessage(error)})`;
      },
    );
  }
}
