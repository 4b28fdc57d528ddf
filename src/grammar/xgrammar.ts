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
//   Forwarders installed while the wasm starts catch the lines during `run` and pass every other
//   line on to the console.
// - An abort unwinds the wasm frames through JavaScript without restoring the shadow stack pointer:
//   each failure would leak ~650 bytes of the 64 KiB stack, and about the 68th would trap. The wasm
//   binary is given an export of its globals as it is instantiated (wasm-globals.ts), and after
//   every failure the stack pointer is put back to its idle value (no wasm frame is live then).
// - A RuntimeError without a FATAL line is a trap (a wasm stack overflow reads as "memory access out
//   of bounds"; running out of memory is an abort without one): the module's memory may be corrupt.
//   The module is then restarted: its memory and globals are put back as they were right after it
//   started (a snapshot taken then), and every object made before (tokenizer infos, compilers,
//   grammars, matchers) is dropped without calling into it; its `epoch` counts restarts.
// Browser code: no Node imports; Node's modules come from `process.getBuiltinModule`.
import type * as XGrammarPackage from '@mlc-ai/web-xgrammar';
import { GrammarEngineRestartedError } from './types.ts';
import { exportMutableGlobals, globalExportName, type MutableGlobal } from './wasm-globals.ts';

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

  /**
   * A trap rather than a checked failure: the module's memory may be corrupt. XGrammar's checks
   * and a failed allocation end in abort(), a RuntimeError "Aborted(...)" after which the module
   * works on (its stack put back); an access out of bounds, an exhausted call stack, `unreachable`
   * or a bad indirect call are traps.
   */
  get trapped(): boolean {
    return this.cause instanceof WebAssembly.RuntimeError && this.fatal === '' && !/^Aborted\(/.test(this.cause.message);
  }
}

/** The loaded module: its API, and `run` for calls that may abort or warn. */
export interface XGrammar {
  readonly api: XGrammarApi;
  /**
   * Runs `call` after every earlier `run` has settled (one wasm call at a time, so each one's
   * messages are its own). Resolves with its value and the warnings it printed (file names
   * removed); rejects with XGrammarCallError when it aborts or throws, and with
   * GrammarEngineRestartedError when the module was restarted during it (a trap).
   */
  run<T>(call: (api: XGrammarApi) => T | Promise<T>): Promise<{ value: T; warnings: string[] }>;
  /**
   * Calls `call` on objects made in `epoch` (a matcher's calls), at once: throws
   * GrammarEngineRestartedError when the module was restarted since, and restores the stack (and
   * restarts the module on a trap) when `call` fails.
   */
  live<T>(epoch: number, call: () => T): T;
  /** `live` for a call that resolves later. */
  liveAsync<T>(epoch: number, call: () => Promise<T>): Promise<T>;
  /** Restarts since the module was loaded: objects made in an earlier epoch are gone. */
  readonly epoch: number;
  /** Bytes of the module's linear memory now (it grows and never shrinks); 0 when unknown. */
  memoryBytes(): number;
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
  const capture = captureInstance();
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
    return new LoadedXGrammar(api, capture.instance ? WasmState.of(capture.instance, capture.globals) : undefined);
  } finally {
    capture.stop();
    console.error = consoleError;
    console.log = consoleLog;
    restoreGlobals();
  }
}

/**
 * Watches WebAssembly.instantiate until `stop()`: a binary instantiated meanwhile (XGrammar's, as
 * its wasm starts) gets its mutable globals exported, and its instance is kept. A binary that cannot
 * be read is instantiated as it is, and when other code instantiated wasm in the same moments no
 * instance is trusted to be XGrammar's: the module then runs without stack restores or restarts.
 */
function captureInstance(): { readonly instance: WebAssembly.Instance | undefined; readonly globals: MutableGlobal[]; stop(): void } {
  const wasm = WebAssembly as { instantiate: typeof WebAssembly.instantiate };
  const original = wasm.instantiate;
  const seen: { instance: WebAssembly.Instance; globals: MutableGlobal[] }[] = [];
  let calls = 0;
  wasm.instantiate = (async (source: BufferSource | WebAssembly.Module, imports?: WebAssembly.Imports) => {
    calls++;
    if (source instanceof WebAssembly.Module) return original(source, imports);
    let binary: BufferSource = source;
    let globals: MutableGlobal[] = [];
    try {
      const bytes = ArrayBuffer.isView(source) ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength) : new Uint8Array(source);
      ({ binary, globals } = exportMutableGlobals(bytes));
    } catch {
      // not a binary this reader knows: as it is
    }
    const result = await original(binary, imports);
    seen.push({ instance: result.instance, globals });
    return result;
  }) as typeof WebAssembly.instantiate;
  return {
    get instance() {
      return calls === 1 ? seen[0]?.instance : undefined;
    },
    get globals() {
      return calls === 1 ? (seen[0]?.globals ?? []) : [];
    },
    stop: () => {
      wasm.instantiate = original;
    },
  };
}

/** The wasm instance's memory and globals: the idle stack pointer, and the snapshot a restart restores. */
class WasmState {
  private constructor(
    private readonly memory: WebAssembly.Memory,
    /** The first defined global, emscripten's shadow stack pointer, and its value between calls. */
    private readonly stackPointer: WebAssembly.Global,
    private readonly idleStack: number,
    private readonly globals: { global: WebAssembly.Global; value: unknown }[],
    /** The memory right after start: its size and its non-zero 64 KiB pages. */
    private readonly snapshot: { bytes: number; pages: Map<number, Uint8Array> },
  ) {}

  /** Reads an instance just started (no call in progress); undefined when it is not as expected. */
  static of(instance: WebAssembly.Instance, mutable: readonly MutableGlobal[]): WasmState | undefined {
    const memory = Object.values(instance.exports).find((value) => value instanceof WebAssembly.Memory);
    const globals = mutable.map(({ index }) => instance.exports[globalExportName(index)]);
    if (!(memory instanceof WebAssembly.Memory) || mutable[0]?.index !== 0 || mutable[0].type !== 0x7f) return undefined;
    if (!globals.every((global): global is WebAssembly.Global => global instanceof WebAssembly.Global)) return undefined;
    const pages = new Map<number, Uint8Array>();
    const view = new Uint8Array(memory.buffer);
    for (let at = 0; at < view.length; at += PAGE) {
      const page = view.subarray(at, at + PAGE);
      if (page.some((b) => b !== 0)) pages.set(at, page.slice());
    }
    return new WasmState(
      memory,
      globals[0]!,
      globals[0]!.value as number,
      globals.map((global) => ({ global, value: global.value as unknown })),
      { bytes: view.length, pages },
    );
  }

  get memoryBytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** Puts the stack pointer back to its idle value; only while no wasm frame is live. */
  restoreStack(): void {
    this.stackPointer.value = this.idleStack;
  }

  /** Puts memory and globals back as they were right after start (the memory keeps its size). */
  restore(): void {
    const view = new Uint8Array(this.memory.buffer);
    view.fill(0);
    for (const [at, page] of this.snapshot.pages) view.set(page, at);
    for (const { global, value } of this.globals) global.value = value;
  }
}

const PAGE = 64 * 1024;

class LoadedXGrammar implements XGrammar {
  epoch = 0;
  /** Set by a trap where the module cannot be restarted: every later call rejects with it. */
  private broken: Error | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  /** A `run`'s task is executing (between its first and last wasm call, awaits included). */
  private running = false;
  /** `liveAsync` calls whose wasm call may still be to come (the package awaits before making it). */
  private asyncCalls = 0;
  /** After a trap: the epoch has moved on; the memory is restored once no call is under way. */
  private pendingRestore: { done: Promise<void>; resolve: () => void } | undefined;

  constructor(
    readonly api: XGrammarApi,
    private readonly wasm: WasmState | undefined,
  ) {}

  run<T>(call: (api: XGrammarApi) => T | Promise<T>): Promise<{ value: T; warnings: string[] }> {
    return this.enqueue(() => this.recorded(call));
  }

  live<T>(epoch: number, call: () => T): T {
    this.checkEpoch(epoch);
    const outer = recording; // a run awaiting between its calls keeps its own lines
    const lines: string[] = [];
    recording = lines;
    try {
      return call();
    } catch (error) {
      throw this.failed(new XGrammarCallError(messagesOf(lines, 'FATAL').join('\n'), error));
    } finally {
      recording = outer;
    }
  }

  async liveAsync<T>(epoch: number, call: () => Promise<T>): Promise<T> {
    this.checkEpoch(epoch);
    this.asyncCalls++;
    try {
      let value: T;
      try {
        value = await call();
      } catch (error) {
        // Its wasm call ran after an await, outside any bracket of ours: what it printed is not known.
        throw this.failed(new XGrammarCallError('', error));
      }
      this.checkEpoch(epoch); // restarted while it waited: what it made is gone
      return value;
    } finally {
      this.asyncCalls--;
      this.restoreWhenIdle();
    }
  }

  memoryBytes(): number {
    return this.wasm?.memoryBytes ?? 0;
  }

  private checkEpoch(epoch: number): void {
    if (this.broken) throw this.broken;
    if (epoch !== this.epoch) throw new GrammarEngineRestartedError();
  }

  /** Runs `task` after every earlier one has settled and after a pending restore. */
  private enqueue<T>(task: () => Promise<T>): Promise<T> {
    const result = this.queue.then(async () => {
      if (this.pendingRestore) await this.pendingRestore.done;
      this.running = true;
      try {
        return await task();
      } finally {
        this.running = false;
        this.restoreWhenIdle();
      }
    });
    this.queue = result.catch(() => undefined);
    return result;
  }

  private async recorded<T>(call: (api: XGrammarApi) => T | Promise<T>): Promise<{ value: T; warnings: string[] }> {
    const epoch = this.epoch;
    this.checkEpoch(epoch);
    const lines: string[] = [];
    recording = lines;
    try {
      const value = await call(this.api);
      this.checkEpoch(epoch); // a matcher trapped meanwhile: what this made is gone
      return { value, warnings: messagesOf(lines, 'WARNING') };
    } catch (error) {
      if (error instanceof GrammarEngineRestartedError || error === this.broken) throw error;
      throw this.failed(new XGrammarCallError(messagesOf(lines, 'FATAL').join('\n'), error));
    } finally {
      recording = undefined;
    }
  }

  /**
   * After a failed call (no wasm frame live any more): the stack pointer back to idle; after a
   * trap, a new epoch at once (objects made so far are refused from now on) and a restore of the
   * memory as soon as no run is executing and no liveAsync call may still reach the module (their
   * wasm calls would otherwise run on old handles in the restored memory). Runs queued meanwhile
   * wait for the restore. Returns what the caller throws.
   */
  private failed(failure: XGrammarCallError): Error {
    if (!failure.trapped) {
      this.wasm?.restoreStack();
      return failure;
    }
    if (!this.wasm) {
      this.broken = new Error(`XGrammar's wasm module trapped (${failure.message}) and cannot be restarted here; reload to use structured output`);
      return this.broken;
    }
    if (!this.pendingRestore) {
      let resolve!: () => void;
      const done = new Promise<void>((r) => (resolve = r));
      this.pendingRestore = { done, resolve };
      this.epoch++;
    }
    this.restoreWhenIdle();
    return failure;
  }

  private restoreWhenIdle(): void {
    if (!this.pendingRestore || this.running || this.asyncCalls > 0) return;
    this.wasm!.restore();
    const { resolve } = this.pendingRestore;
    this.pendingRestore = undefined;
    resolve();
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
