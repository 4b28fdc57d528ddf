// What XGrammar holds for one (tokenizer, vocabSize): the TokenizerInfo and the GrammarCompiler,
// built once (~0.4 s for Qwen2.5's vocabulary), and the compiled grammars, in an LRU keyed by the
// prepared output (prepare.ts). Concurrent compiles of one key share one promise; a failed
// compile is remembered too, so a client repeating a bad schema does not make XGrammar abort (and
// leak) each time. An evicted grammar is disposed once no matcher is being made from it (a matcher
// keeps its own reference in C++). Everything is freed when the tokenizer is garbage-collected.
// After a restart of the module (xgrammar.ts: a trap) the TokenizerInfo, compiler and grammars are
// built again in the new epoch; the vocabulary tables here are JavaScript and stay.
import type { CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenizerInfo } from '@mlc-ai/web-xgrammar';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { MAX_COST, MAX_REQUIRED_CHARS, scaledCost } from './limits.ts';
import { checkFiniteRules } from './finite-rules.ts';
import { JumpForwardTokens } from './jump-forward.ts';
import { compileError, ignoredPartError, tooCostly, type PreparedOutput } from './prepare.ts';
import { GrammarEngineRestartedError, StructuredOutputError } from './types.ts';
import { Utf8Tokens } from './utf8-tokens.ts';
import { byteLevelVocabulary } from './vocabulary.ts';
import { loadXGrammar, XGrammarCallError, type XGrammar } from './xgrammar.ts';

/** Compiled grammars kept per (tokenizer, vocabSize). */
export const MAX_CACHED_GRAMMARS = 32;

/**
 * XGrammar cannot say how many bytes a compiled grammar holds; its token-mask tables are built by
 * the compile, so its time stands for them: each cached grammar counts as GRAMMAR_BASE_BYTES plus
 * GRAMMAR_BYTES_PER_MS per millisecond its compile took (the costliest structure measured holds ~14 KiB
 * of wasm memory per millisecond, docs/structured-output.md "Memory"), and the grammars of one
 * (tokenizer, vocabSize) count at most MAX_CACHED_GRAMMAR_BYTES (the newest is kept whatever it counts).
 */
export const GRAMMAR_BASE_BYTES = 64 * 1024;
export const GRAMMAR_BYTES_PER_MS = 16 * 1024;
export const MAX_CACHED_GRAMMAR_BYTES = 64 * 2 ** 20;

/** Structures that trapped the module remembered per (tokenizer, vocabSize). */
const MAX_REMEMBERED_TRAPS = 256;

/** Attempts at a compile or a matcher that another request's trap (a restart) interrupted. */
const RESTART_ATTEMPTS = 3;

/** A cached compile: its grammar, or the error it ended in. */
interface Entry {
  grammar?: CompiledGrammar;
  error?: StructuredOutputError;
  /** Matchers being made from it right now. */
  pins: number;
  evicted: boolean;
  /** What it counts against MAX_CACHED_GRAMMAR_BYTES. */
  bytes: number;
}

/** The wasm objects of one (tokenizer, vocabSize) in one epoch of the module. */
interface Held {
  readonly epoch: number;
  readonly info: TokenizerInfo;
  readonly compiler: GrammarCompiler;
  readonly entries: Map<string, Entry>;
  readonly pending: Map<string, Promise<Entry>>;
}

/** What a finalizer frees when the tokenizer is garbage-collected: the epoch's objects, if still current. */
interface Holder {
  xg: XGrammar;
  held?: Held;
}

const registry = new FinalizationRegistry<Holder>(({ xg, held }) => {
  if (!held || held.epoch !== xg.epoch) return; // gone with a restart
  try {
    xg.live(held.epoch, () => {
      for (const entry of held.entries.values()) entry.grammar?.dispose();
      held.entries.clear();
      held.compiler.dispose();
      held.info.dispose();
    });
  } catch {
    // the module broke or restarted: nothing of this epoch is left to free
  }
});

export class ModelGrammars {
  private readonly holder: Holder;
  private building: Promise<Held> | undefined;
  /** Structures whose compile trapped the module, by key, across restarts (most recent last). */
  private readonly trapped = new Map<string, StructuredOutputError>();
  /** XGrammar compiles run so far (for tests: cache hits and shared compiles add none). */
  compileCount = 0;

  private constructor(
    readonly xg: XGrammar,
    readonly vocabSize: number,
    /** XGrammar's vocabulary: each id's bytes as a byte-level string ('' for none). */
    private readonly vocabulary: readonly string[],
    /** Per id: 1 when XGrammar's vocabulary entry is empty (special, control, no bytes). */
    readonly emptyIds: Uint8Array,
    /** The tokens of jump-forward strings, for every constraint of this model. */
    readonly jumpForward: JumpForwardTokens,
    /** Which tokens continue the output as UTF-8, for every constraint of this model. */
    readonly utf8: Utf8Tokens,
    tokenizer: TextTokenizer,
  ) {
    this.holder = { xg };
    registry.register(tokenizer, this.holder);
  }

  /** The vocabulary tables; XGrammar's objects are built on first use (and again after a restart). */
  static async create(tokenizer: TextTokenizer, vocabSize: number): Promise<ModelGrammars> {
    const xg = await loadXGrammar();
    const vocabulary = byteLevelVocabulary(tokenizer, vocabSize);
    const emptyIds = Uint8Array.from(vocabulary, (piece) => (piece === '' ? 1 : 0));
    // The pieces by id, for spelling a first token without its dummy space, where there is one.
    const jumpForward = new JumpForwardTokens(tokenizer, vocabSize, JumpForwardTokens.writesDummySpace(tokenizer) ? vocabulary : undefined);
    const model = new ModelGrammars(xg, vocabSize, vocabulary, emptyIds, jumpForward, new Utf8Tokens(vocabulary), tokenizer);
    await model.held();
    return model;
  }

  /** Compiles `prepared` or takes it from the cache; throws StructuredOutputError. */
  async compile(prepared: PreparedOutput): Promise<void> {
    const estimate = scaledCost(prepared.cost.cost, this.vocabSize);
    if (estimate > MAX_COST) throw tooCostly(prepared, estimate, MAX_COST);
    const entry = await this.afterRestarts(async () => this.entry(await this.held(), prepared));
    if (entry.error) throw entry.error;
  }

  /**
   * A matcher for `prepared` (compiled again if it was evicted) and the epoch it lives in, without
   * stop tokens: it ends when the structure is complete, and isTerminated() says when that is
   * (constraint.ts).
   */
  async matcher(prepared: PreparedOutput): Promise<{ matcher: GrammarMatcher; epoch: number }> {
    return this.afterRestarts(async () => {
      for (;;) {
        const held = await this.held();
        const entry = await this.entry(held, prepared);
        if (entry.error) throw entry.error;
        if (!entry.grammar) continue; // evicted and disposed while this waited: compile again
        entry.pins++;
        try {
          const grammar = entry.grammar;
          // createGrammarMatcher reads only `handle` and `tokenizerInfo().getVocabSize()`; this stand-in
          // spares the TokenizerInfo handle it would make and never free.
          const source = { handle: grammar.handle, tokenizerInfo: () => ({ getVocabSize: () => this.vocabSize }) } as unknown as CompiledGrammar;
          const matcher = await this.xg.liveAsync(held.epoch, () => this.xg.api.GrammarMatcher.createGrammarMatcher(source, undefined, true));
          return { matcher, epoch: held.epoch };
        } finally {
          entry.pins--;
          if (entry.evicted && entry.pins === 0) this.dispose(held, entry);
        }
      }
    });
  }

  /** Grammars held now (for tests). */
  get cachedKeys(): string[] {
    return [...(this.holder.held?.entries.keys() ?? [])];
  }

  /** What the grammars held now count against MAX_CACHED_GRAMMAR_BYTES. */
  get cachedBytes(): number {
    let bytes = 0;
    for (const entry of this.holder.held?.entries.values() ?? []) bytes += entry.bytes;
    return bytes;
  }

  /** `task`, again when another request's trap restarted the module during it. */
  private async afterRestarts<T>(task: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await task();
      } catch (error) {
        if (!(error instanceof GrammarEngineRestartedError) || attempt >= RESTART_ATTEMPTS) throw error;
      }
    }
  }

  /** The TokenizerInfo (no stop ids: constraint.ts handles them) and the compiler of the current epoch. */
  private held(): Promise<Held> {
    const current = this.holder.held;
    if (current && current.epoch === this.xg.epoch) return Promise.resolve(current);
    this.building ??= this.xg
      .run((api) => {
        const epoch = this.xg.epoch;
        return api.TokenizerInfo.createTokenizerInfo([...this.vocabulary], 'byte_level', false, this.vocabSize, []).then(async (info) => {
          // XGrammar's own cache (cache_enabled) would keep every grammar ever compiled: the LRU here replaces it.
          const compiler = await api.GrammarCompiler.createGrammarCompiler(info, false);
          return { epoch, info, compiler, entries: new Map(), pending: new Map() } satisfies Held;
        });
      })
      .then(({ value }) => (this.holder.held = value))
      .finally(() => (this.building = undefined));
    return this.building;
  }

  private async entry(held: Held, prepared: PreparedOutput): Promise<Entry> {
    const cached = held.entries.get(prepared.key);
    if (cached) {
      held.entries.delete(prepared.key); // most recently used last
      held.entries.set(prepared.key, cached);
      return cached;
    }
    let pending = held.pending.get(prepared.key);
    if (!pending) {
      pending = this.compileEntry(held, prepared).finally(() => held.pending.delete(prepared.key));
      held.pending.set(prepared.key, pending);
    }
    return pending;
  }

  private async compileEntry(held: Held, prepared: PreparedOutput): Promise<Entry> {
    const entry: Entry = { pins: 0, evicted: false, bytes: GRAMMAR_BASE_BYTES };
    const trapped = this.trapped.get(prepared.key);
    if (trapped) {
      entry.error = trapped;
      return entry; // in the current epoch's cache it would be gone with the next restart
    }
    this.compileCount++;
    try {
      const { value, warnings } = await this.xg.run(async (api) => {
        const start = performance.now(); // not the time it waited in the queue
        const grammar = await prepared.compile(api, held.compiler);
        const milliseconds = performance.now() - start;
        const normalized = grammar.grammar();
        try {
          return { grammar, text: normalized.toString(), milliseconds };
        } finally {
          normalized.dispose();
        }
      });
      const refusal = compiledRefusal(prepared, warnings, value.text);
      if (refusal) {
        this.xg.live(held.epoch, () => value.grammar.dispose());
        entry.error = refusal;
      } else {
        entry.grammar = value.grammar;
        entry.bytes += Math.round(value.milliseconds * GRAMMAR_BYTES_PER_MS);
      }
    } catch (error) {
      if (!(error instanceof XGrammarCallError)) throw error; // a restart, or a bug: not cached
      entry.error = compileError(prepared, error);
      if (error.trapped) this.rememberTrap(prepared.key, entry.error);
    }
    held.entries.set(prepared.key, entry);
    let bytes = 0;
    for (const cached of held.entries.values()) bytes += cached.bytes;
    for (const [key, old] of held.entries) {
      if (old === entry || (held.entries.size <= MAX_CACHED_GRAMMARS && bytes <= MAX_CACHED_GRAMMAR_BYTES)) break;
      bytes -= old.bytes;
      held.entries.delete(key);
      old.evicted = true;
      if (old.pins === 0) this.dispose(held, old);
    }
    return entry;
  }

  /** Remembers a structure that trapped the module, so a client resending it gets its 400 without another restart. */
  private rememberTrap(key: string, error: StructuredOutputError): void {
    this.trapped.delete(key);
    this.trapped.set(key, error);
    for (const oldest of this.trapped.keys()) {
      if (this.trapped.size <= MAX_REMEMBERED_TRAPS) break;
      this.trapped.delete(oldest);
    }
  }

  private dispose(held: Held, entry: Entry): void {
    const grammar = entry.grammar;
    entry.grammar = undefined;
    if (grammar && held.epoch === this.xg.epoch) this.xg.live(held.epoch, () => grammar.dispose());
  }
}

/**
 * Why a structure that compiled is refused after all, if it is: a warning where those mean part of
 * it was ignored; a reachable rule that never ends (a sequence entering it could never complete,
 * and XGrammar's jump-forward would build its forced text until memory ran out); a part that
 * requires more output than MAX_REQUIRED_CHARS (jump-forward would build all of it at once).
 */
function compiledRefusal(prepared: PreparedOutput, warnings: readonly string[], normalized: string): StructuredOutputError | undefined {
  if (prepared.warningsAreErrors && warnings.length > 0) return ignoredPartError(prepared, warnings);
  const finite = checkFiniteRules(normalized);
  if ('rule' in finite) {
    const hint = prepared.subject === 'JSON schema' || prepared.subject === 'structural tag' ? ' (a required property or item that refers back to its own schema?)' : '';
    return new StructuredOutputError(`Invalid ${prepared.subject}: it admits no finite output: the grammar's rule '${finite.rule}' can never end${hint}`);
  }
  if ('longestRequired' in finite && finite.longestRequired > MAX_REQUIRED_CHARS) {
    return new StructuredOutputError(
      `Unsupported ${prepared.subject}: a part of it requires at least ${finite.longestRequired} characters of output; ` +
        `at most ${MAX_REQUIRED_CHARS} are supported (large repetition counts, minItems or minLength)`,
    );
  }
  return undefined;
}

const models = new WeakMap<TextTokenizer, Map<number, Promise<ModelGrammars>>>();

/** The grammars of (tokenizer, vocabSize), built on first use. */
export function modelGrammars(tokenizer: TextTokenizer, vocabSize: number): Promise<ModelGrammars> {
  let bySize = models.get(tokenizer);
  if (!bySize) models.set(tokenizer, (bySize = new Map()));
  let model = bySize.get(vocabSize);
  if (!model) {
    model = ModelGrammars.create(tokenizer, vocabSize);
    bySize.set(vocabSize, model);
    model.catch(() => bySize.delete(vocabSize)); // a later request may try again
  }
  return model;
}
