// Reading a completions stream as any client does: the JSON of each server-sent event.
import type { CompletionChunk } from '../src/index.ts';

/** The JSON of each `data:` event of a text/event-stream body, until `[DONE]`. */
export async function* sseJson<Event = CompletionChunk>(response: Response): AsyncGenerator<Event> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let match: RegExpExecArray | null;
    while ((match = /\r?\n\r?\n/.exec(buffer))) {
      const event = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trimStart())
        .join('\n');
      if (data === '[DONE]') return;
      if (data) yield JSON.parse(data);
    }
  }
}
