import type { Eligibility, FailReason, LimitScope, ReserveItem } from '../../workers/kernel/contract';

// The seed's Lua script as plain functions over plain state: window, pause, token, eligibility,
// the per-shopper limit, stock (in units). The Durable Object reads the view from its SQLite
// tables, calls `decide`, and applies the decision in the same synchronous transaction.

export type SaleState = {
  totalStock: number;
  remaining: number;
  startAt: number;
  endAt: number;
  paused: boolean;
  /** Units one shopper may hold at once (over one or several purchases). */
  perUserLimit: number;
  /** `activity`: one live reservation per shopper here; Postgres' unique index holds it across the activity. */
  limitScope: LimitScope;
  eligibility: Eligibility;
};

/** A request already answered, remembered for idempotency. */
export type PriorAnswer = { orderId: string | null; reason: FailReason | null; released: boolean };

export type ReservationView = {
  sale: SaleState;
  prior(requestId: string): PriorAnswer | undefined;
  tokenUsed(tokenId: string): boolean;
  /** Units the shopper holds now. */
  userUnits(userId: string): number;
  /** Whether the shopper is on the sale's allowlist (asked only of `allowlist` sales). */
  allowed(userId: string): boolean;
};

export type Decision =
  | { kind: 'replay'; orderId: string | null; reason: FailReason | null }
  /** `spendToken`: the token was genuine and unused, so this attempt uses it up. */
  | { kind: 'reject'; reason: FailReason; spendToken: boolean; remaining?: number }
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
  if (sale.eligibility === 'allowlist' && !view.allowed(item.userId)) {
    return { kind: 'reject', reason: 'NOT_ELIGIBLE', spendToken: true };
  }
  const limited = overLimit(sale, view.userUnits(item.userId), quantityOf(item));
  if (limited) {
    return { kind: 'reject', reason: limited, spendToken: true };
  }
  if (sale.remaining <= 0) {
    return { kind: 'reject', reason: 'SOLD_OUT', spendToken: true };
  }
  if (sale.remaining < quantityOf(item)) {
    // Refused whole, never part-filled: the shopper is told how many units are left.
    return { kind: 'reject', reason: 'SOLD_OUT', spendToken: true, remaining: sale.remaining };
  }
  return { kind: 'accept' };
}

/** The units a reservation asks for (1 from callers that name none). */
export function quantityOf(item: Pick<ReserveItem, 'quantity'>): number {
  return item.quantity ?? 1;
}

/**
 * Why a shopper holding `held` units may not take `quantity` more, or undefined when they may.
 * One unit per shopper (the default) keeps its old answer, ALREADY_PURCHASED; any other limit,
 * and the activity scope's one live order, answer LIMIT_REACHED.
 */
export function overLimit(
  sale: Pick<SaleState, 'perUserLimit' | 'limitScope'>,
  held: number,
  quantity: number,
): 'ALREADY_PURCHASED' | 'LIMIT_REACHED' | undefined {
  if (held > 0 && sale.limitScope === 'activity') {
    return 'LIMIT_REACHED';
  }
  if (held + quantity <= sale.perUserLimit) {
    return undefined;
  }
  return held > 0 && sale.perUserLimit === 1 && sale.limitScope === 'goods' ? 'ALREADY_PURCHASED' : 'LIMIT_REACHED';
}

/** Order number shown to shoppers: date, goods and the object's sequence. */
export function orderNumber(goodsId: number, seq: number, now: number): string {
  const d = new Date(now);
  const ymd = `${d.getUTCFullYear()}${String(d.getUTCMonth() + 1).padStart(2, '0')}${String(d.getUTCDate()).padStart(2, '0')}`;
  return `SK${ymd}-${goodsId}-${String(seq).padStart(6, '0')}`;
}
