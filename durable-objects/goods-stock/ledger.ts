import type { FailReason, OrderMessage, ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';
import { decide, orderNumber } from './rules';
import type { Sale, StockStorage } from './storage';

// Applying the rules' decisions to storage, inside the caller's synchronous transaction. The
// in-memory sale moves with the rows; the caller writes its counters once per batch.

/** One reservation: decide, then apply the decision. */
export function reserveOne(store: StockStorage, sale: Sale, item: ReserveItem, now: number): ReserveOutcome {
  const decision = decide(
    { sale, prior: (id) => store.prior(id), tokenUsed: (t) => store.tokenUsed(t), userHolds: (u) => store.userHolds(u) },
    item,
    now,
  );
  if (decision.kind === 'replay') {
    return decision.orderId
      ? { ok: true, requestId: item.requestId, orderId: decision.orderId, replay: true }
      : { ok: false, requestId: item.requestId, reason: decision.reason ?? 'BUSY', replay: true };
  }
  if (decision.kind === 'reject') {
    if (decision.spendToken) {
      store.spendToken(item);
    }
    if (item.keyed) {
      store.rememberRejection(item, decision.reason, now);
    }
    return { ok: false, requestId: item.requestId, reason: decision.reason, replay: false };
  }
  return { ok: true, requestId: item.requestId, orderId: accept(store, sale, item, now), replay: false };
}

function accept(store: StockStorage, sale: Sale, item: ReserveItem, now: number): string {
  const seq = sale.nextSeq++;
  sale.remaining--;
  const orderId = `${sale.goodsId}-${seq}`;
  const message: OrderMessage = {
    v: 1,
    kind: 'reserve',
    requestId: item.requestId,
    orderId,
    orderNo: orderNumber(sale.goodsId, seq, now),
    userId: item.userId,
    goodsId: sale.goodsId,
    activityId: sale.activityId,
    priceCents: sale.priceCents,
    payTimeoutSeconds: sale.payTimeoutSeconds,
    reservedAt: now,
  };
  store.recordAccepted(item, message, now);
  return orderId;
}

/** What a release gave back: whose unit, and whether it was still waiting for Postgres. */
export type Released = { userId: string; wasQueued: boolean };

/**
 * Gives a reservation's unit back (cancelled, timed out, or refused by Postgres). Idempotent:
 * undefined when there is nothing (left) to release.
 */
export function releaseOne(store: StockStorage, sale: Sale, requestId: string, reason: FailReason, now: number): Released | undefined {
  const row = store.reservation(requestId);
  if (!row || row.released === 1 || row.order_id === null) {
    return undefined;
  }
  store.markReleased(row, reason, now);
  sale.remaining = Math.min(sale.totalStock, sale.remaining + 1);
  store.saveRemaining(sale.remaining);
  return { userId: row.user_id, wasQueued: row.status === 'QUEUED' };
}
