// The bounds of one chat template render. A template comes from a model file or a request that
// nobody may have read, and @huggingface/jinja's interpreter runs synchronously: without bounds a
// template could hold the thread for hours (nested loops, a repr of a list that holds itself
// many times over) or exhaust memory ('x' * 10**9, a string doubled in a loop). The interpreter
// (jinja-runtime.ts) counts its steps; the Python helpers (jinja-python.ts), which may do much
// work in one step, count what they write here, and both consult the clock.
import { ChatTemplateError } from './template-error.ts';

/** What one render may do; real templates stay far below (about 10k steps and 50 ms for 300 turns and 50 tools). */
export const RENDER_LIMITS = {
  /** Wall-clock time of a render. */
  milliseconds: 1000,
  /** Expressions, statements and loop passes evaluated. */
  steps: 500_000,
  /** Characters of any string a render makes, its output included. */
  stringLength: 2 * 1024 * 1024,
  /** Items of any list a render makes. */
  listLength: 1_000_000,
  /** Characters and items that repr, tojson and the like go through, all together. */
  work: 32 * 1024 * 1024,
  /** Characters of a template's source (real ones have a few thousand). */
  templateLength: 256 * 1024,
};

/** How much work passes between two looks at the clock. */
const CLOCK_EVERY = 16 * 1024;

interface Budget {
  deadline: number;
  work: number;
  nextClock: number;
}

let active: Budget | null = null;

/** A ChatTemplateError saying which bound stopped the render. */
export function renderStopped(what: string): ChatTemplateError {
  return new ChatTemplateError(`Chat template rendering stopped: ${what} (a template may not do more than a chat prompt needs).`);
}

/** Runs one render (synchronous) under a fresh budget. */
export function withRenderBudget<T>(render: () => T): T {
  const outer = active;
  active = { deadline: performance.now() + RENDER_LIMITS.milliseconds, work: 0, nextClock: CLOCK_EVERY };
  try {
    return render();
  } finally {
    active = outer;
  }
}

/** Throws once the render has run past its time. */
export function checkClock(): void {
  if (active !== null && performance.now() > active.deadline) throw renderStopped(`more than ${RENDER_LIMITS.milliseconds} ms`);
}

/** Counts `units` of work (characters written, items visited) against the render's budget. */
export function spend(units: number): void {
  const budget = active;
  if (budget === null) return;
  budget.work += units;
  if (budget.work > RENDER_LIMITS.work) throw renderStopped(`more than ${RENDER_LIMITS.work} characters of work`);
  if (budget.work >= budget.nextClock) {
    budget.nextClock = budget.work + CLOCK_EVERY;
    checkClock();
  }
}

/** Throws before a string of `length` characters is made, when it would pass the limit. */
export function checkStringLength(length: number): void {
  if (length > RENDER_LIMITS.stringLength) throw renderStopped(`a string of over ${RENDER_LIMITS.stringLength} characters`);
}

/** Throws before a template of too long a source is parsed. */
export function checkTemplateLength(source: string): void {
  if (source.length > RENDER_LIMITS.templateLength) {
    throw new ChatTemplateError(`The chat template is ${source.length} characters long, over the limit of ${RENDER_LIMITS.templateLength}.`);
  }
}
