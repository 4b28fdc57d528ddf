// A TextGenerator without a model, for testing the request layer: a tiny SentencePiece-like
// tokenizer (▁ for spaces, leading-space stripping, byte-fallback tokens for everything else)
// and a "model" that writes a script (or seeded random pieces) one token at a time.
import type { FinishReason, GenerationRequest, ModelInfo, TextGenerator } from '../../src/engine/types.ts';
import type { TextTokenizer } from '../../src/tokenizer/types.ts';

export const UNK = 0;
export const BOS = 1;
export const EOS = 2;
const BYTE_BASE = 3; // ids 3..258 are the byte tokens <0x00>..<0xFF>

/** Word pieces after the byte tokens. Chosen so that stop strings split across tokens ('ST' 'OP'),
 * leading spaces ('▁there') and multi-byte characters (byte tokens) can be tested. */
const PIECES = [
  '▁', '▁Once', '▁upon', '▁a', '▁time', '▁there', '▁was', '▁little', '▁robot', '▁named', '▁Bob',
  '▁The', '▁the', '▁end', '▁Hello', '▁world', '▁and', '▁cat', '▁dog', '▁sat', '▁on', '▁mat',
  '.', ',', '!', '?', 'ST', 'OP', 'S', 'T', 'O', 'P', 'END', 'E', 'N', 'D', 'a', 'b', 'c', 'x', 'y', 'z',
  '<|special|>',
] as const;

const SPECIAL_TEXT: Record<number, string> = { [UNK]: '<unk>', [BOS]: '<s>', [EOS]: '</s>' };

export class FakeTokenizer implements TextTokenizer {
  readonly vocab: string[];
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosIds: readonly number[];
  readonly addBos: boolean;
  private readonly pieceIds = new Map<string, number>();
  private readonly maxPieceLength: number;
  readonly specialId: number;

  constructor(options: { addBos?: boolean } = {}) {
    this.vocab = ['<unk>', '<s>', '</s>'];
    for (let b = 0; b < 256; b++) this.vocab.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    for (const piece of PIECES) {
      this.pieceIds.set(piece, this.vocab.length);
      this.vocab.push(piece);
    }
    this.vocabSize = this.vocab.length;
    this.addBos = options.addBos ?? true;
    this.bosId = this.addBos ? BOS : null;
    this.eosIds = [EOS];
    this.specialId = this.pieceIds.get('<|special|>')!;
    this.maxPieceLength = Math.max(...PIECES.map((p) => p.length));
  }

  /** Id of a word piece ('▁there') or of a byte token (a number 0..255). */
  id(piece: string | number): number {
    if (typeof piece === 'number') return BYTE_BASE + piece;
    const id = this.pieceIds.get(piece);
    if (id === undefined) throw new Error(`no piece ${piece}`);
    return id;
  }

  isSpecial(id: number): boolean {
    return id === UNK || id === BOS || id === EOS || id === this.specialId;
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const ids: number[] = [];
    if (options.addBos ?? this.addBos) ids.push(BOS);
    // SentencePiece: a dummy prefix space, spaces become ▁. Special token text is parsed.
    const parts = text.split(/(<s>|<\/s>)/);
    let first = true;
    for (const part of parts) {
      if (part === '<s>') ids.push(BOS);
      else if (part === '</s>') ids.push(EOS);
      else if (part) {
        ids.push(...this.encodePieces((first ? ' ' : '') + part));
      }
      first = false;
    }
    return ids;
  }

  /** Text → ids without BOS or the dummy prefix: what a model would write for `text`. */
  encodePieces(text: string): number[] {
    const s = text.replaceAll(' ', '▁');
    const ids: number[] = [];
    let i = 0;
    while (i < s.length) {
      let matched = 0;
      for (let len = Math.min(this.maxPieceLength, s.length - i); len > 0; len--) {
        const piece = s.slice(i, i + len);
        if (piece !== '<|special|>' && this.pieceIds.has(piece)) {
          ids.push(this.pieceIds.get(piece)!);
          matched = len;
          break;
        }
      }
      if (matched) {
        i += matched;
        continue;
      }
      const cp = s.codePointAt(i)!;
      const ch = String.fromCodePoint(cp);
      for (const byte of new TextEncoder().encode(ch.replaceAll('▁', ' '))) ids.push(BYTE_BASE + byte);
      i += ch.length;
    }
    return ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    let out = '';
    let bytes: number[] = [];
    let atStart = true;
    const flushBytes = () => {
      if (bytes.length) out += new TextDecoder('utf-8', { fatal: false }).decode(new Uint8Array(bytes));
      bytes = [];
    };
    for (const id of ids) {
      if (id < 0 || id >= this.vocabSize) throw new Error(`token id ${id} out of range`);
      if (id >= BYTE_BASE && id < BYTE_BASE + 256) {
        bytes.push(id - BYTE_BASE);
        atStart = false;
        continue;
      }
      flushBytes();
      if (this.isSpecial(id)) {
        if (!options.skipSpecialTokens) out += SPECIAL_TEXT[id] ?? this.vocab[id];
        continue;
      }
      let text = this.vocab[id]!.replaceAll('▁', ' ');
      // Like Llama's decoder: the leading space of the first token is dropped.
      if (atStart && out === '' && text.startsWith(' ')) text = text.slice(1);
      atStart = false;
      out += text;
    }
    flushBytes();
    return out;
  }
}

export interface FakeGeneratorOptions {
  id?: string;
  aliases?: string[];
  contextLength?: number;
  created?: number;
  addBos?: boolean;
  /**
   * What the model writes: text (written as pieces, then EOS), explicit ids (EOS only if listed),
   * or a function of the request. Default: with temperature 0 a fixed story, otherwise random
   * pieces from the request's seed (a fresh seed when none), then EOS after 40 tokens.
   */
  script?: string | readonly number[] | ((request: GenerationRequest) => readonly number[]);
  /** Milliseconds before each token. */
  delayMs?: number;
  /** Throw `new Error('fake GPU failure')` after yielding this many tokens. */
  failAfter?: number;
}

export type FakeEvent = { kind: 'start'; request: GenerationRequest } | { kind: 'end'; how: FinishReason | 'aborted' | 'returned' | 'failed'; tokens: number };

export const DEFAULT_STORY = ' there was a little robot named Bob. The end.';

/** A deterministic 32-bit PRNG (mulberry32). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class FakeGenerator implements TextGenerator {
  readonly info: ModelInfo;
  readonly tokenizer: FakeTokenizer;
  /** What happened, in order: each generation's start and how it ended. */
  readonly events: FakeEvent[] = [];
  private readonly options: FakeGeneratorOptions;

  constructor(options: FakeGeneratorOptions = {}) {
    this.options = options;
    this.tokenizer = new FakeTokenizer({ addBos: options.addBos ?? true });
    this.info = {
      id: options.id ?? 'fake-llama',
      aliases: options.aliases ?? ['fake'],
      architecture: 'llama',
      contextLength: options.contextLength ?? 64,
      vocabSize: this.tokenizer.vocabSize,
      format: 'gguf',
      created: options.created ?? 1_700_000_000,
    };
  }

  /** Generations currently running. */
  get active(): number {
    const starts = this.events.filter((e) => e.kind === 'start').length;
    return starts - this.events.filter((e) => e.kind === 'end').length;
  }

  /** How the generations ended, in order. */
  get endings(): Extract<FakeEvent, { kind: 'end' }>[] {
    return this.events.filter((e): e is Extract<FakeEvent, { kind: 'end' }> => e.kind === 'end');
  }

  /** The ids this generator would write for `request`. */
  script(request: GenerationRequest): readonly number[] {
    const script = this.options.script;
    if (typeof script === 'function') return script(request);
    if (Array.isArray(script)) return script;
    if (typeof script === 'string') return [...this.tokenizer.encodePieces(script), EOS];
    if (request.sampling.temperature === 0) return [...this.tokenizer.encodePieces(DEFAULT_STORY), EOS];
    const random = mulberry32(request.sampling.seed ?? Math.floor(Math.random() * 2 ** 32));
    const words = PIECES.filter((p) => p.startsWith('▁') && p.length > 1).map((p) => this.tokenizer.id(p));
    return [...Array.from({ length: 40 }, () => words[Math.floor(random() * words.length)]!), EOS];
  }

  async *generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void> {
    this.events.push({ kind: 'start', request });
    const script = this.script(request);
    let tokens = 0;
    let how: FinishReason | 'aborted' | 'returned' | 'failed' = 'returned';
    try {
      for (const id of script) {
        if (tokens >= request.maxTokens) {
          how = 'length';
          return 'length';
        }
        if (this.options.delayMs) await sleep(this.options.delayMs, request.signal);
        request.signal?.throwIfAborted();
        if (this.options.failAfter !== undefined && tokens >= this.options.failAfter) throw new Error('fake GPU failure');
        if (request.stopTokenIds.includes(id)) {
          how = 'stop';
          return 'stop';
        }
        tokens++;
        yield id;
      }
      how = tokens >= request.maxTokens ? 'length' : 'stop';
      return how;
    } catch (err) {
      how = request.signal?.aborted ? 'aborted' : 'failed';
      throw err;
    } finally {
      this.events.push({ kind: 'end', how, tokens });
    }
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A fake generator, as the `{ generator }` engine the API handler takes. */
export function fakeEngine(options: FakeGeneratorOptions = {}): { generator: FakeGenerator } {
  return { generator: new FakeGenerator(options) };
}
