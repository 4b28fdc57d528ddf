// Streamed completions and the text of a choice (src/api/stream.ts) against a fake generator:
// server-sent events, stop strings (StopStringMatcher, against its rules written out plainly),
// ChoiceText, failures and aborts mid-stream.
import { describe, expect, it } from 'vitest';
import type { CompletionChunk } from '../../src/api/completions.ts';
import { handleApiRequest } from '../../src/api/handler.ts';
import { ChoiceText, StopStringMatcher } from '../../src/api/stream.ts';
import { mulberry32 } from '../helpers/prng.ts';
import { DEFAULT_STORY, FakeGenerator, fakeEngine, type FakeGeneratorOptions } from '../helpers/fake-generator.ts';
import { expectError, events, json, post, PROMPT, streamedText } from '../helpers/api-requests.ts';

describe('streaming', () => {
  async function stream(options: FakeGeneratorOptions, body: Record<string, unknown>) {
    const engine = fakeEngine(options);
    const r = await post(engine, { model: 'fake-llama', prompt: PROMPT, stream: true, ...body });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toContain('text/event-stream');
    return { engine, evs: await events(r) };
  }

  it('sends chunks, then [DONE]', async () => {
    const { evs } = await stream({}, { temperature: 0, max_tokens: 50 });
    expect(evs.at(-1)).toBe('[DONE]');
    const chunks = evs.slice(0, -1) as CompletionChunk[];
    expect(chunks.length).toBeGreaterThan(2);
    for (const [i, chunk] of chunks.entries()) {
      expect(Object.keys(chunk).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'service_tier']);
      expect(chunk.id).toBe(chunks[0]!.id);
      expect(chunk.id).toMatch(/^cmpl-/);
      expect(chunk.created).toBe(chunks[0]!.created);
      expect(chunk.object).toBe('text_completion');
      expect(chunk.model).toBe('fake-llama');
      expect(chunk.choices).toHaveLength(1);
      expect(chunk.choices[0]).toMatchObject({ index: 0, logprobs: null });
      expect(typeof chunk.choices[0]!.text).toBe('string');
      expect(chunk.choices[0]!.finish_reason).toBe(i === chunks.length - 1 ? 'stop' : null);
    }
    expect(streamedText(evs)).toBe(DEFAULT_STORY);
  });

  it('streams the same text as the one-body answer', async () => {
    const cases: [FakeGeneratorOptions, Record<string, unknown>][] = [
      [{}, { temperature: 0 }],
      [{}, { seed: 5, max_tokens: 30 }],
      [{}, { seed: 9, max_tokens: 30, stop: [' cat', ' the'] }],
      [{ script: ' Hello world STOP and' }, { stop: 'STOP' }],
      [{ script: ' a € b ✓ c' }, {}],
      [{ script: ' a € b' }, { stop: '€' }],
      [{ script: ' x'.repeat(30) }, { max_tokens: 10 }],
    ];
    for (const [options, body] of cases) {
      const engine = fakeEngine(options);
      const whole = json(await post(engine, { model: 'fake', prompt: PROMPT, ...body }));
      const { evs } = await stream(options, body);
      const last = evs.at(-2);
      expect(streamedText(evs), JSON.stringify(body)).toBe(whole.choices[0].text);
      expect(last.choices[0].finish_reason).toBe(whole.choices[0].finish_reason);
    }
  });

  it('adds a usage chunk with include_usage', async () => {
    const { evs } = await stream({}, { temperature: 0, max_tokens: 4, stream_options: { include_usage: true } });
    expect(evs.at(-1)).toBe('[DONE]');
    const usageChunk = evs.at(-2);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toEqual({ prompt_tokens: 5, completion_tokens: 4, total_tokens: 9, prompt_tokens_details: { cached_tokens: 0 } });
    expect(usageChunk.id).toBe(evs[0].id);
    for (const chunk of evs.slice(0, -2)) expect(chunk.usage).toBeNull();
    expect(evs.at(-3).choices[0].finish_reason).toBe('length');
  });

  it('sends no usage without include_usage', async () => {
    const { evs } = await stream({}, { temperature: 0, stream_options: { include_usage: false } });
    for (const chunk of evs.slice(0, -1)) {
      expect(chunk).not.toHaveProperty('usage');
      expect(chunk.choices).toHaveLength(1);
    }
  });

  it('never emits U+FFFD from a character split across byte tokens', async () => {
    const { evs } = await stream({ script: ' a €✓ b 😀' }, {});
    for (const e of evs.slice(0, -1)) expect(e.choices[0].text).not.toContain('\uFFFD');
    expect(streamedText(evs)).toBe(' a €✓ b 😀');
  });

  it('ends with a stop string, even when it spans several tokens, without leaking any of it', async () => {
    for (const stop of ['STOP', 'TOP', 'OP a', ' STOP', 'P and']) {
      const { engine, evs } = await stream({ script: ' Hello world STOP and more' }, { stop: [stop, 'never'] });
      const chunks = evs.slice(0, -1);
      const text = streamedText(evs);
      expect(text, stop).toBe(' Hello world STOP and more'.split(stop)[0]);
      expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');
      // No chunk ever carries a piece of the stop string past the cut.
      let sent = '';
      for (const c of chunks) {
        sent += c.choices[0].text;
        expect(text.startsWith(sent)).toBe(true);
      }
      // The generation was ended at the stop, not run to the end.
      expect(engine.generator.endings[0]!.how).toBe('returned');
    }
  });

  it('lets through text that only looked like the start of a stop string', async () => {
    const { evs } = await stream({ script: ' ST ST OP STO' }, { stop: ['STOP'] });
    expect(streamedText(evs)).toBe(' ST ST OP STO');
    expect(evs.at(-2).choices[0].finish_reason).toBe('stop'); // EOS
  });

  it('cuts at the earliest of several stop strings', async () => {
    const { evs } = await stream({ script: ' cat dog mat' }, { stop: ['mat', 'dog'] });
    expect(streamedText(evs)).toBe(' cat ');
  });

  it('turns a failure after the first chunk into an error event, then [DONE]', async () => {
    const { evs } = await stream({ failAfter: 3 }, { temperature: 0 });
    expect(evs.at(-1)).toBe('[DONE]');
    const error = evs.at(-2);
    expect(error.error).toMatchObject({ type: 'server_error', param: null });
    expect(error.error.message).toContain('fake GPU failure');
    expect(streamedText(evs.slice(0, -2))).toBe(' there was a');
  });

  it('answers an AbortError the client did not cause (a lost GPU device) with a 500 that onError sees, not a 499', async () => {
    const logged: unknown[] = [];
    const options = { onError: (e: unknown) => logged.push(e) };
    const engine = fakeEngine({ failAfter: 2, failAsAbort: true });
    const request = (body: Record<string, unknown>) =>
      handleApiRequest(engine, { method: 'POST', url: '/v1/completions', body: JSON.stringify({ model: 'fake', prompt: PROMPT, ...body }) }, options);
    const whole = await expectError(request({}), 500, null);
    expect(whole.type).toBe('server_error');
    expect(whole.message).toMatch(/device is lost/);
    const streamed = await request({ stream: true });
    expect(streamed.status).toBe(200);
    const events: string[] = [];
    for await (const e of streamed.body as AsyncIterable<string>) events.push(e);
    expect(JSON.parse(events.at(-2)!.slice('data: '.length)).error).toMatchObject({ type: 'server_error' });
    expect(logged).toHaveLength(2);
  });

  it('answers a failure before the first chunk with a 500 that clients should not retry', async () => {
    const engine = fakeEngine({ failAfter: 0 });
    const response = post(engine, { model: 'fake', prompt: PROMPT, stream: true });
    expect((await response).headers['x-should-retry']).toBe('false'); // it would fail the same way again
    const error = await expectError(response, 500, null);
    expect(error.type).toBe('server_error');
  });

  it('ends the generation when the reader stops early', async () => {
    const engine = fakeEngine({ script: ' a'.repeat(40) });
    const r = await post(engine, { model: 'fake', prompt: PROMPT, stream: true, max_tokens: 40 });
    for await (const piece of r.body as AsyncIterable<string>) {
      expect(piece).toMatch(/^data: /);
      break;
    }
    expect(engine.generator.endings).toEqual([expect.objectContaining({ how: 'returned' })]);
    expect(engine.generator.active).toBe(0);
  });

  it('ends silently when aborted', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(40) });
    const controller = new AbortController();
    const r = await post(engine, { model: 'fake', prompt: PROMPT, stream: true, max_tokens: 40 }, undefined, controller.signal);
    const got: string[] = [];
    for await (const piece of r.body as AsyncIterable<string>) {
      got.push(piece);
      if (got.length === 2) controller.abort();
    }
    expect(got.length).toBeLessThan(5);
    expect(got.join('')).not.toContain('error');
    expect(got.join('')).not.toContain('[DONE]');
    // Aborted inside the generator, or ended by the loop that saw the abort first.
    expect(['aborted', 'returned']).toContain(engine.generator.endings[0]!.how);
    expect(engine.generator.endings[0]!.tokens).toBeLessThan(10);
    expect(engine.generator.active).toBe(0);
  });
});

describe('StopStringMatcher', () => {
  it('holds back possible starts of stop strings', () => {
    const m = new StopStringMatcher(['abc', 'xyz']);
    expect(m.push('12a')).toEqual({ text: '12', stopped: false });
    expect(m.push('b')).toEqual({ text: '', stopped: false });
    expect(m.push('d')).toEqual({ text: 'abd', stopped: false });
    expect(m.push('x')).toEqual({ text: '', stopped: false });
    expect(m.push('yab')).toEqual({ text: 'xy', stopped: false });
    expect(m.flush()).toBe('ab');
  });

  it('stops before the stop string', () => {
    const m = new StopStringMatcher(['abc']);
    expect(m.push('12ab')).toEqual({ text: '12', stopped: false });
    expect(m.push('c34')).toEqual({ text: '', stopped: true });
    expect(m.stopped).toBe(true);
    expect(m.push('more')).toEqual({ text: '', stopped: true });
    expect(m.flush()).toBe('');
  });

  it('passes everything through without stop strings', () => {
    const m = new StopStringMatcher([]);
    expect(m.push('abc')).toEqual({ text: 'abc', stopped: false });
  });
});

/** The matcher's rules written out plainly (indexOf and endsWith over the held-back text at every piece). */
class NaiveStopMatcher {
  private pending = '';
  private done = false;
  armed = true;
  constructor(private readonly stops: string[], private readonly includeStop: boolean) {}
  push(text: string): { text: string; stopped: boolean } {
    if (this.done) return { text: '', stopped: true };
    this.pending += text;
    if (this.armed) {
      let first = -1;
      let firstStop = '';
      for (const stop of this.stops) {
        const at = this.pending.indexOf(stop);
        if (at >= 0 && (first < 0 || at < first || (at === first && stop.length > firstStop.length))) [first, firstStop] = [at, stop];
      }
      if (first >= 0) {
        this.done = true;
        return { text: this.pending.slice(0, this.includeStop ? first + firstStop.length : first), stopped: true };
      }
    }
    let longest = 0;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, this.pending.length); k > longest; k--) if (this.pending.endsWith(stop.slice(0, k))) longest = k;
    }
    const out = this.pending.slice(0, this.pending.length - longest);
    this.pending = this.pending.slice(this.pending.length - longest);
    return { text: out, stopped: false };
  }
}

describe('StopStringMatcher against the rules written out plainly', () => {
  it('random texts over a small alphabet, random stops, pieces and arming: the same output', () => {
    const rand = mulberry32(11);
    const word = (max: number) => Array.from({ length: 1 + Math.floor(rand() * max) }, () => 'ab'[Math.floor(rand() * 2)] + (rand() < 0.1 ? 'c' : '')).join('');
    for (let trial = 0; trial < 400; trial++) {
      const stops = Array.from({ length: 1 + Math.floor(rand() * 3) }, () => word(5));
      const includeStop = rand() < 0.5;
      const fast = new StopStringMatcher(stops, { includeStop });
      const naive = new NaiveStopMatcher(stops, includeStop);
      const armAt = Math.floor(rand() * 6);
      for (let piece = 0; piece < 12; piece++) {
        fast.armed = naive.armed = piece >= armAt;
        const text = word(4);
        expect(fast.push(text), `stops ${JSON.stringify(stops)}, piece ${piece}`).toEqual(naive.push(text));
      }
    }
  });
});

describe('StopStringMatcher options', () => {
  it('keeps the stop string with includeStop, and picks the longest of those starting first', () => {
    const m = new StopStringMatcher(['ab', 'abc'], { includeStop: true });
    expect(m.push('xxa')).toEqual({ text: 'xx', stopped: false });
    expect(m.push('bcd')).toEqual({ text: 'abc', stopped: true });
    const first = new StopStringMatcher(['ab', 'abc'], { includeStop: true });
    expect(first.push('xxab')).toEqual({ text: 'xxab', stopped: true });
  });

  it('does not stop while not armed, but still holds back starts of a stop string', () => {
    const m = new StopStringMatcher(['STOP']);
    m.armed = false;
    expect(m.push('a STOP b ST')).toEqual({ text: 'a STOP b ', stopped: false });
    m.armed = true;
    expect(m.push('OP c')).toEqual({ text: '', stopped: true });
  });
});

describe('ChoiceText', () => {
  const tokenizer = new FakeGenerator().tokenizer;
  const prompt = tokenizer.encode(PROMPT);
  const token = (piece: string | number) => ({ id: tokenizer.id(piece), logprob: -1 });

  it('looks for stop strings only once min_tokens tokens were generated', () => {
    const choice = new ChoiceText(tokenizer, prompt, { stop: ['ST'], includeStop: false, skipSpecialTokens: true, minTokens: 3, logprobs: null, textOffset: 0 });
    expect(choice.push(token('▁a'))).toEqual({ piece: { text: ' a', entries: [] }, stopped: false });
    expect(choice.push(token('ST'))).toEqual({ piece: { text: 'ST', entries: [] }, stopped: false });
    // The third token arms the stop strings: 'S' 'T' completes one now.
    expect(choice.push(token('S')).stopped).toBe(false);
    expect(choice.push(token('T'))).toEqual({ piece: { text: '', entries: [] }, stopped: true });
  });

  it('counts offsets from the echo', () => {
    const choice = new ChoiceText(tokenizer, prompt, { stop: [], includeStop: false, skipSpecialTokens: true, minTokens: 0, logprobs: 0, textOffset: 16 });
    expect(choice.push(token('▁there')).piece.entries).toEqual([{ token: ' there', logprob: -1, top: { ' there': -1 }, offset: 16, id: tokenizer.id('▁there'), alternatives: [] }]);
    expect(choice.push(token('▁was')).piece.entries[0]!.offset).toBe(22);
    expect(choice.finish()).toEqual({ text: '', entries: [] });
  });
});
