import { describe, expect, it } from 'vitest';
import { nextAlarmAt, PRUNE_INTERVAL_MS } from '../../durable-objects/goods-stock/alarm-plan';
import { decide, orderNumber, type ReservationView } from '../../durable-objects/goods-stock/rules';
import { backoffSeconds } from '../../workers/kernel/backoff';
import type { ReserveItem } from '../../workers/kernel/contract';
import { NOW, reservationView } from './rules-view';

const view = reservationView;

const item: ReserveItem = {
  requestId: '1.aaaaaaaaaaaaaaaaaaaaaa',
  userId: 'u1',
  tokenId: 'tok-00001',
  tokenExpiresAt: NOW + 60_000,
  keyed: false,
};

describe('decide', () => {
  it('accepts inside the window with stock', () => {
    expect(decide(view(), item, NOW)).toEqual({ kind: 'accept' });
  });

  it('replays a known keyed request before any other check, even with the token used and no stock', () => {
    const v = view({ remaining: 0 }, { prior: [item.requestId], used: [item.tokenId] });
    expect(decide(v, { ...item, keyed: true }, NOW)).toEqual({ kind: 'replay', orderId: `1-${item.requestId}`, reason: null });
  });

  it('does not look up an unkeyed request (its id is new by construction)', () => {
    const looked: string[] = [];
    const v: ReservationView = {
      ...view(),
      prior: (id) => {
        looked.push(id);
        return undefined;
      },
    };
    expect(decide(v, item, NOW)).toEqual({ kind: 'accept' });
    expect(looked).toEqual([]);
  });

  it('refuses a used or expired token without spending anything', () => {
    expect(decide(view({}, { used: [item.tokenId] }), item, NOW)).toEqual({ kind: 'reject', reason: 'TOKEN_INVALID', spendToken: false });
    expect(decide(view(), { ...item, tokenExpiresAt: NOW }, NOW)).toMatchObject({ reason: 'TOKEN_INVALID' });
  });

  it('checks the window, then pause, then the buyer, then the stock', () => {
    expect(decide(view({ startAt: NOW + 1 }), item, NOW)).toMatchObject({ reason: 'NOT_STARTED', spendToken: true });
    expect(decide(view({ endAt: NOW }), item, NOW)).toMatchObject({ reason: 'ENDED' });
    expect(decide(view({ paused: true, remaining: 0 }), item, NOW)).toMatchObject({ reason: 'PAUSED' });
    expect(decide(view({ remaining: 0 }, { holders: ['u1'] }), item, NOW)).toMatchObject({ reason: 'ALREADY_PURCHASED' });
    expect(decide(view({ remaining: 0 }), item, NOW)).toMatchObject({ reason: 'SOLD_OUT' });
  });
});

describe('helpers', () => {
  it('backs off exponentially with a cap', () => {
    expect([1, 2, 3, 4, 10, 20].map((a) => backoffSeconds(a))).toEqual([1, 2, 4, 8, 300, 300]);
    expect(backoffSeconds(7, 60)).toBe(60);
    expect([1, 2, 3, 4, 5].map((a) => backoffSeconds(a, 600, 120))).toEqual([120, 240, 480, 600, 600]);
    expect(backoffSeconds(10_000, 600, 120)).toBe(600);
  });

  it('numbers orders by date, goods and sequence', () => {
    expect(orderNumber(42, 7, Date.UTC(2026, 10, 30))).toBe('SK20261130-42-000007');
  });
});

describe("the goods' object's next alarm", () => {
  const none = { outboxAt: null, pruneLeft: false, leasesPending: false, mirrorRetryAt: null };
  it('is the earliest waiting work, never sooner than a moment after this one, and none when nothing waits', () => {
    expect(nextAlarmAt(NOW, none)).toBeNull();
    // The outbox's due row, not before 100 ms from now; pruning only when no row is due.
    expect(nextAlarmAt(NOW, { ...none, outboxAt: NOW - 5_000, pruneLeft: true })).toBe(NOW + 100);
    expect(nextAlarmAt(NOW, { ...none, outboxAt: NOW + 30_000, pruneLeft: true })).toBe(NOW + 30_000);
    expect(nextAlarmAt(NOW, { ...none, pruneLeft: true })).toBe(NOW + PRUNE_INTERVAL_MS);
    // A lease answer the instance before lost, and the mirror's retry, come sooner when due sooner.
    expect(nextAlarmAt(NOW, { ...none, outboxAt: NOW + 30_000, leasesPending: true })).toBe(NOW + 1_000);
    expect(nextAlarmAt(NOW, { ...none, pruneLeft: true, mirrorRetryAt: NOW + 2_000 })).toBe(NOW + 2_000);
    expect(nextAlarmAt(NOW, { ...none, mirrorRetryAt: NOW })).toBe(NOW + 100);
  });
});
