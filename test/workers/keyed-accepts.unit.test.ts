import { describe, expect, it } from 'vitest';
import { KeyedAccepts } from '../../durable-objects/goods-stock/keyed-accepts';
import type { ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';

const item = (requestId: string, keyed: boolean): ReserveItem => ({
  requestId,
  userId: 'u',
  tokenId: 'tokentoken',
  tokenExpiresAt: 0,
  keyed,
});

describe('KeyedAccepts (pure)', () => {
  it('keeps the newest `max` within the window, says when there were more, and forgets what aged out', () => {
    const ring = new KeyedAccepts(1000, 3);
    for (const [i, id] of ['a', 'b', 'c'].entries()) {
      ring.add(id, 100 + i);
    }
    expect(ring.soldOutNote(200)).toEqual({ acceptedKeyed: ['a', 'b', 'c'], acceptedKeyedTruncated: false });
    ring.add('d', 300);
    ring.add('e', 400);
    expect(ring.soldOutNote(500)).toEqual({ acceptedKeyed: ['c', 'd', 'e'], acceptedKeyedTruncated: true });
    // 'b' (the one beyond the cap) ages out: the list is complete again.
    expect(ring.soldOutNote(1101)).toEqual({ acceptedKeyed: ['c', 'd', 'e'], acceptedKeyedTruncated: false });
    expect(ring.soldOutNote(1399)).toEqual({ acceptedKeyed: ['e'], acceptedKeyedTruncated: false });
    expect(ring.soldOutNote(5000)).toEqual({ acceptedKeyed: [], acceptedKeyedTruncated: false });
  });

  it('loads what storage gives (newest first) and tells it how many to read', () => {
    const ring = new KeyedAccepts(1000, 2);
    expect(ring.loadLimit).toBe(3);
    ring.load([
      { requestId: 'z', at: 30 },
      { requestId: 'y', at: 20 },
      { requestId: 'x', at: 10 },
    ]);
    expect(ring.soldOutNote(100)).toEqual({ acceptedKeyed: ['y', 'z'], acceptedKeyedTruncated: true });
  });

  it('adds the same list to every SOLD_OUT answer of a batch and notes its keyed accepts first', () => {
    const ring = new KeyedAccepts(1000, 10);
    const items = [item('k1', true), item('u1', false), item('s1', true), item('s2', false)];
    const outcomes: ReserveOutcome[] = [
      { ok: true, requestId: 'k1', orderId: '1-1', replay: false },
      { ok: true, requestId: 'u1', orderId: '1-2', replay: false },
      { ok: false, requestId: 's1', reason: 'SOLD_OUT', replay: false },
      { ok: false, requestId: 's2', reason: 'SOLD_OUT', replay: false },
    ];
    const answered = ring.answer(items, outcomes, 50);
    const [, , s1, s2] = answered;
    expect(s1).toMatchObject({ acceptedKeyed: ['k1'], acceptedKeyedTruncated: false });
    expect(s1 && 'acceptedKeyed' in s1 && s2 && 'acceptedKeyed' in s2 && s1.acceptedKeyed === s2.acceptedKeyed).toBe(true);
    expect(answered[0]).toBe(outcomes[0]);
    // A batch without SOLD_OUT comes back as it was.
    const plain: ReserveOutcome[] = [{ ok: false, requestId: 'p', reason: 'PAUSED', replay: false }];
    expect(ring.answer([item('p', true)], plain, 60)).toBe(plain);
  });
});
