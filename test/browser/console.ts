// What the demo tests share: running a copied snippet as if pasted into the page's console.
import type { Page } from '@playwright/test';

/** Runs a copied snippet as it is, as if pasted into the page's DevTools console (top-level await, `window`); returns what it logged. */
export async function runInConsole(page: Page, code: string): Promise<string[]> {
  return page.evaluate(async (code) => {
    const lines: string[] = [];
    const AsyncFunction = (async () => {}).constructor as new (...args: string[]) => (...args: unknown[]) => Promise<void>;
    await new AsyncFunction('console', code)({ log: (s: string) => lines.push(s) });
    return lines;
  }, code);
}
