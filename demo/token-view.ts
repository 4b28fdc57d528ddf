// The output of one choice, token by token: with logprobs, each token is a span tinted by its
// probability, and hovering, focusing or tapping it shows its top alternatives.
//
// Rendering follows the API's offsets rather than assuming that a chunk's text is its tokens'
// text: a token's entry comes with the chunk that completes its text, so text may arrive before
// its entry (held back by a stop string, or a character split over byte tokens). Text not yet
// covered by an entry stays in a plain "tail" node until its entry comes. Entries of a stop string
// cut from the text have offsets past its end: they are shown struck through, as "not in text".
import type { CompletionLogprobs } from '../src/index.ts';
import { visibleToken } from './format.ts';

/** What the popover shows for one token. */
interface TokenInfo {
  token: string;
  logprob: number | null;
  top: Record<string, number> | null;
  cut: boolean;
}

const tokenInfo = new WeakMap<HTMLElement, TokenInfo>();

/** The logprobs the API reports for a token that has none (-Infinity in JSON terms). */
const NO_PROBABILITY = -9999;

function probability(logprob: number): number {
  return logprob <= NO_PROBABILITY ? 0 : Math.exp(logprob);
}

function percent(p: number): string {
  if (p >= 0.9995) return '100%';
  if (p >= 0.001) return `${(p * 100).toFixed(1)}%`;
  return p > 0 ? `${(p * 100).toExponential(1)}%` : '0%';
}

/** One choice's text as it streams in. */
export class ChoiceView {
  readonly element: HTMLElement;
  private readonly body: HTMLElement;
  private readonly tail = document.createTextNode('');
  private readonly head: HTMLElement;
  private text = '';
  /** Characters of `text` rendered before the tail. */
  private covered = 0;
  /** Generated tokens seen in logprobs (echoed prompt tokens excluded). */
  tokens = 0;

  /**
   * `promptLength`: characters of echoed prompt at the start of the text (echo), 0 otherwise.
   * `context`: the prompt, shown dimmed before the completion when it is not echoed.
   */
  constructor(
    readonly index: number,
    private readonly promptLength: number,
    context = '',
  ) {
    this.head = Object.assign(document.createElement('div'), { className: 'choice-head', textContent: `choice ${index}` });
    this.body = Object.assign(document.createElement('span'), { className: 'choice-text' });
    this.body.append(this.tail);
    const text = Object.assign(document.createElement('div'), { className: 'choice-body' });
    if (context) text.append(Object.assign(document.createElement('span'), { className: 'prompt-text', textContent: context }));
    text.append(this.body);
    this.element = document.createElement('div');
    this.element.className = 'choice';
    this.element.dataset.index = String(index);
    this.element.append(this.head, text);
  }

  /** The text received so far. */
  get textSoFar(): string {
    return this.text;
  }

  /** Adds a chunk's text and its tokens' logprobs (null without logprobs). */
  append(text: string, logprobs: CompletionLogprobs | null): void {
    this.text += text;
    if (logprobs) {
      logprobs.tokens.forEach((token, i) => {
        this.addToken(token, logprobs.text_offset[i]!, logprobs.token_logprobs[i] ?? null, logprobs.top_logprobs[i] ?? null);
      });
    }
    this.tail.data = this.text.slice(this.covered);
  }

  finish(reason: string): void {
    this.element.dataset.finish = reason;
    this.head.textContent = `choice ${this.index} · finish_reason: ${reason}`;
  }

  private addToken(token: string, offset: number, logprob: number | null, top: Record<string, number> | null): void {
    const echoed = logprob === null || offset < this.promptLength;
    if (!echoed) this.tokens++;
    if (token === '') return; // a byte of a character that a later token completes, or a skipped special token
    if (offset > this.covered) this.insert(document.createTextNode(this.text.slice(this.covered, offset)));
    const cut = offset >= this.text.length;
    const span = document.createElement('span');
    span.className = echoed ? 'tok prompt-tok' : 'tok';
    span.textContent = token;
    span.tabIndex = 0;
    if (cut) span.classList.add('cut');
    if (logprob !== null) span.style.setProperty('--p', probability(logprob).toFixed(3));
    tokenInfo.set(span, { token, logprob, top, cut });
    this.insert(span);
    this.covered = Math.max(this.covered, Math.min(offset + token.length, this.text.length));
  }

  private insert(node: Node): void {
    this.body.insertBefore(node, this.tail);
  }
}

const tokenOf = (target: EventTarget | null) => (target instanceof HTMLElement ? target.closest<HTMLElement>('.tok') : null);

/**
 * The popover of token alternatives, one per page, shared by every token under the roots it
 * watches (the completion output, the chat's conversation): shown on hover, keyboard focus and
 * tap (click), hidden on leave, blur, Escape or a tap elsewhere.
 */
export class AlternativesPopover {
  readonly element: HTMLElement;
  private current: HTMLElement | null = null;

  constructor(root: HTMLElement) {
    this.element = Object.assign(document.createElement('div'), { className: 'popover', hidden: true, id: 'token-popover' });
    this.element.setAttribute('role', 'tooltip');
    this.element.dataset.testid = 'token-popover';
    document.body.append(this.element);
    this.watch(root);
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') this.hide();
    });
    document.addEventListener('pointerdown', (e) => {
      if (!tokenOf(e.target) && !this.element.contains(e.target as Node)) this.hide();
    });
  }

  /** Shows the alternatives of the tokens under `root` too. */
  watch(root: HTMLElement): void {
    root.addEventListener('pointerover', (e) => {
      const tok = tokenOf(e.target);
      if (tok) this.show(tok);
    });
    root.addEventListener('pointerout', (e) => {
      if (tokenOf(e.target) && !tokenOf(e.relatedTarget) && document.activeElement !== this.current) this.hide();
    });
    root.addEventListener('focusin', (e) => {
      const tok = tokenOf(e.target);
      if (tok) this.show(tok);
    });
    root.addEventListener('focusout', () => this.hide());
    root.addEventListener('click', (e) => {
      const tok = tokenOf(e.target);
      if (tok) this.show(tok);
    });
  }

  show(tok: HTMLElement): void {
    const info = tokenInfo.get(tok);
    if (!info) return;
    this.current?.classList.remove('active');
    this.current = tok;
    tok.classList.add('active');
    this.element.replaceChildren(...this.describe(info));
    this.element.hidden = false;
    this.place(tok);
  }

  hide(): void {
    this.current?.classList.remove('active');
    this.current = null;
    this.element.hidden = true;
  }

  private describe(info: TokenInfo): Node[] {
    const title = document.createElement('div');
    title.className = 'popover-title';
    const chosen = info.logprob === null ? 'first prompt token: no probability' : `p ${percent(probability(info.logprob))} · logprob ${info.logprob.toFixed(3)}`;
    title.append(Object.assign(document.createElement('code'), { textContent: visibleToken(info.token) }), ` ${chosen}`);
    const nodes: Node[] = [title];
    if (info.cut) nodes.push(Object.assign(document.createElement('div'), { className: 'hint', textContent: 'Generated, then cut from the text by a stop string.' }));
    if (!info.top) return nodes;
    const table = document.createElement('table');
    table.className = 'alternatives';
    const alternatives = Object.entries(info.top).sort((a, b) => b[1] - a[1]);
    for (const [text, logprob] of alternatives) {
      const p = probability(logprob);
      const row = table.insertRow();
      if (text === info.token) row.className = 'chosen';
      row.insertCell().append(Object.assign(document.createElement('code'), { textContent: visibleToken(text) }));
      const bar = Object.assign(document.createElement('span'), { className: 'bar' });
      bar.style.setProperty('--p', p.toFixed(3));
      row.insertCell().append(bar);
      row.insertCell().textContent = percent(p);
    }
    nodes.push(table);
    return nodes;
  }

  /** Below the token (above it when there is no room), kept inside the viewport. */
  private place(tok: HTMLElement): void {
    const box = tok.getBoundingClientRect();
    const pop = this.element;
    const width = pop.offsetWidth;
    const height = pop.offsetHeight;
    const margin = 8;
    const left = Math.max(margin, Math.min(box.left, innerWidth - width - margin));
    const below = box.bottom + 6;
    const top = below + height > innerHeight - margin && box.top - height - 6 > margin ? box.top - height - 6 : below;
    pop.style.left = `${left + scrollX}px`;
    pop.style.top = `${top + scrollY}px`;
  }
}
