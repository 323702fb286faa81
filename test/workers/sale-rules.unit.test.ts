// The sale rules as the goods' object decides them: pure functions over plain state.
import { describe, expect, it } from 'vitest';
import { decide, overLimit, type SaleState } from '../../durable-objects/goods-stock/rules';
import type { ReserveItem } from '../../workers/kernel/contract';
import { NOW, reservationView, type ViewState } from './rules-view';

/** An allowlist answers no unless a test says otherwise. */
const view = (sale: Partial<SaleState>, state: ViewState = {}) => reservationView(sale, { allowed: false, ...state });

const item = (quantity?: number): ReserveItem => ({
  requestId: '1.aaaaaaaaaaaaaaaaaaaaaa',
  userId: 'u1',
  tokenId: 'tok-00001',
  tokenExpiresAt: NOW + 60_000,
  keyed: false,
  ...(quantity === undefined ? {} : { quantity }),
});

describe('overLimit', () => {
  it('lets a shopper hold up to the limit in one or several purchases', () => {
    const sale = { perUserLimit: 3, limitScope: 'goods' as const };
    expect(overLimit(sale, 0, 3)).toBeUndefined();
    expect(overLimit(sale, 1, 2)).toBeUndefined();
    expect(overLimit(sale, 2, 2)).toBe('LIMIT_REACHED');
    expect(overLimit(sale, 3, 1)).toBe('LIMIT_REACHED');
    expect(overLimit(sale, 0, 4)).toBe('LIMIT_REACHED');
  });

  it('keeps ALREADY_PURCHASED for the default one unit per shopper', () => {
    expect(overLimit({ perUserLimit: 1, limitScope: 'goods' }, 1, 1)).toBe('ALREADY_PURCHASED');
    expect(overLimit({ perUserLimit: 1, limitScope: 'goods' }, 0, 1)).toBeUndefined();
  });

  it('allows one live reservation in the activity scope, of up to the limit', () => {
    const sale = { perUserLimit: 2, limitScope: 'activity' as const };
    expect(overLimit(sale, 0, 2)).toBeUndefined();
    expect(overLimit(sale, 1, 1)).toBe('LIMIT_REACHED');
    expect(overLimit({ perUserLimit: 1, limitScope: 'activity' }, 1, 1)).toBe('LIMIT_REACHED');
  });
});

describe('decide with sale rules', () => {
  it('refuses a quantity above the units left whole, naming them, and plain SOLD_OUT at none', () => {
    expect(decide(view({ perUserLimit: 5, remaining: 2 }), item(3), NOW)).toEqual({
      kind: 'reject',
      reason: 'SOLD_OUT',
      spendToken: true,
      remaining: 2,
    });
    expect(decide(view({ perUserLimit: 5, remaining: 2 }), item(2), NOW)).toEqual({ kind: 'accept' });
    expect(decide(view({ perUserLimit: 5, remaining: 0 }), item(1), NOW)).toEqual({ kind: 'reject', reason: 'SOLD_OUT', spendToken: true });
  });

  it('checks the allowlist before the limit and the stock', () => {
    const sale = { eligibility: 'allowlist' as const, remaining: 0 };
    expect(decide(view(sale, { allowed: false, units: 5 }), item(), NOW)).toMatchObject({ kind: 'reject', reason: 'NOT_ELIGIBLE' });
    expect(decide(view(sale, { allowed: true }), item(), NOW)).toMatchObject({ kind: 'reject', reason: 'SOLD_OUT' });
    expect(decide(view({ eligibility: 'allowlist' }, { allowed: true }), item(), NOW)).toEqual({ kind: 'accept' });
    // An open sale never asks the list.
    expect(decide(view({ eligibility: 'open' }, { allowed: false }), item(), NOW)).toEqual({ kind: 'accept' });
  });

  it('treats an item without a quantity as one unit', () => {
    expect(decide(view({ perUserLimit: 1 }, { units: 0 }), item(), NOW)).toEqual({ kind: 'accept' });
    expect(decide(view({ perUserLimit: 2 }, { units: 1 }), item(), NOW)).toEqual({ kind: 'accept' });
    expect(decide(view({ perUserLimit: 2 }, { units: 1 }), item(2), NOW)).toMatchObject({ reason: 'LIMIT_REACHED' });
  });
});
