// The XGrammar wasm module (@mlc-ai/web-xgrammar), loaded by a dynamic import the first time a
// request asks for structure, so the base bundle does not carry its 1 MB. One adapter for the page,
// Web Workers, Service Workers and Node:
// - The package is a UMD bundle published as an ES module: run as one (Node, a page without a
//   bundler) it assigns `globalThis.xgrammar` and exports nothing; a bundler that reads it as
//   CommonJS (rolldown: it tests `exports`) gives its API as the module's default export instead.
// - Where neither `document` nor `location` exists (Node) it evaluates
//   `require('url').pathToFileURL(__filename)`, at import and again when its wasm starts (the first
//   API call); both globals exist here only for those two moments.
// - It reports a failed check as `[FATAL] <C++ file>:<line>: <message>` through emscripten's `err`
//   (console.error, bound when the wasm starts), warnings as `[WARNING] ...` through `out`
//   (console.log), and then aborts: a RuntimeError, or a C++ exception thrown as a bare number.
//   The module keeps working after those (measured). Forwarders installed while the wasm starts
//   catch the lines during `run` and pass every other line on to the console.
// - A RuntimeError without a FATAL line is a wasm trap (a stack overflow reads as "memory access out
//   of bounds"): the module's memory may be corrupt, so it is not used again (`broken`). The limits
//   of limits.ts keep inputs far from the measured overflows.
// Browser code: no Node imports; Node's modules come from `process.getBuiltinModule`.
import type * as XGrammarPackage from '@mlc-ai/web-xgrammar';

export type XGrammarApi = typeof XGrammarPackage;

/** A call into XGrammar that failed: what it printed, without the C++ file names. */
export class XGrammarCallError extends Error {
  override name = 'XGrammarCallError';
  constructor(
    /** The FATAL message (its file and line removed); '' when XGrammar printed none. */
    readonly fatal: string,
    /** What was thrown: the abort's RuntimeError, a number for a C++ exception, or a JS error. */
    override readonly cause: unknown,
  ) {
    super(fatal || (cause instanceof Error ? cause.message : `XGrammar failed (${String(cause)})`));
  }

  /** A trap rather than a checked failure: the module is not used again. */
  get trapped(): boolean {
    return this.fatal === '' && this.cause instanceof WebAssembly.RuntimeError;
  }
}

/** The loaded module: its API, and `run` for calls that may abort or warn. */
export interface XGrammar {
  readonly api: XGrammarApi;
  /**
   * Runs `call` after every earlier `run` has settled (one wasm call at a time, so each one's
   * messages are its own). Resolves with its value and the warnings it printed (file names
   * removed); rejects with XGrammarCallError when it aborts or throws.
   */
  run<T>(call: (api: XGrammarApi) => T | Promise<T>): Promise<{ value: T; warnings: string[] }>;
}

let loading: Promise<XGrammar> | undefined;

/** The package's module, imported statically (preload.ts, for a service worker): no import() to run. */
let imported: unknown;

/** Hands over the package's module, imported statically. */
export function provideXGrammarPackage(module: unknown): void {
  imported = module;
}

/** The API in a module namespace (its default export, or itself), else in the global the package sets. */
function apiOf(module: unknown): XGrammarApi | undefined {
  const isApi = (value: unknown): value is XGrammarApi =>
    typeof (value as Partial<XGrammarApi> | undefined)?.GrammarCompiler?.createGrammarCompiler === 'function';
  const namespace = module as { default?: unknown } | undefined;
  if (isApi(namespace?.default)) return namespace.default;
  if (isApi(namespace)) return namespace;
  const global = (globalThis as { xgrammar?: unknown }).xgrammar;
  return isApi(global) ? global : undefined;
}

/** Set by the first trap: every later `run` rejects with it. */
let broken: Error | undefined;

/** Throws once the module has trapped: its memory may be corrupt, so live matchers stop too. */
export function checkNotBroken(): void {
  if (broken) throw broken;
}

/** The XGrammar module, loaded and started on the first call (later calls share it). */
export function loadXGrammar(): Promise<XGrammar> {
  loading ??= load().catch((error: unknown) => {
    loading = undefined; // a later request may try again
    throw error;
  });
  return loading;
}

/** Lines XGrammar printed during the `run` in progress; undefined outside one. */
let recording: string[] | undefined;

/** Stand-ins for console.error and console.log that emscripten binds when the wasm starts. */
function forwarder(level: 'error' | 'log'): (...args: unknown[]) => void {
  return (...args: unknown[]) => {
    if (recording) recording.push(args.map(String).join(' '));
    else console[level](...args); // the console's method now, after the loader put it back
  };
}

async function load(): Promise<XGrammar> {
  const restoreGlobals = provideNodeGlobals();
  const g = globalThis as { xgrammar?: unknown };
  const before = g.xgrammar;
  const { error: consoleError, log: consoleLog } = console;
  try {
    const api = apiOf(imported ?? (await import('@mlc-ai/web-xgrammar')));
    // Another copy of the package set the global first: it keeps it.
    if (before !== undefined) g.xgrammar = before;
    if (!api) throw new Error('@mlc-ai/web-xgrammar gave no API (neither exports nor globalThis.xgrammar)');
    // The first API call starts the wasm, which binds `err` and `out` to these stand-ins.
    console.error = forwarder('error');
    console.log = forwarder('log');
    const empty = await api.TokenizerInfo.createTokenizerInfo([], 'raw', false, 0, []);
    empty.dispose();
    return { api, run: (call) => enqueue(() => recorded(api, call)) };
  } finally {
    console.error = consoleError;
    console.log = consoleLog;
    restoreGlobals();
  }
}

let queue: Promise<unknown> = Promise.resolve();

/** Runs `task` after every task enqueued before it has settled. */
function enqueue<T>(task: () => Promise<T>): Promise<T> {
  const result = queue.then(task);
  queue = result.catch(() => undefined);
  return result;
}

async function recorded<T>(api: XGrammarApi, call: (api: XGrammarApi) => T | Promise<T>): Promise<{ value: T; warnings: string[] }> {
  if (broken) throw broken;
  const lines: string[] = [];
  recording = lines;
  try {
    const value = await call(api);
    return { value, warnings: messagesOf(lines, 'WARNING') };
  } catch (error) {
    const failure = new XGrammarCallError(messagesOf(lines, 'FATAL').join('\n'), error);
    if (failure.trapped) {
      broken = new Error(`XGrammar's wasm module trapped (${failure.message}) and is not used again; reload to use structured output`);
      throw broken;
    }
    throw failure;
  } finally {
    recording = undefined;
  }
}

/**
 * The messages of one level among XGrammar's lines, without their `[LEVEL] file:line: ` prefix;
 * a message runs on over the lines that follow it until the next `[...]` line or `Aborted(...)`.
 */
export function messagesOf(lines: readonly string[], level: 'FATAL' | 'WARNING'): string[] {
  const messages: string[] = [];
  let current: string[] | undefined;
  for (const line of lines) {
    const head = /^\[([A-Z]+)\] (?:.*?:\d+: )?([\s\S]*)$/.exec(line);
    if (head || /^Aborted\(/.test(line)) {
      if (current) messages.push(current.join('\n'));
      current = head && head[1] === level ? [head[2]!] : undefined;
    } else current?.push(line);
  }
  if (current) messages.push(current.join('\n'));
  return messages.map((m) => m.trimEnd());
}

/**
 * In Node (no `document`, no `location`), `require` and `__filename` as globals for the package,
 * where none exist; returns what puts the globals back as they were.
 */
export function provideNodeGlobals(): () => void {
  if (typeof document !== 'undefined' || typeof location !== 'undefined') return () => undefined;
  const g = globalThis as { require?: unknown; __filename?: unknown; process?: { getBuiltinModule?: (id: string) => unknown } };
  if (typeof g.process?.getBuiltinModule !== 'function') {
    throw new Error('structured output needs process.getBuiltinModule in this runtime (Node 20.16 or later) to load XGrammar');
  }
  const { createRequire } = g.process.getBuiltinModule('module') as { createRequire(from: string): (id: string) => unknown };
  const requireNode = createRequire(import.meta.url); // not named `require`: bundles are checked for that call
  const added: ('require' | '__filename')[] = [];
  if (g.require === undefined) {
    g.require = requireNode;
    added.push('require');
  }
  if (g.__filename === undefined) {
    // Only the package's own directory is read from it; its wasm is inline.
    const { fileURLToPath } = requireNode('url') as { fileURLToPath(url: string): string };
    let path = '/';
    try {
      path = fileURLToPath(import.meta.url);
    } catch {
      // not a file: URL (a bundle served over http into Node): the root will do
    }
    g.__filename = path;
    added.push('__filename');
  }
  return () => {
    for (const name of added.splice(0)) delete g[name];
  };
}
