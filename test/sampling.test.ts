import { describe, expect, it } from 'vitest';
import { createRandomStream } from '../src/sampling/random.ts';
import { argmax, drawFrom, sampleToken, softmaxWithTemperature, topPCandidates } from '../src/sampling/sampler.ts';

describe('sampling', () => {
  it('greedy picks the argmax, lowest index on ties', () => {
    expect(argmax([0.1, 3, -2, 3])).toBe(1);
    const rng = createRandomStream(1);
    expect(sampleToken([1, 5, 2], { temperature: 0, topP: 0.1 }, rng)).toBe(1);
  });

  it('softmax with temperature matches the formula', () => {
    const p = softmaxWithTemperature([1, 2, 3], 0.5);
    const e = [Math.exp(2), Math.exp(4), Math.exp(6)];
    const s = e[0] + e[1] + e[2];
    for (let i = 0; i < 3; i++) expect(p[i]).toBeCloseTo(e[i] / s, 12);
  });

  it('top_p keeps the smallest set reaching the mass, including the crossing token', () => {
    const probs = new Float64Array([0.1, 0.5, 0.3, 0.1]);
    expect(topPCandidates(probs, 0.5)).toEqual([1]);
    expect(topPCandidates(probs, 0.6)).toEqual([1, 2]);
    expect(topPCandidates(probs, 0.8)).toEqual([1, 2]);
    expect(topPCandidates(probs, 0.81)).toEqual([1, 2, 0]);
    expect(topPCandidates(probs, 1)).toEqual([1, 2, 0, 3]);
  });

  it('draws in proportion to the renormalized probabilities', () => {
    const probs = new Float64Array([0.2, 0.6, 0.2]);
    const rng = createRandomStream(42);
    const counts = [0, 0, 0];
    for (let i = 0; i < 20000; i++) counts[drawFrom([1, 2], probs, rng)]++;
    expect(counts[0]).toBe(0);
    expect(counts[1] / 20000).toBeGreaterThan(0.73);
    expect(counts[1] / 20000).toBeLessThan(0.77);
  });

  it('a seed gives the same stream every time; different seeds differ', () => {
    const a = createRandomStream(1234);
    const b = createRandomStream(1234);
    const c = createRandomStream(1235);
    const sa = Array.from({ length: 8 }, () => a.next());
    const sb = Array.from({ length: 8 }, () => b.next());
    const sc = Array.from({ length: 8 }, () => c.next());
    expect(sa).toEqual(sb);
    expect(sa).not.toEqual(sc);
    for (const x of sa) expect(x >= 0 && x < 1).toBe(true);
    // seeds beyond 32 bits are not truncated into collisions
    expect(createRandomStream(2 ** 40 + 7).next()).not.toBe(createRandomStream(7).next());
  });
});
