// The reasoning split (src/api/reasoning.ts): where a reply starts, the whole-output split, and the
// streamed split, which must equal the whole one for every way the output is cut into pieces.
import { describe, expect, it } from 'vitest';
import { reasoningStart, ReasoningStream, splitReasoning, THINK_TAGS, type ReasoningStart } from '../../src/api/reasoning.ts';
import { mulberry32 } from '../helpers/prng.ts';

const split = (start: ReasoningStart, text: string) => splitReasoning({ tags: THINK_TAGS, start }, text);

/** The stream's output for `pieces`, joined, and each piece's part. */
function streamed(start: ReasoningStart, pieces: string[]) {
  const stream = new ReasoningStream(THINK_TAGS, start);
  const parts = pieces.map((p) => stream.push(p));
  parts.push(stream.finish());
  return {
    reasoning: stream.thought ? parts.map((p) => p.reasoning).join('') : null,
    content: parts.map((p) => p.content).join(''),
    parts,
  };
}

// reasoningStart reads the reply's own part of the prompt (chat-prompt.ts generationPart, tested
// with real templates in test/api/chat-prompt.test.ts).
describe('reasoningStart', () => {
  it('is inside when the part leaves <think> open', () => {
    expect(reasoningStart('<｜Assistant｜><think>\n', THINK_TAGS)).toBe('inside');
    // A continued assistant message that is still thinking, also after the template's empty block.
    expect(reasoningStart('<|im_start|>assistant\n<think>\nLet me', THINK_TAGS)).toBe('inside');
    expect(reasoningStart('<|im_start|>assistant\n<think>\n\n</think>\n\n<think>\nLet me', THINK_TAGS)).toBe('inside');
  });
  it('is answer when the part closes its thinking (Qwen3 enable_thinking false, a continued message that thought)', () => {
    expect(reasoningStart('<|im_start|>assistant\n<think>\n\n</think>\n\n', THINK_TAGS)).toBe('answer');
    expect(reasoningStart('<|assistant|><think>a</think>b', THINK_TAGS)).toBe('answer');
  });
  it('may open when the part has no tag', () => {
    expect(reasoningStart('<|im_start|>assistant\n', THINK_TAGS)).toBe('may-open');
    expect(reasoningStart('', THINK_TAGS)).toBe('may-open');
  });
});

describe('splitReasoning', () => {
  it('splits a reply that opens its thinking', () => {
    expect(split('may-open', '<think>\nHmm.\n</think>\n\nYes.')).toEqual({ reasoning: '\nHmm.\n', content: '\n\nYes.' });
  });
  it('leaves a reply that does not begin with <think> all content (may-open)', () => {
    expect(split('may-open', 'Yes. <think>no</think>')).toEqual({ reasoning: null, content: 'Yes. <think>no</think>' });
    expect(split('may-open', ' <think>x</think>')).toEqual({ reasoning: null, content: ' <think>x</think>' });
  });
  it('reads a reply that starts inside as thinking to </think>, dropping a leading <think>', () => {
    expect(split('inside', 'Hmm.</think>Yes.')).toEqual({ reasoning: 'Hmm.', content: 'Yes.' });
    expect(split('inside', '<think>Hmm.</think>Yes.')).toEqual({ reasoning: 'Hmm.', content: 'Yes.' });
  });
  it('keeps a thinking that never ends (max_tokens) as reasoning with no content', () => {
    expect(split('inside', 'Hmm, let me')).toEqual({ reasoning: 'Hmm, let me', content: '' });
    expect(split('may-open', '<think>Hmm, </thi')).toEqual({ reasoning: 'Hmm, </thi', content: '' });
    expect(split('may-open', '<think>')).toEqual({ reasoning: '', content: '' });
    expect(split('may-open', '<thi')).toEqual({ reasoning: null, content: '<thi' });
    expect(split('inside', '<thi')).toEqual({ reasoning: '<thi', content: '' });
  });
  it('ends the thinking at the first </think>; later tags are answer text', () => {
    expect(split('may-open', '<think>a</think>b<think>c</think>d')).toEqual({ reasoning: 'a', content: 'b<think>c</think>d' });
  });
  it('answers all content when the prompt closed the thinking', () => {
    expect(split('answer', '<think>a</think>b')).toEqual({ reasoning: null, content: '<think>a</think>b' });
  });
});

describe('ReasoningStream', () => {
  const outputs: [ReasoningStart, string][] = [
    ['may-open', '<think>\nLet me think: 2 < 3 and </thin is not a tag.\n</think>\n\nThe answer: <think> 4.'],
    ['may-open', 'No thinking here </think> at all'],
    ['may-open', '<think>unfinished </th'],
    ['inside', 'Reasoning with < and </ and </think>Answer</think>'],
    ['inside', '<think>x</think>'],
    ['inside', '</think>'],
    ['answer', '<think>all</think> content'],
  ];

  it('never shows a tag, and holds back only what may still be one', () => {
    const { parts } = streamed('may-open', ['<th', 'ink>', 'abc</', 'thi', 'nk', '>', 'de']);
    expect(parts.map((p) => [p.reasoning, p.content])).toEqual([
      ['', ''],
      ['', ''],
      ['abc', ''],
      ['', ''],
      ['', ''],
      ['', ''],
      ['', 'de'],
      ['', ''],
    ]);
  });

  it('splits text before and after the tag in one piece', () => {
    const { parts } = streamed('inside', ['one </think> two']);
    expect(parts[0]).toEqual({ reasoning: 'one ', content: ' two' });
  });

  it('flushes a held-back tag start as thinking when the output ends', () => {
    const { parts } = streamed('inside', ['abc </thi']);
    expect(parts).toEqual([
      { reasoning: 'abc ', content: '' },
      { reasoning: '</thi', content: '' },
    ]);
  });

  for (const [start, text] of outputs) {
    it(`gives the whole split for every cut of ${JSON.stringify(text)} (${start})`, () => {
      const whole = split(start, text);
      // Every cut into two pieces, then random cuts into many.
      for (let i = 0; i <= text.length; i++) {
        const { reasoning, content } = streamed(start, [text.slice(0, i), text.slice(i)]);
        expect({ reasoning, content }).toEqual(whole);
      }
      const random = mulberry32(text.length);
      for (let trial = 0; trial < 200; trial++) {
        const pieces: string[] = [];
        for (let at = 0; at < text.length; ) {
          const n = Math.floor(random() * 5);
          pieces.push(text.slice(at, at + n));
          at += n;
        }
        const { reasoning, content } = streamed(start, pieces);
        expect({ reasoning, content }).toEqual(whole);
      }
    });
  }
});
