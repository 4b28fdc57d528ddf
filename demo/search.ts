// The Search view: passages (one per line) and a query go to fetch('/v1/embeddings') in one
// request, as any client sends it; the passages come back ranked by the cosine similarity of
// their vectors to the query's. The page's fetch shim answers it.
import type { EmbeddingResponse } from '../src/index.ts';
import { postApi } from './completion-run.ts';
import { errorMessage } from './format.ts';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

/** The cosine of the angle between two vectors (0 when either is all zeros). */
export function cosine(a: readonly number[], b: readonly number[]): number {
  let dot = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    aa += a[i]! * a[i]!;
    bb += b[i]! * b[i]!;
  }
  return aa > 0 && bb > 0 ? dot / Math.sqrt(aa * bb) : 0;
}

/** The passages of the text field: its non-blank lines, trimmed. */
export function passagesOf(text: string): string[] {
  return text.split('\n').map((line) => line.trim()).filter((line) => line !== '');
}

export class SearchView {
  private readonly form = $<HTMLFormElement>('search-form');
  private readonly passages = $<HTMLTextAreaElement>('search-passages');
  private readonly query = $<HTMLInputElement>('search-query');
  private readonly button = $<HTMLButtonElement>('search-run');
  private readonly results = $<HTMLOListElement>('search-results');
  private readonly stats = $('search-stats');
  private readonly errorBox = $('search-error');
  private modelId = '';
  private ready = false;
  private running: AbortController | undefined;

  constructor() {
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      void this.search();
    });
  }

  /** The model is ready: searches may run. */
  modelReady(id: string): void {
    this.modelId = id;
    this.ready = true;
    this.button.disabled = false;
  }

  /** A model is loading: nothing can be searched until it is ready. */
  modelLoading(): void {
    this.ready = false;
    this.button.disabled = true;
  }

  /** Stops the search in flight, if any. */
  stop(): void {
    this.running?.abort();
  }

  private async search(): Promise<void> {
    if (!this.ready || this.running) return;
    const passages = passagesOf(this.passages.value);
    const query = this.query.value.trim();
    this.errorBox.hidden = true;
    if (passages.length === 0 || query === '') {
      this.showError('Give a query and at least one passage (one per line).');
      return;
    }
    const controller = new AbortController();
    this.running = controller;
    this.button.disabled = true;
    this.stats.textContent = 'Embedding…';
    const started = performance.now();
    try {
      const body = { model: this.modelId, input: [query, ...passages], encoding_format: 'float' };
      const response = (await (await postApi('/v1/embeddings', body, controller.signal)).json()) as EmbeddingResponse;
      const vectors = response.data.map((d) => d.embedding as number[]);
      const ranked = passages.map((text, i) => ({ text, score: cosine(vectors[0]!, vectors[i + 1]!) })).sort((a, b) => b.score - a.score);
      this.render(ranked);
      const seconds = (performance.now() - started) / 1000;
      this.stats.textContent = `${passages.length + 1} inputs, ${response.usage.prompt_tokens} tokens, ${vectors[0]!.length} dimensions, ${seconds.toFixed(2)} s`;
    } catch (error) {
      this.stats.textContent = '';
      if (!controller.signal.aborted) this.showError(errorMessage(error));
    } finally {
      this.running = undefined;
      this.button.disabled = !this.ready;
    }
  }

  private render(ranked: { text: string; score: number }[]): void {
    this.results.replaceChildren(
      ...ranked.map(({ text, score }) => {
        const item = document.createElement('li');
        const value = document.createElement('span');
        value.className = 'score';
        value.textContent = score.toFixed(3);
        const passage = document.createElement('span');
        passage.className = 'passage';
        passage.textContent = text;
        item.append(value, passage);
        return item;
      }),
    );
  }

  private showError(message: string): void {
    this.errorBox.textContent = message;
    this.errorBox.hidden = false;
  }
}
