// The chat requests scripts/soak-memory.ts sends, phase by phase, seeded: plain conversations,
// tool-call requests with tools never seen before, structured requests with schemas, regexes,
// choices and grammars never seen before, and a hostile mix (test/helpers/hostile-bodies.ts, plus
// chat templates never seen before). Every request asks for a few tokens at most; some stream,
// and some of those the client leaves mid-stream.
import { CHATML } from '../test/helpers/chat-fakes.ts';
import { hostileBody, int, pick, type Random } from '../test/helpers/hostile-bodies.ts';

export const PHASES = ['plain', 'tools', 'structured', 'hostile'] as const;
export type Phase = (typeof PHASES)[number];

export interface SoakRequest {
  url: string;
  /** The body as sent (hostile ones are not always JSON). */
  body: string;
  /** The client closes the connection after the first bytes of the answer. */
  disconnect: boolean;
}

type Json = Record<string, unknown>;

const SYLLABLES = ['ka', 'lo', 'mi', 'ner', 'ta', 'vis', 'qu', 'ze', 'pha', 'dro', 'ul', 'sen', 'bri', 'go', 'xa', 'rin', 'te', 'mo'];
const OTHER_SYLLABLES = ['é', 'ñu', 'ß', '中', '語', 'дa', '🙂'];

/** An ASCII word of 1-4 syllables (a name); words repeat across requests, and new ones keep coming. */
function name(rand: Random): string {
  let w = '';
  for (let n = int(rand, 1, 4); n > 0; n--) w += pick(rand, SYLLABLES);
  return w;
}

/** A word of text, now and then with characters beyond ASCII. */
function word(rand: Random): string {
  return rand() < 0.05 ? name(rand) + pick(rand, OTHER_SYLLABLES) : name(rand);
}

function sentence(rand: Random, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(rand() < 0.002 ? word(rand).repeat(80) : word(rand)); // now and then one word of hundreds of characters
  return out.join(' ');
}

/** What every request shares: a few tokens, sometimes streamed (and sometimes left mid-stream), sampling options. */
function commonParams(rand: Random): { params: Json; disconnect: boolean } {
  const stream = rand() < 0.35;
  const params: Json = { model: 'soak', max_tokens: int(rand, 1, 6) };
  if (stream) params.stream = true;
  if (stream && rand() < 0.5) params.stream_options = { include_usage: true };
  if (rand() < 0.4) Object.assign(params, { temperature: Math.round(rand() * 150) / 100, seed: int(rand, 0, 1e6) });
  if (rand() < 0.15) Object.assign(params, { logprobs: true, top_logprobs: int(rand, 0, 5) });
  if (rand() < 0.1) params.n = 2;
  if (rand() < 0.1) params.stop = [word(rand), '.'];
  if (rand() < 0.05) params.cache_prompt = false;
  return { params, disconnect: rand() < (stream ? 0.3 : 0.05) };
}

/** Conversations that go on: a later request may continue one (its prefix is cached). */
const conversations: Json[][] = [];

function conversation(rand: Random): Json[] {
  if (conversations.length > 0 && rand() < 0.3) {
    const earlier = pick(rand, conversations);
    const next = [...earlier, { role: 'assistant', content: sentence(rand, int(rand, 1, 12)) }, { role: 'user', content: sentence(rand, int(rand, 1, 16)) }];
    if (next.length < 16) conversations[conversations.indexOf(earlier)] = next;
    return next;
  }
  const messages: Json[] = [];
  if (rand() < 0.5) messages.push({ role: 'system', content: sentence(rand, int(rand, 2, 20)) });
  for (let turn = int(rand, 0, 2); turn > 0; turn--) {
    messages.push({ role: 'user', content: sentence(rand, int(rand, 1, 20)) }, { role: 'assistant', content: sentence(rand, int(rand, 1, 16)) });
  }
  messages.push({ role: 'user', content: rand() < 0.2 ? [{ type: 'text', text: sentence(rand, int(rand, 1, 30)) }] : sentence(rand, int(rand, 1, 40)) });
  if (conversations.length < 16) conversations.push(messages);
  else conversations[int(rand, 0, 15)] = messages;
  return messages;
}

const chat = (params: Json, extra: Json, disconnect: boolean): SoakRequest => ({ url: '/v1/chat/completions', body: JSON.stringify({ ...params, ...extra }), disconnect });

function plainRequest(rand: Random): SoakRequest {
  const { params, disconnect } = commonParams(rand);
  return chat(params, { messages: conversation(rand) }, disconnect);
}

/** A JSON schema never seen before: `i` names its properties. */
function freshSchema(rand: Random, i: number): Json {
  const properties: Json = {};
  const kinds = [{ type: 'string' }, { type: 'integer' }, { type: 'boolean' }, { type: 'number' }, { enum: [`e${i}`, 'b', 3] }, { type: 'array', items: { type: 'integer' }, maxItems: 3 }];
  for (let k = int(rand, 1, 4); k > 0; k--) properties[`${name(rand)}_${i}_${k}`] = pick(rand, kinds);
  const names = Object.keys(properties);
  return { type: 'object', properties, required: names.slice(0, int(rand, 0, names.length)) };
}

function toolsRequest(rand: Random, i: number): SoakRequest {
  const { params, disconnect } = commonParams(rand);
  const tools = Array.from({ length: int(rand, 1, 3) }, (_, k) => ({
    type: 'function',
    function: { name: `${name(rand)}_${i}_${k}`, description: sentence(rand, int(rand, 2, 8)), parameters: freshSchema(rand, i) },
  }));
  const named = pick(rand, tools).function.name;
  const toolChoice = pick<unknown>(rand, ['auto', 'auto', 'required', 'required', { type: 'function', function: { name: named } }, 'none']);
  const messages = conversation(rand);
  if (rand() < 0.3) {
    const id = `call_${i}`;
    messages.splice(messages.length - 1, 0,
      { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: named, arguments: JSON.stringify({ q: word(rand) }) } }] },
      { role: 'tool', tool_call_id: id, content: sentence(rand, int(rand, 1, 20)) });
  }
  return chat(params, { messages, tools, tool_choice: toolChoice, ...(rand() < 0.3 ? { parallel_tool_calls: false } : {}) }, disconnect);
}

function structuredRequest(rand: Random, i: number): SoakRequest {
  const { params, disconnect } = commonParams(rand);
  const messages = conversation(rand);
  const structure = pick<() => Json>(rand, [
    () => ({ response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema: freshSchema(rand, i) } } }),
    () => ({ guided_json: freshSchema(rand, i) }),
    () => ({ structured_outputs: { json: freshSchema(rand, i) } }),
    () => ({ response_format: { type: 'json_object' } }),
    () => ({ guided_regex: `${name(rand)}${i}-[a-z]{1,${int(rand, 2, 6)}}` }),
    () => ({ guided_choice: Array.from({ length: int(rand, 2, 6) }, (_, k) => `${word(rand)} ${i} ${k}`) }),
    () => ({ guided_grammar: `root ::= "${name(rand)}${i}" ("," [0-9]){0,${int(rand, 1, 4)}}` }),
  ])();
  return chat(params, { messages, ...structure }, disconnect);
}

/** A chat template never seen before, as long as the render limits allow, of ~10k small nodes. */
function wideTemplate(rand: Random, i: number): string {
  const parts = [CHATML];
  for (let k = 0; parts.join('').length < 200_000; k++) parts.push(`{% if false %}{{ v${i}_${k} ~ "${name(rand)}" }}{% endif %}`);
  return parts.join('');
}

function hostileRequest(rand: Random, i: number): SoakRequest {
  const roll = rand();
  if (roll < 0.1) {
    const { params, disconnect } = commonParams(rand);
    return chat(params, { messages: conversation(rand), chat_template: wideTemplate(rand, i) }, disconnect);
  }
  const url = roll < 0.15 ? '/tokenize' : '/v1/chat/completions';
  const { text } = hostileBody(rand, url);
  // The bodies name the model 'fake' (the soak's model answers to it too).
  return { url, body: text, disconnect: text.includes('"stream":true') && rand() < 0.3 };
}

/** The request number `i` of a phase. */
export function soakRequest(phase: Phase, rand: Random, i: number): SoakRequest {
  switch (phase) {
    case 'plain':
      return plainRequest(rand);
    case 'tools':
      return toolsRequest(rand, i);
    case 'structured':
      return structuredRequest(rand, i);
    case 'hostile':
      return hostileRequest(rand, i);
  }
}
