// What XGrammar holds for one (tokenizer, vocabSize): the TokenizerInfo and the GrammarCompiler,
// built once (~0.4 s for Qwen2.5's vocabulary), and the compiled grammars, in an LRU keyed by the
// prepared output (prepare.ts). Concurrent compiles of one key share one promise; a failed
// compile is remembered too, so a client repeating a bad schema does not make XGrammar abort (and
// leak) each time. An evicted grammar is disposed once no matcher is being made from it (a matcher
// keeps its own reference in C++). Everything is freed when the tokenizer is garbage-collected.
import type { CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenizerInfo } from '@mlc-ai/web-xgrammar';
import type { TextTokenizer } from '../tokenizer/types.ts';
import { MAX_COST, scaledCost } from './limits.ts';
import { JumpForwardTokens } from './jump-forward.ts';
import { compileError, ignoredPartError, tooCostly, type PreparedOutput } from './prepare.ts';
import { StructuredOutputError } from './types.ts';
import { Utf8Tokens } from './utf8-tokens.ts';
import { byteLevelVocabulary } from './vocabulary.ts';
import { loadXGrammar, XGrammarCallError, type XGrammar } from './xgrammar.ts';

/** Compiled grammars kept per (tokenizer, vocabSize). */
export const MAX_CACHED_GRAMMARS = 32;

/** A cached compile: its grammar, or the error it ended in. */
interface Entry {
  grammar?: CompiledGrammar;
  error?: StructuredOutputError;
  /** Matchers being made from it right now. */
  pins: number;
  evicted: boolean;
}

/** The wasm objects of one (tokenizer, vocabSize), apart from the tokenizer (a finalizer frees them). */
interface Held {
  info: TokenizerInfo;
  compiler: GrammarCompiler;
  entries: Map<string, Entry>;
}

const registry = new FinalizationRegistry<Held>((held) => {
  for (const entry of held.entries.values()) entry.grammar?.dispose();
  held.entries.clear();
  held.compiler.dispose();
  held.info.dispose();
});

export class ModelGrammars {
  private readonly entries: Map<string, Entry>;
  private readonly pending = new Map<string, Promise<Entry>>();
  /** XGrammar compiles run so far (for tests: cache hits and shared compiles add none). */
  compileCount = 0;

  private constructor(
    readonly xg: XGrammar,
    readonly vocabSize: number,
    /** Per id: 1 when XGrammar's vocabulary entry is empty (special, control, no bytes). */
    readonly emptyIds: Uint8Array,
    /** The tokens of jump-forward strings, for every constraint of this model. */
    readonly jumpForward: JumpForwardTokens,
    /** Which tokens continue the output as UTF-8, for every constraint of this model. */
    readonly utf8: Utf8Tokens,
    private readonly compiler: GrammarCompiler,
    held: Held,
  ) {
    this.entries = held.entries;
  }

  /** Builds the TokenizerInfo (no stop ids: constraint.ts handles them) and the compiler. */
  static async create(tokenizer: TextTokenizer, vocabSize: number): Promise<ModelGrammars> {
    const xg = await loadXGrammar();
    const vocabulary = byteLevelVocabulary(tokenizer, vocabSize);
    const emptyIds = Uint8Array.from(vocabulary, (piece) => (piece === '' ? 1 : 0));
    const { value: info } = await xg.run((api) => api.TokenizerInfo.createTokenizerInfo(vocabulary, 'byte_level', false, vocabSize, []));
    // XGrammar's own cache (cache_enabled) would keep every grammar ever compiled: this LRU replaces it.
    const { value: compiler } = await xg.run((api) => api.GrammarCompiler.createGrammarCompiler(info, false));
    const held: Held = { info, compiler, entries: new Map() };
    registry.register(tokenizer, held);
    // The pieces by id, for spelling a first token without its dummy space, where there is one.
    const jumpForward = new JumpForwardTokens(tokenizer, vocabSize, JumpForwardTokens.writesDummySpace(tokenizer) ? vocabulary : undefined);
    return new ModelGrammars(xg, vocabSize, emptyIds, jumpForward, new Utf8Tokens(vocabulary), compiler, held);
  }

  /** Compiles `prepared` or takes it from the cache; throws StructuredOutputError. */
  async compile(prepared: PreparedOutput): Promise<void> {
    const estimate = scaledCost(prepared.cost.cost, this.vocabSize);
    if (estimate > MAX_COST) throw tooCostly(prepared, estimate, MAX_COST);
    const entry = await this.entry(prepared);
    if (entry.error) throw entry.error;
  }

  /**
   * A matcher for `prepared` (compiled again if it was evicted), without stop tokens: it ends when
   * the structure is complete, and isTerminated() says when that is (constraint.ts).
   */
  async matcher(prepared: PreparedOutput): Promise<GrammarMatcher> {
    for (;;) {
      const entry = await this.entry(prepared);
      if (entry.error) throw entry.error;
      if (!entry.grammar) continue; // evicted and disposed while this waited: compile again
      entry.pins++;
      try {
        const grammar = entry.grammar;
        // createGrammarMatcher reads only `handle` and `tokenizerInfo().getVocabSize()`; this stand-in
        // spares the TokenizerInfo handle it would make and never free.
        const source = { handle: grammar.handle, tokenizerInfo: () => ({ getVocabSize: () => this.vocabSize }) } as unknown as CompiledGrammar;
        return await this.xg.api.GrammarMatcher.createGrammarMatcher(source, undefined, true);
      } finally {
        entry.pins--;
        if (entry.evicted && entry.pins === 0) this.dispose(entry);
      }
    }
  }

  /** Grammars held now (for tests). */
  get cachedKeys(): string[] {
    return [...this.entries.keys()];
  }

  private async entry(prepared: PreparedOutput): Promise<Entry> {
    const cached = this.entries.get(prepared.key);
    if (cached) {
      this.entries.delete(prepared.key); // most recently used last
      this.entries.set(prepared.key, cached);
      return cached;
    }
    let pending = this.pending.get(prepared.key);
    if (!pending) {
      pending = this.compileEntry(prepared).finally(() => this.pending.delete(prepared.key));
      this.pending.set(prepared.key, pending);
    }
    return pending;
  }

  private async compileEntry(prepared: PreparedOutput): Promise<Entry> {
    const entry: Entry = { pins: 0, evicted: false };
    this.compileCount++;
    try {
      const { value, warnings } = await this.xg.run((api) => prepared.compile(api, this.compiler));
      if (prepared.warningsAreErrors && warnings.length > 0) {
        value.dispose();
        entry.error = ignoredPartError(prepared, warnings);
      } else entry.grammar = value;
    } catch (error) {
      if (!(error instanceof XGrammarCallError)) throw error; // the module broke, or a bug: not cached
      entry.error = compileError(prepared, error);
    }
    this.entries.set(prepared.key, entry);
    for (const [key, old] of this.entries) {
      if (this.entries.size <= MAX_CACHED_GRAMMARS) break;
      this.entries.delete(key);
      old.evicted = true;
      if (old.pins === 0) this.dispose(old);
    }
    return entry;
  }

  private dispose(entry: Entry): void {
    entry.grammar?.dispose();
    entry.grammar = undefined;
  }
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
