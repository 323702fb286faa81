// The edge's copy of who holds a live order of an activity (workers/edge/holders-merge.ts; a
// goods' copy merges its shoppers' sums the same way)
// after a read of the orders that changed: whatever the changes and wherever a renewal splits
// them, the copy is the holders a replay of every change gives, sorted for its binary search.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { HolderChange } from '../../db/holders';
import { fingerprint } from '../../workers/edge/allowlist-copies';
import { applyChanges } from '../../workers/edge/holders-merge';

const EMPTY: Float64Array = new Float64Array(0);

/** The holders after `changes` as the rule reads them: each shopper's live order, by goods and units. */
function replay(changes: readonly HolderChange[]): Map<string, { goodsId: number; quantity: number }> {
  const held = new Map<string, { goodsId: number; quantity: number }>();
  for (const c of changes) {
    if (c.live) {
      held.set(c.userId, { goodsId: c.goodsId, quantity: c.quantity });
    } else if (held.get(c.userId)?.goodsId === c.goodsId) {
      held.delete(c.userId);
    }
  }
  return held;
}

/** A copy as shopper → holding, checking it is sorted. */
function read(copy: { fingerprints: Float64Array; holdings: Float64Array }, users: readonly string[]) {
  expect(copy.fingerprints).toHaveLength(copy.holdings.length);
  let sorted = true;
  for (let i = 1; i < copy.fingerprints.length; i++) {
    sorted &&= (copy.fingerprints[i] as number) > (copy.fingerprints[i - 1] as number);
  }
  expect(sorted).toBe(true);
  const out = new Map<string, { goodsId: number; quantity: number }>();
  for (const u of users) {
    const i = copy.fingerprints.indexOf(fingerprint(u));
    if (i >= 0) {
      const h = copy.holdings[i] as number;
      out.set(u, { goodsId: Math.floor(h / 128), quantity: h % 128 });
    }
  }
  return out;
}

const USERS = Array.from({ length: 12 }, (_, i) => `shopper-${i}`);
const change = fc.record({
  userId: fc.constantFrom(...USERS),
  goodsId: fc.integer({ min: 1, max: 4 }),
  quantity: fc.integer({ min: 1, max: 100 }),
  live: fc.boolean(),
});

describe("an activity's holders after changes", () => {
  it('are what a replay of every change gives, however renewals split them', () => {
    fc.assert(
      fc.property(fc.array(change, { maxLength: 60 }), fc.array(fc.nat(), { maxLength: 4 }), (changes, cuts) => {
        const at = [...new Set(cuts.map((c) => c % (changes.length + 1)))].sort((a, b) => a - b);
        let copy: { fingerprints: Float64Array; holdings: Float64Array } = { fingerprints: EMPTY, holdings: EMPTY };
        let from = 0;
        for (const to of [...at, changes.length]) {
          copy = applyChanges(copy.fingerprints, copy.holdings, changes.slice(from, to));
          from = to;
        }
        expect(read(copy, USERS)).toEqual(replay(changes));
        expect(copy.fingerprints).toHaveLength(replay(changes).size);
      }),
      { numRuns: 500 },
    );
  });

  it('keep a shopper who ordered again elsewhere when the first order closes, and read a change twice the same', () => {
    const first = applyChanges(EMPTY, EMPTY, [{ userId: 'u', goodsId: 1, quantity: 2, live: true }]);
    // The order of goods 1 closed, then one of goods 2: and the renewal after reads both again (its overlap).
    const changes = [
      { userId: 'u', goodsId: 1, quantity: 2, live: false },
      { userId: 'u', goodsId: 2, quantity: 1, live: true },
    ];
    const once = applyChanges(first.fingerprints, first.holdings, changes);
    const twice = applyChanges(once.fingerprints, once.holdings, changes);
    expect(read(once, ['u'])).toEqual(new Map([['u', { goodsId: 2, quantity: 1 }]]));
    expect(read(twice, ['u'])).toEqual(read(once, ['u']));
    // A late read of goods 1's close alone does not end the holding of goods 2.
    const late = applyChanges(once.fingerprints, once.holdings, [changes[0] as HolderChange]);
    expect(read(late, ['u'])).toEqual(read(once, ['u']));
  });

  it('merge 100,000 holders with 1,000 changes into one sorted copy', () => {
    const base = applyChanges(
      EMPTY,
      EMPTY,
      Array.from({ length: 100_000 }, (_, i) => ({ userId: `b-${i}`, goodsId: 1 + (i % 3), quantity: 1, live: true })),
    );
    const changes = Array.from({ length: 1_000 }, (_, i) => ({
      userId: i % 2 ? `b-${i}` : `n-${i}`,
      goodsId: 1 + (i % 3),
      quantity: 2,
      live: i % 4 !== 1,
    }));
    const after = applyChanges(base.fingerprints, base.holdings, changes);
    // 500 new shoppers, 250 closed (i % 4 == 1, odd), 250 reordered: 100,000 + 500 - 250.
    expect(after.fingerprints).toHaveLength(100_250);
    expect(read(after, ['n-0', 'b-1', 'b-3', 'b-2'])).toEqual(
      new Map([
        ['n-0', { goodsId: 1, quantity: 2 }],
        ['b-3', { goodsId: 1, quantity: 2 }],
        ['b-2', { goodsId: 3, quantity: 1 }],
      ]),
    );
  });
});
