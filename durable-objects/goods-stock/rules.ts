import type { FailReason, ReserveItem } from '../../workers/kernel/contract';

// The seed's Lua script as plain functions over plain state: window, pause, token, per-user
// dedupe, stock. The Durable Object reads the view from its SQLite tables, calls `decide`,
// and applies the decision in the same synchronous transaction.

export type SaleState = {
  totalStock: number;
  remaining: number;
  startAt: number;
  endAt: number;
  paused: boolean;
};

/** A request already answered, remembered for idempotency. */
export type PriorAnswer = { orderId: string | null; reason: FailReason | null; released: boolean };

export type ReservationView = {
  sale: SaleState;
  prior(requestId: string): PriorAnswer | undefined;
  tokenUsed(tokenId: string): boolean;
  userHolds(userId: string): boolean;
};

export type Decision =
  | { kind: 'replay'; orderId: string | null; reason: FailReason | null }
  /** `spendToken`: the token was genuine and unused, so this attempt uses it up. */
  | { kind: 'reject'; reason: FailReason; spendToken: boolean }
  | { kind: 'accept' };

/** Decides one reservation. Pure: the caller applies the result before deciding the next. */
export function decide(view: ReservationView, item: ReserveItem, now: number): Decision {
  // Only a keyed request can come again with its id: an unkeyed one's id is random, minted at
  // the edge for this one attempt, so looking it up would only cost a read.
  const prior = item.keyed ? view.prior(item.requestId) : undefined;
  if (prior) {
    return { kind: 'replay', orderId: prior.orderId, reason: prior.reason };
  }
  if (item.tokenExpiresAt <= now || view.tokenUsed(item.tokenId)) {
    return { kind: 'reject', reason: 'TOKEN_INVALID', spendToken: false };
  }
  const { sale } = view;
  if (now < sale.startAt) {
    return { kind: 'reject', reason: 'NOT_STARTED', spendToken: true };
  }
  if (now >= sale.endAt) {
    return { kind: 'reject', reason: 'ENDED', spendToken: true };
  }
  if (sale.paused) {
    return { kind: 'reject', reason: 'PAUSED', spendToken: true };
  }
  if (view.userHolds(item.userId)) {
    return { kind: 'reject', reason: 'ALREADY_PURCHASED', spendToken: true };
  }
  if (sale.remaining <= 0) {
    return { kind: 'reject', reason: 'SOLD_OUT', spendToken: true };
  }
  return { kind: 'accept' };
}

/** Order number shown to shoppers: date, goods and the object's sequence. */
export function orderNumber(goodsId: number, seq: number, now: number): string {
  const d = new Date(now);
  const ymd = `${d.getUTCFullYear()}${String(d.getUTCMonth() + 1).padStart(2, '0')}${String(d.getUTCDate()).padStart(2, '0')}`;
  return `SK${ymd}-${goodsId}-${String(seq).padStart(6, '0')}`;
}
