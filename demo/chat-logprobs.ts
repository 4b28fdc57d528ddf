// Chat logprobs (`logprobs.content: [{token, logprob, bytes, top_logprobs}]`) in the shape the
// token view reads (demo/token-view.ts: tokens, token_logprobs, top_logprobs, text_offset). Chat
// entries carry no offsets: each token's place in the content is where the bytes of the tokens
// before it end. A character split over byte tokens belongs to the token that completes it (the
// ones before it show nothing), as in the completions view.
import type { ChatTokenLogprob, CompletionLogprobs } from '../src/index.ts';

const utf8 = new TextEncoder();

/** One choice's logprobs, read in order as they stream in. */
export class ChatLogprobsReader {
  private readonly decoder = new TextDecoder();
  /** Characters of the content the tokens read so far spell. */
  private offset = 0;

  read(entries: readonly ChatTokenLogprob[]): CompletionLogprobs {
    const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const entry of entries) {
      const bytes = entry.bytes ?? [...utf8.encode(entry.token)];
      // A streaming decode holds an incomplete character back until its last byte comes.
      const text = this.decoder.decode(Uint8Array.from(bytes), { stream: true });
      out.tokens.push(text);
      out.text_offset.push(this.offset);
      out.token_logprobs.push(entry.logprob);
      out.top_logprobs.push(topObject(entry, text));
      this.offset += text.length;
    }
    return out;
  }
}

/** The alternatives keyed by their text; the chosen token under the text it adds here. */
function topObject(entry: ChatTokenLogprob, text: string): Record<string, number> {
  const top = new Map<string, number>();
  for (const alternative of entry.top_logprobs ?? []) {
    const key = alternative.token === entry.token ? text : alternative.token;
    if (!top.has(key)) top.set(key, alternative.logprob);
  }
  top.set(text, entry.logprob);
  return Object.fromEntries(top);
}
