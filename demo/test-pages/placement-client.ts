// The client side of the placement tests (test/browser/placements.spec.ts): plain `fetch` calls to
// /v1, exactly what application code does. It installs nothing, so a page that only loads this
// (placement-plain.html) is answered by whatever serves /v1 there: the page's shim, or the service
// worker. Results come back as plain data for the spec to check.
import OpenAI from 'openai';

const MODEL = 'stories260K';

function post(body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch('/v1/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/** The `data:` payloads of an SSE text. */
function events(text: string): string[] {
  return text
    .split('\n\n')
    .filter((event) => event.startsWith('data: '))
    .map((event) => event.slice('data: '.length));
}

/** A long stream (until the context is full) that the caller leaves: its first event and the stream. */
async function startLongStream(signal?: AbortSignal) {
  const response = await post({ model: MODEL, prompt: 'Once upon a time', max_tokens: null, ignore_eos: true, temperature: 0, stream: true }, signal);
  const reader = response.body!.getReader();
  const first = await reader.read();
  return { status: response.status, reader, first: new TextDecoder().decode(first.value) };
}

/** Streams held open on purpose: kept referenced so that nothing closes them before the tab does. */
const heldReaders: ReadableStreamDefaultReader<Uint8Array>[] = [];

export const placementClient = {
  async complete(prompt: string, maxTokens: number) {
    const response = await post({ model: MODEL, prompt, max_tokens: maxTokens, temperature: 0 });
    return { status: response.status, body: await response.json() };
  },

  async stream(prompt: string, maxTokens: number) {
    const response = await post({ model: MODEL, prompt, max_tokens: maxTokens, temperature: 0, stream: true });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let reads = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      reads++;
      text += decoder.decode(value, { stream: true });
    }
    const data = events(text);
    const chunks = data.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    return {
      status: response.status,
      contentType: response.headers.get('content-type'),
      reads,
      texts: chunks.map((chunk) => chunk.choices[0]?.text ?? ''),
      finishReason: chunks.at(-1)?.choices[0]?.finish_reason ?? null,
      endsWithDone: data.at(-1) === '[DONE]',
    };
  },

  /** Aborts a long stream after its first event; the read after it fails with the abort. */
  async abortMidStream() {
    const controller = new AbortController();
    const { status, reader, first } = await startLongStream(controller.signal);
    controller.abort();
    let error = 'none';
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch (err) {
      error = (err as Error).name;
    }
    return { status, first, error };
  },

  /** Starts a long stream and keeps it open (for a tab closed mid-stream). */
  async holdLongStream() {
    const { status, reader, first } = await startLongStream();
    heldReaders.push(reader);
    return { status, first };
  },

  /** The official openai client, made as browser code makes it, streaming: its chunks' texts. */
  async openaiStream(prompt: string, maxTokens: number) {
    const client = new OpenAI({ baseURL: location.origin + '/v1', apiKey: 'unused', dangerouslyAllowBrowser: true });
    const stream = await client.completions.create({ model: MODEL, prompt, max_tokens: maxTokens, temperature: 0, stream: true });
    const texts: string[] = [];
    for await (const chunk of stream) texts.push(chunk.choices[0]?.text ?? '');
    let error: unknown = null;
    try {
      await client.completions.create({ model: MODEL, prompt, temperature: 5 });
    } catch (err) {
      error = err;
    }
    return { texts, errorStatus: (error as { status?: number } | null)?.status ?? null, errorParam: (error as { param?: string } | null)?.param ?? null };
  },

  /**
   * A chat through the openai client (streamed, with a ChatML template in the request: the model
   * has none), the prompt it ran (vLLM's /tokenize), and a completion of exactly that prompt.
   */
  async openaiChat(maxTokens: number) {
    const client = new OpenAI({ baseURL: location.origin + '/v1', apiKey: 'unused', dangerouslyAllowBrowser: true });
    const template = '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';
    const messages = [{ role: 'user' as const, content: 'Tell me a story.' }];
    const extra = { chat_template: template } as Record<string, unknown>;
    const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: maxTokens, temperature: 0, stream: true, ...extra });
    const texts: string[] = [];
    let finishReason: string | null = null;
    for await (const chunk of stream) {
      texts.push(chunk.choices[0]?.delta.content ?? '');
      finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
    }
    const tokenized = await (await fetch('/tokenize', { method: 'POST', body: JSON.stringify({ model: MODEL, messages, ...extra }) })).json();
    const completion = await client.completions.create({ model: MODEL, prompt: tokenized.tokens, max_tokens: maxTokens, temperature: 0 });
    return { texts, finishReason, completionText: completion.choices[0]!.text, promptTokens: tokenized.count as number };
  },

  /**
   * Structured output in this placement (XGrammar loads on first use, here): the openai client's
   * chat with a json_schema response_format, and a completion with vLLM's guided_choice, both
   * sampled at temperature 1 with a seed; before them, 120 grammars the grammar engine's own parser
   * refuses (each refusal used to leak part of its wasm stack, and about the 70th broke it for good).
   */
  async structured() {
    const refusals: Record<string, number> = {};
    for (let i = 0; i < 120; i++) {
      const response = await post({ model: MODEL, prompt: 'The cat was', max_tokens: 4, guided_grammar: `root ::= "a" | rule_${i}` });
      // A trap would be a 400 too, the engine restarted: counted apart.
      const restarted = /restarted/.test(((await response.json()) as { error?: { message?: string } }).error?.message ?? '');
      const outcome = `${response.status}${restarted ? ' restarted' : ''}`;
      refusals[outcome] = (refusals[outcome] ?? 0) + 1;
    }
    const client = new OpenAI({ baseURL: location.origin + '/v1', apiKey: 'unused', dangerouslyAllowBrowser: true });
    const template = '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';
    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['name', 'age'], additionalProperties: false };
    const chat = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Who is the hero?' }],
      max_tokens: 64,
      temperature: 1,
      seed: 7,
      response_format: { type: 'json_schema', json_schema: { name: 'hero', schema, strict: true } },
      ...({ chat_template: template } as Record<string, unknown>),
    });
    const choice = await client.completions.create({ model: MODEL, prompt: 'The cat was', max_tokens: 8, temperature: 1, seed: 7, ...({ guided_choice: ['happy', 'sad'] } as Record<string, unknown>) });
    return {
      refusals,
      chatContent: chat.choices[0]!.message.content,
      chatFinish: chat.choices[0]!.finish_reason,
      choiceText: choice.choices[0]!.text,
      choiceFinish: choice.choices[0]!.finish_reason,
    };
  },

  async badParameter() {
    const response = await post({ model: MODEL, prompt: 'Once upon a time', temperature: 5 });
    return { status: response.status, contentType: response.headers.get('content-type'), body: await response.json() };
  },
};

Object.assign(window, { placementClient });
