// BoundedLru: the least recently used entries go first, beyond its number of entries or the sum of
// their weights; the newest stays whatever it weighs.
import { describe, expect, it } from 'vitest';
import { BoundedLru } from '../../src/tokenizer/bounded-lru.ts';

const keys = (lru: BoundedLru<string, number>, candidates: string[]) => candidates.filter((k) => lru.get(k) !== undefined);

describe('BoundedLru', () => {
  it('drops the least recently used beyond its number of entries', () => {
    const lru = new BoundedLru<string, number>(3, Infinity);
    for (const [i, key] of ['a', 'b', 'c'].entries()) lru.set(key, i, 1);
    expect(lru.get('a')).toBe(0); // a is now the most recently used
    lru.set('d', 3, 1);
    expect(lru.size).toBe(3);
    expect(lru.get('b')).toBeUndefined();
    expect(keys(lru, ['a', 'c', 'd'])).toEqual(['a', 'c', 'd']);
  });

  it('drops the least recently used beyond the sum of weights, and keeps the newest whatever it weighs', () => {
    const lru = new BoundedLru<string, number>(100, 10);
    lru.set('a', 1, 4);
    lru.set('b', 2, 4);
    expect(lru.weight).toBe(8);
    lru.set('c', 3, 4);
    expect(lru.get('a')).toBeUndefined();
    expect(lru.weight).toBe(8);
    lru.set('huge', 4, 50);
    expect(lru.size).toBe(1);
    expect(lru.weight).toBe(50);
    expect(lru.get('huge')).toBe(4);
  });

  it('counts a key set again once, with its new weight', () => {
    const lru = new BoundedLru<string, number>(10, 100);
    lru.set('a', 1, 30);
    lru.set('a', 2, 5);
    expect([lru.size, lru.weight, lru.get('a')]).toEqual([1, 5, 2]);
    lru.clear();
    expect([lru.size, lru.weight, lru.get('a')]).toEqual([0, 0, undefined]);
  });
});
