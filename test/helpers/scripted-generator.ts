// A TextGenerator without a model on a REAL tokenizer (for chat templates and special tokens as
// the model has them): each sequence writes a script of token ids, then the tokenizer's first EOS.
// A sequence's constraint is honoured as the engine does (decode-pipeline / constrained-decode):
// its jump-forward tokens come unsampled (forced: true), and a sampled step takes the script's
// token when the mask allows it, else the lowest allowed id that is not a stop id; a mask that
// allows nothing but stop ids ends the sequence ('stop' when the structure is complete). Every
// mask the constraint gave is kept, so that tests can see what it allowed at each step.
import { Scheduler } from '../../src/engine/scheduler.ts';
import type {
  FinishReason,
  GeneratedToken,
  GenerationRequest,
  GenerationSession,
  ModelInfo,
  SequenceOptions,
  SessionRequest,
  TextGenerator,
} from '../../src/engine/types.ts';
import type { TextTokenizer } from '../../src/tokenizer/types.ts';

export interface ScriptedStep {
  /** The mask of a sampled step (undefined for a forced token). */
  mask?: Uint32Array;
  id: number;
}

export class ScriptedGenerator implements TextGenerator {
  readonly info: ModelInfo;
  readonly scheduler = new Scheduler(64);
  /** Each sequence's steps, in order. */
  readonly runs: ScriptedStep[][] = [];
  /** Each session's prompt. */
  readonly prompts: number[][] = [];

  constructor(
    readonly tokenizer: TextTokenizer,
    /** The ids a sequence writes, from its prompt. */
    private readonly script: (prompt: readonly number[]) => readonly number[],
    info: Partial<ModelInfo> = {},
  ) {
    this.info = {
      id: 'scripted',
      aliases: [],
      architecture: 'qwen3',
      contextLength: 4096,
      vocabSize: tokenizer.vocabSize,
      format: 'safetensors',
      created: 1_700_000_000,
      ...info,
    };
  }

  async openSession(request: SessionRequest): Promise<GenerationSession> {
    const release = await this.scheduler.acquire(request.signal);
    const prompt = [...request.promptTokens];
    this.prompts.push(prompt);
    const script = this.script(prompt);
    const eos = this.tokenizer.eosIds[0]!;
    const runs = this.runs;
    let closed = false;
    async function* sequence(options: SequenceOptions): AsyncGenerator<GeneratedToken, FinishReason, void> {
      const stops = new Set(options.stopTokenIds);
      const steps: ScriptedStep[] = [];
      runs.push(steps);
      const { constraint } = options;
      const forced: number[] = [];
      let written = 0;
      for (;;) {
        if (written >= options.maxTokens || prompt.length + written >= 4096) return 'length';
        if (constraint && forced.length === 0) forced.push(...constraint.forced());
        if (forced.length > 0) {
          const id = forced.shift()!;
          if (stops.has(id)) return 'stop';
          steps.push({ id });
          written++;
          yield { id, logprob: 0, forced: true };
          continue;
        }
        let id = script[written] ?? eos;
        let mask: Uint32Array | undefined;
        if (constraint) {
          mask = new Uint32Array(constraint.maskWords);
          await constraint.fillNextMask(mask);
          const allowed = (t: number) => ((mask![t >>> 5]! >>> (t & 31)) & 1) === 1;
          if (!allowed(id)) {
            let other = -1;
            for (let t = 0; t < constraint.maskWords * 32 && other < 0; t++) if (allowed(t) && !stops.has(t)) other = t;
            if (other < 0) return constraint.isComplete() ? 'stop' : 'length';
            id = other;
          }
        }
        steps.push({ id, ...(mask ? { mask } : {}) });
        if (stops.has(id)) return 'stop';
        if (constraint && !constraint.accept(id)) throw new Error(`the constraint refused token ${id}, which its mask allowed`);
        written++;
        yield { id, logprob: 0 };
      }
    }
    return {
      promptLogprobs: undefined,
      cachedTokens: 0,
      sequence,
      close() {
        if (closed) return;
        closed = true;
        release();
      },
    };
  }

  async *generate(request: GenerationRequest): AsyncGenerator<number, FinishReason, void> {
    const session = await this.openSession(request);
    try {
      const tokens = session.sequence({ index: 0, maxTokens: request.maxTokens, stopTokenIds: request.stopTokenIds });
      for (;;) {
        const step = await tokens.next();
        if (step.done) return step.value;
        yield step.value.id;
      }
    } finally {
      session.close();
    }
  }
}
