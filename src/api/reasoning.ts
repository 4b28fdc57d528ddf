// Reasoning output: models that think before they answer (Qwen3, DeepSeek-R1 distills) write
// their thinking between `<think>` and `</think>`; the chat API returns it apart from the answer,
// as vLLM's reasoning parsers do (`reasoning`, with `reasoning_content` as an alias). One state
// machine reads the output in the pieces it is generated in, and the whole-output split is that
// machine fed everything at once, so a streamed answer and a whole one carry the same reasoning
// and the same content however the output is split: text that may still be part of a tag is held
// back until that is decided. The tags themselves are in neither.
// Browser code: nothing here may import Node modules.
import type { TextGenerator } from '../engine/types.ts';

/** The tags around a model's thinking. */
export interface ReasoningTags {
  start: string;
  end: string;
}

/** The tags every model we know of thinks in (Qwen3, QwQ, DeepSeek-R1 and its distills). */
export const THINK_TAGS: ReasoningTags = { start: '<think>', end: '</think>' };

/**
 * Where a reply starts, from the reply's own part of the prompt (the generation prompt the template
 * adds after the conversation, or the final message being continued: chat-prompt.ts
 * generationPart), never from the conversation, whose text may mention the tags:
 * - 'inside': the part leaves a `<think>` open (DeepSeek-R1 distills' templates, Qwen3's
 *   thinking-only templates, a continued message that is still thinking): the output is thinking
 *   until `</think>`;
 * - 'answer': the part closes its thinking (Qwen3 with enable_thinking false writes an empty
 *   block; a continued message that has thought): the output is all answer, as vLLM reads it;
 * - 'may-open': the part has no tag: the output is thinking only if it begins with `<think>`.
 */
export type ReasoningStart = 'inside' | 'may-open' | 'answer';

/** What a request's replies are split with. */
export interface ReasoningPlan {
  tags: ReasoningTags;
  start: ReasoningStart;
}

/**
 * Whether a model thinks: its tokenizer has `<think>` and `</think>` as tokens of their own, or one
 * of its chat templates writes `<think>`. A model loaded with `reasoning: false` does not.
 */
export function reasoningTagsOf(generator: Pick<TextGenerator, 'info' | 'tokenizer'>): ReasoningTags | null {
  if (generator.info.reasoning === false) return null;
  const { tokenizer } = generator;
  const single = (text: string) => {
    const ids = tokenizer.encode(text, { addBos: false });
    return ids.length === 1 && tokenizer.decode(ids, { skipSpecialTokens: false }) === text;
  };
  if (single(THINK_TAGS.start) && single(THINK_TAGS.end)) return THINK_TAGS;
  const templates = Object.values(tokenizer.chatTemplates ?? {});
  return templates.some((t) => t.includes(THINK_TAGS.start)) ? THINK_TAGS : null;
}

/** Where a reply starts (ReasoningStart), from its part of the prompt: the last tag in it decides. */
export function reasoningStart(part: string, tags: ReasoningTags): ReasoningStart {
  const open = part.lastIndexOf(tags.start);
  const close = part.lastIndexOf(tags.end);
  if (open > close) return 'inside';
  return close >= 0 ? 'answer' : 'may-open';
}

/** A piece of a reply, split. */
export interface ReasoningPart {
  reasoning: string;
  content: string;
}

type State =
  | 'opening' // at the start: `<think>` may come
  | 'thinking' // up to `</think>`
  | 'answer'; // content to the end

/**
 * Incremental split: push() the output's pieces as they come; each returns the reasoning and the
 * content that are safe to show now. finish() returns what was held back. Whether the reply
 * thought at all is `thought` (then the message has `reasoning`, possibly '').
 *
 * - 'inside': thinking from the first character (a `<think>` the model writes first anyway is
 *   dropped) to the first `</think>`; the rest is content.
 * - 'may-open': thinking only when the output begins with `<think>`, to the first `</think>`.
 * - 'answer': all content.
 */
export class ReasoningStream {
  private pending = '';
  private state: State;
  private finished = false;
  /** Whether the reply has a thinking part. */
  thought: boolean;

  constructor(
    private readonly tags: ReasoningTags,
    private readonly start: ReasoningStart,
  ) {
    this.state = start === 'answer' ? 'answer' : 'opening';
    this.thought = start === 'inside';
  }

  /** Whether the thinking has ended (or never began): what follows is the answer. */
  get answering(): boolean {
    return this.state === 'answer';
  }

  push(text: string): ReasoningPart {
    if (this.finished) throw new Error('ReasoningStream: push() after finish()');
    this.pending += text;
    return this.drain(false);
  }

  finish(): ReasoningPart {
    if (this.finished) return { reasoning: '', content: '' };
    this.finished = true;
    return this.drain(true);
  }

  private drain(final: boolean): ReasoningPart {
    const out: ReasoningPart = { reasoning: '', content: '' };
    for (;;) {
      const s = this.pending;
      if (this.state === 'opening') {
        const { start } = this.tags;
        if (s.startsWith(start)) {
          this.pending = s.slice(start.length);
          this.state = 'thinking';
          this.thought = true;
          continue;
        }
        if (start.startsWith(s) && !final) return out; // '' or a proper prefix of the tag: wait
        this.state = this.start === 'inside' ? 'thinking' : 'answer';
        continue;
      }
      if (this.state === 'thinking') {
        const { end } = this.tags;
        const at = s.indexOf(end);
        if (at >= 0) {
          out.reasoning += s.slice(0, at);
          this.pending = s.slice(at + end.length);
          this.state = 'answer';
          continue;
        }
        const keep = final ? 0 : tagStartAtEnd(s, end);
        out.reasoning += s.slice(0, s.length - keep);
        this.pending = s.slice(s.length - keep);
        return out;
      }
      out.content += s;
      this.pending = '';
      return out;
    }
  }
}

/** The whole output split: reasoning null when the reply did not think. */
export function splitReasoning(plan: ReasoningPlan, text: string): { reasoning: string | null; content: string } {
  const stream = new ReasoningStream(plan.tags, plan.start);
  const head = stream.push(text);
  const tail = stream.finish();
  return { reasoning: stream.thought ? head.reasoning + tail.reasoning : null, content: head.content + tail.content };
}

/** The length of the longest end of s that is the start of tag (and not all of it). */
function tagStartAtEnd(s: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, s.length); n > 0; n--) {
    if (s.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}
