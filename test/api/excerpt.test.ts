// Bounded excerpts of request values for error messages (src/api/excerpt.ts).
import { describe, expect, it } from 'vitest';
import { clipText, excerpt, EXCERPT_LENGTH, nameList } from '../../src/api/excerpt.ts';

describe('excerpt', () => {
  it('writes small values as their JSON text', () => {
    expect(excerpt('user')).toBe('"user"');
    expect(excerpt({ a: [1, null, true], b: 'x' })).toBe('{"a":[1,null,true],"b":"x"}');
    expect(excerpt([])).toBe('[]');
    expect(excerpt(null)).toBe('null');
    expect(excerpt(1.5)).toBe('1.5');
  });

  it('writes what JSON has no text for as JavaScript would', () => {
    expect(excerpt(undefined)).toBe('undefined');
    expect(excerpt(5n)).toBe('5n');
    expect(excerpt(Symbol('s'))).toBe('Symbol(s)');
    expect(excerpt(() => 1)).toBe('a function');
    expect(excerpt(NaN)).toBe('NaN');
  });

  it('cuts a long value at the limit, with an ellipsis', () => {
    const long = excerpt('x'.repeat(1 << 20));
    expect(long).toBe(`"${'x'.repeat(EXCERPT_LENGTH - 1)}…`);
    expect(excerpt(Array.from({ length: 100_000 }, (_, i) => i)).length).toBe(EXCERPT_LENGTH + 1);
    expect(excerpt({ ['k'.repeat(1000)]: 1 }).length).toBe(EXCERPT_LENGTH + 1);
  });

  it('writes a value of any depth, or a cyclic one, in a bounded number of steps', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 1_000_000; i++) deep = [deep];
    expect(excerpt(deep)).toBe(`${'['.repeat(EXCERPT_LENGTH)}…`);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(excerpt(cyclic)).toMatch(/^\{"self":\{"self":.*…$/);
  });

  it('says what it can of a value whose reading throws', () => {
    const hostile = new Proxy({}, { ownKeys: () => { throw new Error('no keys'); } });
    expect(excerpt(hostile)).toBe('{…');
  });
});

describe('clipText and nameList', () => {
  it('cuts text, never between the halves of a surrogate pair', () => {
    expect(clipText('abc', 5)).toBe('abc');
    expect(clipText('abcdef', 3)).toBe('abc…');
    expect(clipText('ab\u{1F600}c', 3)).toBe('ab…');
  });

  it('lists a few names and counts the rest', () => {
    expect(nameList(['a', 'b'])).toBe('a, b');
    expect(nameList(Array.from({ length: 50_000 }, (_, i) => `k${i}`))).toBe('k0, k1, k2, k3, k4 and 49995 more');
    expect(nameList(['n'.repeat(10_000)])).toBe(`${'n'.repeat(EXCERPT_LENGTH)}…`);
  });
});
