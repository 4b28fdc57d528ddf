// Completions (src/api/completions.ts) against a fake generator: the response, the sampling
// parameters handed to the generator, sessions and their sequences (n, best_of, batches of
// prompts), logprobs and echo. The contract as seen from outside (every parameter, over HTTP) is
// the conformance suite, test/conformance/.
import { describe, expect, it } from 'vitest';
import { createCompletion, type CompletionChunk, type CompletionResponse } from '../../src/api/completions.ts';
import { finiteLogprob, topLogprobsObject } from '../../src/api/logprobs.ts';
import { DEFAULT_STORY, EOS, fakeEngine } from '../helpers/fake-generator.ts';
import { expectError, events, json, post, PROMPT, type Json } from '../helpers/api-requests.ts';

describe('completions', () => {
  it('answers in the OpenAI shape with consistent usage', async () => {
    const engine = fakeEngine();
    const r = await post(engine, { model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 50 });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toContain('application/json');
    const body = json(r) as CompletionResponse;
    expect(body.id).toMatch(/^cmpl-[A-Za-z0-9]{24}$/);
    expect(body.object).toBe('text_completion');
    expect(Number.isInteger(body.created)).toBe(true);
    expect(Math.abs(body.created - Date.now() / 1000)).toBeLessThan(10);
    expect(body.model).toBe('fake-llama');
    expect(body.service_tier).toBe('default');
    expect(body.choices).toEqual([{ text: DEFAULT_STORY, index: 0, logprobs: null, finish_reason: 'stop' }]);
    const promptTokens = engine.generator.tokenizer.encode(PROMPT).length;
    const storyTokens = engine.generator.tokenizer.encodePieces(DEFAULT_STORY).length;
    expect(body.usage).toEqual({ prompt_tokens: promptTokens, completion_tokens: storyTokens, total_tokens: promptTokens + storyTokens, prompt_tokens_details: { cached_tokens: 0 } });
  });

  it('hands the generator the tokens, budget, sampling and stop ids', async () => {
    const { generator } = fakeEngine();
    await createCompletion(generator, { model: 'fake-llama', prompt: PROMPT, temperature: 0.7, top_p: 0.9, seed: 3, max_tokens: 7 });
    expect(generator.sessions).toHaveLength(1);
    const session = generator.sessions[0]!;
    expect(session.promptTokens).toEqual(generator.tokenizer.encode(PROMPT));
    expect(session.promptTokens[0]).toBe(1); // BOS
    expect(session.sampling).toEqual({
      temperature: 0.7,
      topP: 0.9,
      seed: 3,
      topK: 0,
      minP: 0,
      repetitionPenalty: 1,
      presencePenalty: 0,
      frequencyPenalty: 0,
    });
    expect(session.logprobs).toBeUndefined();
    expect(session.promptLogprobs).toBeUndefined();
    expect(generator.sequences.map((s) => s.options)).toEqual([{ index: 0, maxTokens: 7, stopTokenIds: [EOS] }]);
  });

  it('maps every sampling parameter, from the top level and from extra_body', async () => {
    const { generator } = fakeEngine();
    await createCompletion(generator, {
      model: 'fake',
      prompt: PROMPT,
      temperature: 0.5,
      presence_penalty: 0.25,
      frequency_penalty: -0.5,
      logit_bias: { '7': -100, '300': 3.5 },
      top_k: 40,
      extra_body: { min_p: 0.05, repetition_penalty: 1.2, min_tokens: 2, stop_token_ids: [300, 2], ignore_eos: false },
      max_tokens: 5,
    });
    expect(generator.sessions[0]!.sampling).toEqual({
      temperature: 0.5,
      topP: 1,
      topK: 40,
      minP: 0.05,
      repetitionPenalty: 1.2,
      presencePenalty: 0.25,
      frequencyPenalty: -0.5,
      logitBias: new Map([
        [7, -100],
        [300, 3.5],
      ]),
    });
    expect(generator.sequences[0]!.options).toEqual({ index: 0, maxTokens: 5, stopTokenIds: [EOS, 300], minTokens: 2 });
    // ignore_eos drops EOS from the stop ids; top_k -1 is "off", as 0.
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, ignore_eos: true, top_k: -1, stop_token_ids: [300], max_tokens: 2 });
    expect(generator.sessions[1]!.sampling.topK).toBe(0);
    expect(generator.sequences[1]!.options.stopTokenIds).toEqual([300]);
  });

  it('stops at max_tokens with finish_reason length', async () => {
    const engine = fakeEngine();
    const body = json(await post(engine, { model: 'fake-llama', prompt: PROMPT, temperature: 0, max_tokens: 3 }));
    expect(body.choices[0].text).toBe(' there was a');
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage.completion_tokens).toBe(3);
  });

  it('max_tokens 0 generates nothing', async () => {
    const engine = fakeEngine();
    const body = json(await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 0 }));
    expect(body.choices[0]).toMatchObject({ text: '', finish_reason: 'length' });
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 0, total_tokens: 5, prompt_tokens_details: { cached_tokens: 0 } });
  });

  it('max_tokens null runs until the context is full', async () => {
    const engine = fakeEngine({ contextLength: 12, script: 'a'.repeat(100) });
    const body = json(await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: null }));
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage).toEqual({ prompt_tokens: 5, completion_tokens: 7, total_tokens: 12, prompt_tokens_details: { cached_tokens: 0 } });
    expect(body.choices[0].text).toBe('a'.repeat(7));
  });

  it('keeps the space of the first word after the prompt (SentencePiece prefix)', async () => {
    const engine = fakeEngine({ script: ' there was' });
    expect(json(await post(engine, { model: 'fake-llama', prompt: PROMPT })).choices[0].text).toBe(' there was');
    // With only BOS before it, the first word's space is dropped, as decoding the whole sequence does.
    expect(json(await post(engine, { model: 'fake-llama', prompt: '' })).choices[0].text).toBe('there was');
  });

  it("checks ids against the smaller of the tokenizer's and the model's vocabularies: 400, not the engine's 500", async () => {
    // A checkpoint whose tokenizer.json has added tokens past config.json's vocab_size.
    const engine = fakeEngine();
    const V = engine.generator.tokenizer.vocabSize;
    const modelVocab = 100;
    expect(V).toBeGreaterThan(modelVocab);
    (engine.generator.info as { vocabSize: number }).vocabSize = modelVocab;
    await expectError(post(engine, { model: 'fake-llama', prompt: [1, modelVocab] }), 400, 'prompt', 'invalid_value');
    await expectError(post(engine, { model: 'fake-llama', prompt: [1, 5], logit_bias: { [modelVocab]: 1 } }), 400, 'logit_bias');
    const fromText = await expectError(post(engine, { model: 'fake-llama', prompt: PROMPT }), 400, 'prompt', 'invalid_value');
    expect(fromText.message).toMatch(/prompt's text/);
    expect((await post(engine, { model: 'fake-llama', prompt: [1, modelVocab - 1], max_tokens: 0 })).status).toBe(200);
  });

  it('keeps only the most likely token with top_p 0, whatever the temperature and seed', async () => {
    const engine = fakeEngine();
    const text = async (extra: Record<string, unknown>) =>
      json(await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 20, ...extra })).choices[0].text as string;
    const greedy = await text({ temperature: 0 });
    for (const seed of [1, 2, 3]) expect(await text({ temperature: 2, top_p: 0, seed })).toBe(greedy);
    expect(await text({ temperature: 2, seed: 1 })).not.toBe(greedy); // the seeds above would have mattered
  });

  it('is deterministic per seed', async () => {
    const engine = fakeEngine();
    const text = async (seed: number) =>
      json(await post(engine, { model: 'fake-llama', prompt: PROMPT, seed, max_tokens: 20 })).choices[0].text as string;
    expect(await text(1)).toBe(await text(1));
    expect(await text(1)).not.toBe(await text(2));
  });

  it('gives every response, errors included, a request id of its own', async () => {
    const engine = fakeEngine();
    const responses = [
      await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 2 }),
      await post(engine, { model: 'fake-llama', prompt: PROMPT, max_tokens: 2, stream: true }),
      await post(engine, { model: 'nope', prompt: PROMPT }),
    ];
    const ids = responses.map((r) => r.headers['x-request-id']);
    for (const id of ids) expect(id).toMatch(/^req_[A-Za-z0-9]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('starts an empty prompt from a new document: BOS, else EOS, else a 400', async () => {
    const engine = fakeEngine({ addBos: false, script: 'there was' });
    const body = json(await post(engine, { model: 'fake-llama', prompt: '', echo: true, logprobs: 0 }));
    expect(body.usage.prompt_tokens).toBe(1);
    expect(body.choices[0].text).toBe('there was'); // the EOS that starts the document prints nothing
    expect(body.choices[0].logprobs.tokens[0]).toBe('');
    expect(engine.generator.sessions.at(-1)?.promptTokens).toEqual([engine.generator.tokenizer.eosIds[0]]);
    (engine.generator.tokenizer as { eosIds: readonly number[] }).eosIds = [];
    const err = await expectError(post(engine, { model: 'fake-llama', prompt: '' }), 400, 'prompt', 'invalid_value');
    expect(err.message).toMatch(/no BOS or EOS/);
  });

  it('ends the generation when aborted', async () => {
    const { generator } = fakeEngine({ delayMs: 5, script: 'a'.repeat(40) });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    const err = await createCompletion(generator, { model: 'fake', prompt: PROMPT, max_tokens: 40 }, { signal: controller.signal }).catch((e: unknown) => e);
    expect((err as Error).name).toBe('AbortError');
    expect(generator.endings).toEqual([expect.objectContaining({ how: 'aborted' })]);
    expect(generator.endings[0]!.tokens).toBeLessThan(40);
  });
});

describe('sessions', () => {
  it('runs the n sequences of a prompt in ONE session, at once (rows of the batch), indexes 0..n-1', async () => {
    const { generator } = fakeEngine();
    const r = (await createCompletion(generator, { model: 'fake', prompt: PROMPT, n: 3, seed: 1, max_tokens: 4 })) as CompletionResponse;
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(generator.sessions).toHaveLength(1);
    expect(generator.sessions[0]!.sequences).toBe(3);
    expect(generator.sequences.map((s) => s.options.index)).toEqual([0, 1, 2]);
    expect(generator.events.map((e) => e.kind)).toEqual(['open', 'start', 'start', 'start', 'end', 'end', 'end', 'close']);
  });

  it('opens one session per prompt of a batch, in order; best_of candidates share it', async () => {
    const { generator } = fakeEngine();
    const r = (await createCompletion(generator, { model: 'fake', prompt: ['a', 'b'], n: 1, best_of: 3, max_tokens: 2 })) as CompletionResponse;
    expect(r.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(generator.sessions.map((s) => s.promptTokens)).toEqual([generator.tokenizer.encode('a'), generator.tokenizer.encode('b')]);
    expect(generator.sequences.map((s) => s.options.index)).toEqual([0, 1, 2, 0, 1, 2]);
    expect(generator.active).toBe(0);
  });

  it('asks for logprobs and prompt logprobs only when needed; no session for nothing to do', async () => {
    const { generator } = fakeEngine();
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, logprobs: 3, max_tokens: 1 });
    expect(generator.sessions.at(-1)).toMatchObject({ logprobs: 3 });
    expect(generator.sessions.at(-1)!.promptLogprobs).toBeUndefined();
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, echo: true, max_tokens: 1 });
    expect(generator.sessions.at(-1)!.promptLogprobs).toBeUndefined();
    expect(generator.sessions.at(-1)!.logprobs).toBeUndefined();
    await createCompletion(generator, { model: 'fake', prompt: PROMPT, echo: true, logprobs: 0, max_tokens: 0 });
    expect(generator.sessions.at(-1)).toMatchObject({ logprobs: 0, promptLogprobs: true });
    expect(generator.sequences).toHaveLength(2); // max_tokens 0 decodes nothing
    const before = generator.sessions.length;
    const r = (await createCompletion(generator, { model: 'fake', prompt: PROMPT, echo: true, max_tokens: 0, n: 2 })) as CompletionResponse;
    expect(r.choices.map((c) => c.text)).toEqual([PROMPT, PROMPT]);
    expect(generator.sessions.length).toBe(before);
  });

  it('ends a sequence at a stop string and goes on with the next one in the same session', async () => {
    const { generator } = fakeEngine({ script: ' Hello world STOP and more' });
    const r = (await createCompletion(generator, { model: 'fake', prompt: PROMPT, n: 2, stop: 'STOP', max_tokens: 20 })) as CompletionResponse;
    expect(r.choices.map((c) => [c.text, c.finish_reason])).toEqual([
      [' Hello world ', 'stop'],
      [' Hello world ', 'stop'],
    ]);
    expect(generator.endings.map((e) => e.how)).toEqual(['returned', 'returned']);
    expect(generator.active).toBe(0);
  });

  it('closes the session on a failure, an abort and a reader that stops early', async () => {
    const failing = fakeEngine({ failAfter: 2 }).generator;
    await expect(createCompletion(failing, { model: 'fake', prompt: PROMPT, n: 2 })).rejects.toThrow('fake GPU failure');
    expect(failing.active).toBe(0);

    const slow = fakeEngine({ delayMs: 5, script: ' a'.repeat(40) }).generator;
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 25);
    await expect(createCompletion(slow, { model: 'fake', prompt: PROMPT, n: 3, max_tokens: 40 }, { signal: controller.signal })).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(slow.active).toBe(0);
    // The three decoded at once; the abort ended every one.
    expect(slow.sequences).toHaveLength(3);
    expect(slow.endings.map((e) => e.how)).toEqual(['aborted', 'aborted', 'aborted']);

    const streamed = fakeEngine({ script: ' a'.repeat(40) }).generator;
    const chunks = (await createCompletion(streamed, { model: 'fake', prompt: PROMPT, n: 2, max_tokens: 40, stream: true })) as AsyncIterable<CompletionChunk>;
    for await (const _ of chunks) break;
    expect(streamed.active).toBe(0);
  });

  it('answers a full queue with 429 (rate_limit_exceeded, retry-after)', async () => {
    const engine = fakeEngine({ delayMs: 5, script: ' a'.repeat(10), maxQueued: 1 });
    const body = { model: 'fake', prompt: PROMPT, max_tokens: 10 };
    const responses = await Promise.all([post(engine, body), post(engine, body), post(engine, body), post(engine, { ...body, stream: true })]);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 429, 429]);
    const error = await expectError(Promise.resolve(responses[2]!), 429, null, 'rate_limit_exceeded');
    expect(error.type).toBe('rate_limit_error');
    expect(responses[2]!.headers['retry-after']).toBe('1');
    // The queue drains; the next request is served.
    expect((await post(engine, body)).status).toBe(200);
  });
});

describe('logprobs and echo', () => {
  it('gives a character spelled by byte tokens to the token that completes it', async () => {
    const engine = fakeEngine({ script: ' a €' }); // ▁a ▁ <E2> <82> <AC>
    const body = json(await post(engine, { model: 'fake', prompt: PROMPT, logprobs: 0 }));
    const lp = body.choices[0].logprobs;
    expect(body.choices[0].text).toBe(' a €');
    expect(lp.tokens).toEqual([' a', ' ', '', '', '€']);
    expect(lp.text_offset).toEqual([0, 2, 3, 3, 3]);
    expect(lp.top_logprobs.map((t: Json) => Object.keys(t))).toEqual([[' a'], [' '], [''], [''], ['€']]);
  });

  it('shows a byte that never completes a character as U+FFFD, as the text does', async () => {
    const engine = fakeEngine();
    const t = engine.generator.tokenizer;
    const scripted = fakeEngine({ script: [t.id('▁a'), t.id(0xe2)] });
    const body = json(await post(scripted, { model: 'fake', prompt: PROMPT, logprobs: 1, max_tokens: 2 }));
    expect(body.choices[0].text).toBe(' a\uFFFD');
    expect(body.choices[0].logprobs.tokens).toEqual([' a', '\uFFFD']);
  });

  it('keys alternatives by the text they would add; special tokens by their own text', async () => {
    // After the script, EOS is by far the most likely; banned by logit_bias, the runner-up is sampled.
    const engine = fakeEngine({ script: ' a' });
    const body = json(await post(engine, { model: 'fake', prompt: PROMPT, logprobs: 2, max_tokens: 2, logit_bias: { [EOS]: -100 } }));
    const top = body.choices[0].logprobs.top_logprobs[1];
    expect(Object.keys(top)[0]).toBe('</s>');
    expect(Object.keys(top)).toContain(body.choices[0].logprobs.tokens[1]);
    const raw = engine.generator.logits([...engine.generator.tokenizer.encode(PROMPT), engine.generator.tokenizer.id('▁a')], engine.generator.script({} as never));
    expect(top['</s>']).toBeCloseTo(raw[EOS]! - Math.log(raw.reduce((s, v) => s + Math.exp(v), 0)), 9);
  });

  it('builds top_logprobs objects: k alternatives, the sampled one always, collisions resolved', () => {
    const textOf = (id: number) => ['a', 'b', 'a', 'c'][id]!;
    expect(topLogprobsObject({ id: 3, logprob: -5 }, 'c', [{ id: 0, logprob: -1 }, { id: 1, logprob: -2 }], 2, textOf)).toEqual({ a: -1, b: -2, c: -5 });
    // The sampled token's value wins a shared key; otherwise the more likely one's.
    expect(topLogprobsObject({ id: 2, logprob: -3 }, 'a', [{ id: 0, logprob: -1 }, { id: 2, logprob: -3 }], 2, textOf)).toEqual({ a: -3 });
    expect(topLogprobsObject({ id: 1, logprob: -2 }, 'b', [{ id: 0, logprob: -1 }, { id: 2, logprob: -3 }], 2, textOf)).toEqual({ a: -1, b: -2 });
    // k = 0: the sampled token alone.
    expect(topLogprobsObject({ id: 1, logprob: -2 }, 'b', [{ id: 0, logprob: -1 }], 0, textOf)).toEqual({ b: -2 });
    // '__proto__' is a plain key.
    expect(Object.keys(topLogprobsObject({ id: 1, logprob: -2 }, '__proto__', [], 0, textOf))).toEqual(['__proto__']);
    expect(finiteLogprob(-Infinity)).toBe(-9999);
    expect(finiteLogprob(-1.5)).toBe(-1.5);
  });

  it('streams each token’s logprobs with the chunk that carries its text; held-back tokens come last', async () => {
    const engine = fakeEngine({ script: ' Hello world STOP and more' });
    const r = await post(engine, { model: 'fake', prompt: PROMPT, logprobs: 0, stop: 'STOP', stream: true });
    const chunks = (await events(r)).slice(0, -1);
    for (const chunk of chunks.slice(0, -1)) expect(chunk.choices[0].logprobs.tokens.join('')).toBe(chunk.choices[0].text);
    const last = chunks.at(-1).choices[0];
    expect(last.finish_reason).toBe('stop');
    // 'ST' and 'OP' were generated (and counted) but cut: their entries come with the last chunk, past the text.
    expect(last.logprobs.tokens.slice(-2)).toEqual(['ST', 'OP']);
    const text = chunks.map((c: Json) => c.choices[0].text).join('');
    expect(text).toBe(' Hello world ');
    expect(last.logprobs.text_offset.slice(-2)).toEqual([13, 15]);
  });

  it('echoes the prompt as given; with logprobs, as decoded (so offsets hold)', async () => {
    const engine = fakeEngine({ script: ' x' });
    const prompt = 'a<s>b'; // '<s>' is parsed as BOS, which decodes to nothing
    const plain = json(await post(engine, { model: 'fake', prompt, echo: true, max_tokens: 2 }));
    expect(plain.choices[0].text).toBe('a<s>b x');
    const scored = json(await post(engine, { model: 'fake', prompt, echo: true, logprobs: 1, max_tokens: 2 }));
    const lp = scored.choices[0].logprobs;
    expect(scored.choices[0].text).toBe('ab x');
    expect(lp.tokens).toEqual(['', 'a', '', 'b', ' ', 'x']);
    expect(lp.text_offset).toEqual([0, 0, 1, 1, 2, 3]);
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs[0]).toBeNull();
  });

  it('scores the prompt with the logits of its own prefixes (real log-softmax)', async () => {
    const engine = fakeEngine();
    const g = engine.generator;
    const ids = g.tokenizer.encode(PROMPT);
    const body = json(await post(engine, { model: 'fake', prompt: PROMPT, echo: true, logprobs: 0, max_tokens: 0 }));
    const expected = ids.slice(1).map((id, i) => {
      const logits = g.logits(ids.slice(0, i + 1));
      const lse = Math.log(logits.reduce((s, v) => s + Math.exp(v), 0));
      return logits[id]! - lse;
    });
    body.choices[0].logprobs.token_logprobs.slice(1).forEach((v: number, i: number) => expect(v).toBeCloseTo(expected[i]!, 9));
  });
});
