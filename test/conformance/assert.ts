// Assertions for the conformance cases, with no test framework behind them, so that the same
// cases run under Vitest (Node server), Playwright (the page's fetch shim) or anything else.

export class ConformanceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConformanceError';
  }
}

function show(value: unknown): string {
  try {
    const text = JSON.stringify(value, (_k, v) => (v instanceof Map ? Object.fromEntries(v) : v));
    return text === undefined ? String(value) : text.length > 600 ? text.slice(0, 600) + '…' : text;
  } catch {
    return String(value);
  }
}

export function fail(message: string): never {
  throw new ConformanceError(message);
}

export function ok(condition: unknown, message: string): asserts condition {
  if (!condition) fail(message);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  if (!deepEqual(ka, kb)) return false;
  return ka.every((k) => deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

export function eq<T>(actual: T, expected: T, message: string): void {
  if (!deepEqual(actual, expected)) fail(`${message}: expected ${show(expected)}, got ${show(actual)}`);
}

export function notEq<T>(actual: T, unexpected: T, message: string): void {
  if (deepEqual(actual, unexpected)) fail(`${message}: expected something other than ${show(unexpected)}`);
}

export function close(actual: number | null | undefined, expected: number | null | undefined, tolerance: number, message: string): void {
  if (typeof actual !== 'number' || typeof expected !== 'number' || !(Math.abs(actual - expected) <= tolerance)) {
    fail(`${message}: expected ${show(expected)} ± ${tolerance}, got ${show(actual)}`);
  }
}

export function match(actual: string, pattern: RegExp, message: string): void {
  if (typeof actual !== 'string' || !pattern.test(actual)) fail(`${message}: expected ${show(actual)} to match ${pattern}`);
}

export function keys(object: unknown, expected: string[], message: string): void {
  ok(typeof object === 'object' && object !== null, `${message}: not an object: ${show(object)}`);
  eq(Object.keys(object).sort(), [...expected].sort(), `${message} (keys)`);
}
