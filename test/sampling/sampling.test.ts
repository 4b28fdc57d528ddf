// The sampling chain on hand-made logits, with exact expected results: each step alone and in
// combination, logprobs, seeded draws, and the partial selections against full sorts.
import { describe, expect, it } from 'vitest';
import type { SamplingParams } from '../../src/sampling/types.ts';
import { logSoftmax, logSumExp, scoreToken, topIds } from '../../src/sampling/logprobs.ts';
import { applyLogitBias, applyPresenceFrequency, applyRepetitionPenalty, TokenHistory } from '../reference/penalties.ts';
import { createRandomStream, type RandomStream } from '../../src/sampling/random.ts';
import { processLogits, sampleToken, SequenceSampler } from '../reference/sampler.ts';
import { argmax, candidates, drawToken, selectNucleus, selectTop, type DrawSettings } from '../reference/truncation.ts';
import { allowedIds, maskOf } from '../reference/mask.ts';

/** A "random" stream that returns the given numbers, to pin the draw's u exactly. */
function fixed(...us: number[]): RandomStream & { used: number } {
  const stream = {
    used: 0,
    next() {
      if (stream.used >= us.length) throw new Error('drew more numbers than expected');
      return us[stream.used++];
    },
  };
  return stream;
}

/** Logits whose softmax is `probs` (up to rounding). */
function logitsOf(probs: number[]): Float64Array {
  return Float64Array.from(probs, Math.log);
}

const params = (p: Partial<SamplingParams>): SamplingParams => ({ temperature: 1, topP: 1, ...p });

describe('random streams', () => {
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

  it('streams of one seed are reproducible and distinct; (seed, stream) pairs do not alias', () => {
    const draw = (seed: number, stream: number) => {
      const r = createRandomStream(seed, stream);
      return Array.from({ length: 4 }, () => r.next());
    };
    expect(draw(5, 0)).toEqual(draw(5, 0));
    expect(draw(5, 3)).toEqual(draw(5, 3));
    const seen = new Set<string>();
    for (let seed = 0; seed < 20; seed++) for (let stream = 0; stream < 20; stream++) seen.add(draw(seed, stream).join());
    expect(seen.size).toBe(400);
    expect(draw(1, 2)).not.toEqual(draw(2, 1));
    expect(createRandomStream(5).next()).toBe(createRandomStream(5, 0).next());
  });

  it('rejects seeds that are not finite and bad stream indices', () => {
    expect(() => createRandomStream(NaN)).toThrow(RangeError);
    expect(() => createRandomStream(1, -1)).toThrow(RangeError);
    expect(() => createRandomStream(1, 0.5)).toThrow(RangeError);
    expect(() => createRandomStream(1, 2 ** 32)).toThrow(RangeError);
  });

  it('step s of a stream is Philox counter (stream, s): next() walks the steps, at() reads any', () => {
    const r = createRandomStream(77, 4);
    const first = [r.next(), r.next(), r.next()];
    expect(first).toEqual([0, 1, 2].map((s) => createRandomStream(77, 4).at(s)));
    expect(r.step).toBe(3);
  });
});

describe('logprobs (raw logits, float64)', () => {
  it('log-softmax matches the formula and is stable for large logits', () => {
    const lp = logSoftmax([1, 2, 3]);
    const s = Math.exp(1) + Math.exp(2) + Math.exp(3);
    for (let i = 0; i < 3; i++) expect(lp[i]).toBeCloseTo(i + 1 - Math.log(s), 14);
    // exp(1000) overflows; the stable form does not.
    expect(logSumExp([1000, 1001])).toBeCloseTo(1001 + Math.log1p(Math.exp(-1)), 10);
    expect(logSumExp([-Infinity, 0])).toBe(0);
    expect(logSumExp([-Infinity, -Infinity])).toBe(-Infinity);
    expect(logSumExp([NaN, 0, 0])).toBeCloseTo(Math.log(2), 14);
  });

  it('float32 logits are summed in float64', () => {
    const x = new Float32Array(4096).fill(0.1);
    const lse = logSumExp(x);
    expect(lse).toBeCloseTo(Math.fround(0.1) + Math.log(4096), 12);
  });

  it('top ids: most likely first, lower id first on ties, NaN never', () => {
    expect(topIds([0.5, 2, NaN, 2, 1, 2], 2)).toEqual([1, 3]);
    expect(topIds([0.5, 2, NaN, 2, 1, 2], 4)).toEqual([1, 3, 5, 4]);
    expect(topIds([3, 1], 5)).toEqual([0, 1]);
    expect(topIds([3, 1], 0)).toEqual([]);
    expect(topIds([-Infinity, -Infinity, 1], 3)).toEqual([2, 0, 1]);
  });

  it('top ids equal a full sort on a large vocabulary with many ties', () => {
    let s = 99;
    const rand = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const values = Float32Array.from({ length: 128_256 }, () => Math.round(rand() * 500) / 10);
    const order = Array.from(values.keys()).sort((a, b) => values[b] - values[a] || a - b);
    for (const k of [1, 5, 20]) expect(topIds(values, k)).toEqual(order.slice(0, k));
  });

  it('scores a token: its logprob always, alternatives when asked (logprobs 0: [])', () => {
    const raw = new Float32Array([1, 3, 2, 3]);
    const lp = logSoftmax(raw);
    expect(scoreToken(raw, 2, undefined)).toEqual({ id: 2, logprob: lp[2] });
    expect(scoreToken(raw, 2, 0)).toEqual({ id: 2, logprob: lp[2], topLogprobs: [] });
    expect(scoreToken(raw, 0, 2)).toEqual({
      id: 0,
      logprob: lp[0],
      topLogprobs: [
        { id: 1, logprob: lp[1] },
        { id: 3, logprob: lp[3] },
      ],
    });
  });
});

describe('penalties (steps 1-3)', () => {
  it('logit_bias adds the bias', () => {
    const x = Float64Array.from([1, 2, 3]);
    applyLogitBias(x, new Map([[0, 5], [2, -100]]));
    expect(Array.from(x)).toEqual([6, 2, -97]);
  });

  it('repetition penalty divides positive logits and multiplies negative ones, once per distinct token', () => {
    const x = Float64Array.from([2, -2, 0.5, 3, 0]);
    const history = new TokenHistory(5, [0, 1, 1, 2, 4]);
    expect(history.seen).toEqual([0, 1, 2, 4]);
    applyRepetitionPenalty(x, history.seen, 2);
    expect(Array.from(x)).toEqual([1, -4, 0.25, 3, 0]);
  });

  it('presence and frequency penalties follow the OpenAI formula over generated counts', () => {
    const x = Float64Array.from([1, 1, 1, 1]);
    const history = new TokenHistory(4, [0]);
    for (const id of [1, 1, 3]) history.accept(id);
    applyPresenceFrequency(x, history.counts, 1, 0.5);
    // c = [0, 2, 0, 1]: x -= c * 0.5 + (c > 0) * 1
    expect(Array.from(x)).toEqual([1, -1, 1, -0.5]);
  });

  it('in combination: bias, then repetition (prompt + generated), then presence/frequency (generated only), then the ban', () => {
    const raw = [1, 1, -1, 4, 0.5];
    const history = new TokenHistory(5, [0, 2]); // prompt
    history.accept(1);
    history.accept(1);
    const p = params({ logitBias: new Map([[0, 1], [4, -1]]), repetitionPenalty: 2, presencePenalty: 0.25, frequencyPenalty: 0.5 });
    const x = processLogits(raw, p, history, [3]);
    expect(Array.from(x)).toEqual([
      (1 + 1) / 2, // bias then repetition (repetition then bias would give 1.5)
      1 / 2 - 2 * 0.5 - 0.25, // generated twice: repetition, frequency and presence
      -1 * 2, // a prompt token: repetition only, no presence/frequency
      -Infinity, // banned (a stop id before min_tokens)
      0.5 - 1, // bias only (not seen)
    ]);
    expect(raw).toEqual([1, 1, -1, 4, 0.5]); // the raw logits are untouched
  });

  it('is float32 arithmetic, as on the GPU', () => {
    const x = processLogits([0.1, 3], params({ logitBias: new Map([[0, 0.2]]), repetitionPenalty: 1.3 }), new TokenHistory(2, [1]));
    expect(x[0]).toBe(Math.fround(Math.fround(0.1) + Math.fround(0.2)));
    expect(x[1]).toBe(Math.fround(3 / Math.fround(1.3)));
  });

  it('neutral settings change nothing', () => {
    const raw = [0.5, -3, 2];
    const history = new TokenHistory(3, [0, 1, 2]);
    history.accept(2);
    expect(Array.from(processLogits(raw, params({ repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 }), history))).toEqual(raw);
  });
});

describe('temperature, top_k, top_p, min_p (steps 4-7)', () => {
  const x = logitsOf([0.1, 0.2, 0.3, 0.4]);
  /** The survivors (listed most likely first) and their renormalized probabilities; draw order is by id. */
  const check = (settings: DrawSettings, ids: number[], probs: number[], logits = x) => {
    const c = candidates(logits, settings);
    const order = ids.map((_, i) => i).sort((a, b) => ids[a] - ids[b]);
    expect(c.ids).toEqual(order.map((i) => ids[i]));
    expect(c.probs.length).toBe(probs.length);
    c.probs.forEach((p, i) => expect(p).toBeCloseTo(probs[order[i]], 12));
  };

  it('greedy (temperature 0) is the argmax of the processed logits, lowest id on ties, ignoring the filters', () => {
    expect(argmax([0.1, 3, -2, 3])).toBe(1);
    expect(argmax([-Infinity, -Infinity])).toBe(0);
    const r = fixed();
    expect(sampleToken([1, 5, 2], params({ temperature: 0, topP: 0.1, topK: 1, minP: 0.9 }), r)).toBe(1);
    expect(sampleToken([1, 5, 2], params({ temperature: 0, logitBias: new Map([[2, 3.5]]) }), r)).toBe(2);
    expect(r.used).toBe(0); // greedy draws no random number
  });

  it('temperature scales the logits before the softmax', () => {
    check({ temperature: 1 }, [3, 2, 1, 0], [0.4, 0.3, 0.2, 0.1]);
    check({ temperature: 0.5 }, [3, 2, 1, 0], [16 / 30, 9 / 30, 4 / 30, 1 / 30]);
    const e = [1, 2, 3, 4].map((v) => Math.sqrt(v));
    const s = e.reduce((a, b) => a + b);
    check({ temperature: 2 }, [3, 2, 1, 0], [e[3] / s, e[2] / s, e[1] / s, e[0] / s]);
  });

  it('top_k keeps the k most likely (lower id on ties), renormalized', () => {
    check({ temperature: 1, topK: 2 }, [3, 2], [4 / 7, 3 / 7]);
    check({ temperature: 1, topK: 4 }, [3, 2, 1, 0], [0.4, 0.3, 0.2, 0.1]);
    check({ temperature: 1, topK: 9 }, [3, 2, 1, 0], [0.4, 0.3, 0.2, 0.1]);
    const tied = Float64Array.from([2, 1, 2, 2, 0]);
    expect(candidates(tied, { temperature: 1, topK: 2 }).ids).toEqual([0, 2]);
    expect(candidates(tied, { temperature: 1, topK: 1 }).ids).toEqual([0]);
    // top_p ties: the lower id is "more likely"
    expect(candidates(Float64Array.from([0, 1, 1, 1]), { temperature: 1, topP: 0.5 }).ids).toEqual([1, 2]);
  });

  it('top_p keeps the shortest prefix reaching the mass, including the crossing token', () => {
    check({ temperature: 1, topP: 0.35 }, [3], [1]);
    check({ temperature: 1, topP: 0.45 }, [3, 2], [4 / 7, 3 / 7]);
    check({ temperature: 1, topP: 0.65 }, [3, 2], [4 / 7, 3 / 7]);
    check({ temperature: 1, topP: 0.75 }, [3, 2, 1], [4 / 9, 3 / 9, 2 / 9]);
    check({ temperature: 1, topP: 0.95 }, [3, 2, 1, 0], [0.4, 0.3, 0.2, 0.1]);
  });

  it('top_p comes after top_k and uses the renormalized probabilities', () => {
    // top_k 3: [.4 .3 .2] / .9 = [.444 .333 .222]; .444 + .333 = .777 >= .75
    check({ temperature: 1, topK: 3, topP: 0.75 }, [3, 2], [4 / 7, 3 / 7]);
    // without top_k: .4 + .3 = .7 < .75, so a third token is needed
    check({ temperature: 1, topP: 0.75 }, [3, 2, 1], [4 / 9, 3 / 9, 2 / 9]);
  });

  it('top_p comes after temperature', () => {
    // temperature 0.5: [16 9 4 1] / 30; 16/30 = .533 >= .5
    check({ temperature: 0.5, topP: 0.5 }, [3], [1]);
    check({ temperature: 1, topP: 0.5 }, [3, 2], [4 / 7, 3 / 7]);
  });

  it('min_p keeps p >= min_p * p_max', () => {
    check({ temperature: 1, minP: 0.45 }, [3, 2, 1], [4 / 9, 3 / 9, 2 / 9]); // threshold .18
    check({ temperature: 1, minP: 0.6 }, [3, 2], [4 / 7, 3 / 7]); // .24
    check({ temperature: 1, minP: 0.8 }, [3], [1]); // .32
    check({ temperature: 1, minP: 1 }, [3], [1]);
  });

  it('min_p comes after top_p (renormalized) and temperature', () => {
    // top_k 3, top_p .75 -> [4/7, 3/7]; min_p .7: .7 * 4/7 = .4 <= 3/7 keeps both; .8: .457 > .429 drops 2
    check({ temperature: 1, topK: 3, topP: 0.75, minP: 0.7 }, [3, 2], [4 / 7, 3 / 7]);
    check({ temperature: 1, topK: 3, topP: 0.75, minP: 0.8 }, [3], [1]);
    // temperature 2: p ~ sqrt([1 2 3 4]); min_p .6 keeps sqrt(3)/2 = .866 and sqrt(2)/2 = .707
    const e = [2, 3].map((v) => Math.sqrt(v));
    check({ temperature: 2, minP: 0.6 }, [3, 2, 1], [2 / (2 + e[1] + e[0]), e[1] / (2 + e[1] + e[0]), e[0] / (2 + e[1] + e[0])]);
  });

  it('banned tokens (-Infinity) are never candidates; probabilities that underflow leave', () => {
    const banned = Float64Array.from([0, -Infinity, 0, -Infinity]);
    check({ temperature: 1 }, [0, 2], [0.5, 0.5], banned);
    check({ temperature: 1, topK: 3 }, [0, 2], [0.5, 0.5], banned);
    check({ temperature: 0.001, topK: 3 }, [1], [1], Float64Array.from([0, 10, 2]));
  });
});

describe('the draw (step 8)', () => {
  const x = logitsOf([0.1, 0.2, 0.3, 0.4]);

  it('walks the survivors by id: u in [0, .1) -> 0, [.1, .3) -> 1, [.3, .6) -> 2, [.6, 1) -> 3', () => {
    const cases: [number, number][] = [[0, 0], [0.09, 0], [0.11, 1], [0.29, 1], [0.31, 2], [0.59, 2], [0.61, 3], [0.999999, 3]];
    for (const [u, id] of cases) {
      const r = fixed(u);
      expect(drawToken(x, { temperature: 1 }, r)).toBe(id);
      expect(r.used).toBe(1); // exactly one number per draw
    }
  });

  it('takes its number even when nothing can be drawn, so step s always uses number s', () => {
    const r = fixed(0.5);
    expect(drawToken(Float64Array.from([-Infinity, -Infinity]), { temperature: 1 }, r)).toBe(0);
    expect(r.used).toBe(1);
  });

  it('u is scaled to the mass left after the filters', () => {
    // top_k 2: ids 2, 3 with [3/7, 4/7]: u < 3/7 = .4286 -> 2, else 3
    expect(drawToken(x, { temperature: 1, topK: 2 }, fixed(0.42))).toBe(2);
    expect(drawToken(x, { temperature: 1, topK: 2 }, fixed(0.44))).toBe(3);
    expect(drawToken(x, { temperature: 1, topP: 0.45 }, fixed(0.44))).toBe(3);
    // min_p .6 keeps .3 and .4 without renormalizing: u * .7 < .3 <=> u < .4286
    expect(drawToken(x, { temperature: 1, minP: 0.6 }, fixed(0.42))).toBe(2);
    expect(drawToken(x, { temperature: 1, minP: 0.6 }, fixed(0.44))).toBe(3);
  });

  it('seeded draws are reproducible and follow the probabilities', () => {
    const run = (seed: number) => {
      const r = createRandomStream(seed);
      return Array.from({ length: 50 }, () => sampleToken(x, params({ temperature: 1 }), r));
    };
    expect(run(42)).toEqual(run(42));
    expect(run(42)).not.toEqual(run(43));
    const r = createRandomStream(7);
    const counts = [0, 0, 0, 0];
    const N = 40_000;
    for (let i = 0; i < N; i++) counts[sampleToken(x, params({ temperature: 1, topK: 3 }), r)]++;
    expect(counts[0]).toBe(0);
    for (const [id, p] of [[1, 2 / 9], [2, 3 / 9], [3, 4 / 9]]) expect(Math.abs(counts[id] / N - p)).toBeLessThan(0.01);
  });

  it('on a 128k vocabulary equals a full-sort implementation (selections, no sort)', () => {
    let s = 3;
    const rand = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    const V = 128_256;
    // A peaked distribution with ties: most of the mass on a few hundred tokens.
    const logits = Float64Array.from({ length: V }, (_, i) => (i % 97 === 0 ? 8 : 0) + Math.round(rand() * 40) / 4);
    logits[17] = -Infinity;

    const sortedAll = Array.from(logits.keys()).filter((id) => logits[id] > -Infinity);
    sortedAll.sort((a, b) => logits[b] - logits[a] || a - b);
    const reference = (settings: DrawSettings, u: number): number => {
      let order = sortedAll;
      if (settings.topK) order = order.slice(0, settings.topK);
      const max = logits[order[0]];
      let probs = order.map((id) => Math.exp((logits[id] - max) / settings.temperature));
      const norm = (ps: number[]) => {
        const t = ps.reduce((a, b) => a + b, 0);
        return ps.map((p) => p / t);
      };
      probs = norm(probs);
      if ((settings.topP ?? 1) < 1) {
        let acc = 0;
        let keep = order.length;
        for (let i = 0; i < order.length; i++) {
          acc += probs[i];
          if (acc >= settings.topP!) {
            keep = i + 1;
            break;
          }
        }
        order = order.slice(0, keep);
        probs = norm(probs.slice(0, keep));
      }
      if (settings.minP) {
        const t = settings.minP * probs[0];
        const keep = probs.map((p, i) => (p >= t ? i : -1)).filter((i) => i >= 0);
        order = keep.map((i) => order[i]);
        probs = keep.map((i) => probs[i]);
      }
      // the draw walks the survivors by id
      const byId = new Float64Array(V).fill(-1);
      order.forEach((id, i) => (byId[id] = probs[i]));
      const total = probs.reduce((a, b) => a + b, 0);
      let acc = 0;
      let last = -1;
      for (let id = 0; id < V; id++) {
        if (byId[id] < 0) continue;
        acc += byId[id];
        last = id;
        if (u * total < acc) return id;
      }
      return last;
    };

    const settingsList: DrawSettings[] = [
      { temperature: 1 },
      { temperature: 0.7, topK: 50 },
      { temperature: 1.3, topP: 0.9 },
      { temperature: 1, topK: 5000, topP: 0.5, minP: 0.02 },
      { temperature: 0.8, minP: 0.05 },
    ];
    for (const settings of settingsList) {
      for (const u of [0, 0.05, 0.5, 0.93, 0.999]) {
        expect(drawToken(logits, settings, fixed(u)), JSON.stringify({ settings, u })).toBe(reference(settings, u));
      }
    }
  });

  it('selectTop and selectNucleus pick the prefixes of a full sort', () => {
    let s = 11;
    const rand = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    const n = 20_000;
    const values = Float64Array.from({ length: n }, () => Math.round(rand() * 300) + 1);
    const order = Array.from(values.keys()).sort((a, b) => values[b] - values[a] || a - b);
    const sorted = (ids: Uint32Array, m: number) => Array.from(ids.subarray(0, m)).sort((a, b) => a - b);
    const prefix = (m: number) => order.slice(0, m).sort((a, b) => a - b);
    for (const k of [1, 2, 17, 1000, n - 1, n]) {
      const ids = Uint32Array.from(values.keys());
      selectTop(ids, n, values, k);
      expect(sorted(ids, k)).toEqual(prefix(k));
    }
    const total = values.reduce((a, b) => a + b, 0);
    const p = values.map((v) => v / total);
    for (const mass of [1e-9, 0.01, 0.5, 0.999, 1.1]) {
      let acc = 0;
      let want = n;
      for (let i = 0; i < n; i++) {
        acc += p[order[i]];
        if (acc >= mass) {
          want = i + 1;
          break;
        }
      }
      const ids = Uint32Array.from(values.keys());
      const m = selectNucleus(ids, n, values, p, mass);
      expect(m).toBe(want);
      expect(sorted(ids, m)).toEqual(prefix(want));
    }
  });
});

describe('a sequence sampler', () => {
  it('frequency penalty makes greedy alternate exactly as the formula says', () => {
    const raw = [3, 2.5, 0];
    const s = new SequenceSampler(3, params({ temperature: 0, frequencyPenalty: 1 }), [2], fixed());
    const out: number[] = [];
    for (let i = 0; i < 6; i++) {
      const id = s.sample(raw);
      s.accept(id);
      out.push(id);
    }
    // 0 (3 > 2.5); 0 -> 2 so 1 (2.5); 1 -> 1.5 so 0 (2); 0 -> 1 so 1 (1.5); 1 -> .5 so 0 (1); 0 -> 0, 1 -> .5: 1
    expect(out).toEqual([0, 1, 0, 1, 0, 1]);
  });

  it('presence penalty counts once; repetition penalty covers the prompt', () => {
    const presence = new SequenceSampler(2, params({ temperature: 0, presencePenalty: 1 }), [], fixed());
    const a: number[] = [];
    for (let i = 0; i < 4; i++) {
      const id = presence.sample([2, 1.5]);
      presence.accept(id);
      a.push(id);
    }
    // 0; then 2-1 = 1 < 1.5: 1; then both penalized once: 1 vs .5: 0; 0 again
    expect(a).toEqual([0, 1, 0, 0]);
    const repetition = new SequenceSampler(2, params({ temperature: 0, repetitionPenalty: 2 }), [0], fixed());
    expect(repetition.sample([2, 1.5])).toBe(1); // 2 / 2 = 1 < 1.5
  });

  it('banned ids are never sampled, even when forced by the bias', () => {
    const s = new SequenceSampler(3, params({ temperature: 1, logitBias: new Map([[1, 100]]) }), [], createRandomStream(1));
    for (let i = 0; i < 20; i++) expect(s.sample([0, 0, 0], new Set([1]))).not.toBe(1);
    expect(s.sample([0, 0, 0])).toBe(1);
  });

  it('a mask comes first: disallowed ids are out whatever the bias; with no allowed id finite, the lowest allowed is picked', () => {
    const mask = maskOf(40, [3, 33, 39]);
    expect(allowedIds(mask, 40)).toEqual([3, 33, 39]);
    const raw = Array.from({ length: 40 }, (_, id) => id / 10);
    const biased = params({ temperature: 0, logitBias: new Map([[5, 100], [39, -10]]) });
    // Disallowed ids are -Infinity before the bias: 5's +100 does not bring it back.
    const x = processLogits(raw, biased, null, null, undefined, mask);
    expect(x[5]).toBe(-Infinity);
    expect(x[39]).toBe(Math.fround(Math.fround(3.9) - 10));
    const greedy = new SequenceSampler(40, biased, [], fixed());
    expect(greedy.sample(raw, null, mask)).toBe(33);
    const sampled = new SequenceSampler(40, params({ temperature: 1 }), [], createRandomStream(2));
    for (let i = 0; i < 20; i++) expect([3, 33, 39]).toContain(sampled.sample(raw, null, mask));
    const dead = raw.map((v, id) => ([3, 33, 39].includes(id) ? (id === 33 ? NaN : -Infinity) : v));
    expect(greedy.sample(dead, null, mask)).toBe(3);
    expect(sampled.sample(dead, null, mask)).toBe(3);
    // A stop id banned by min_tokens is still picked when it is the only allowed id.
    expect(greedy.sample(raw, new Set([33]), maskOf(40, [33]))).toBe(33);
  });
});
