import { dbOptions, withDb } from '../../db/client';
import { findGoods, toGoodsInit } from '../../db/goods';
import { getConfig } from '../../workers/kernel/config';
import type { FailReason, GoodsInit, ResultView, StockSnapshot } from '../../workers/kernel/contract';
import type { Sale, StockStorage } from './storage';

// The sale's two outside views: where its settings come from when nobody pre-warmed the
// object, and the snapshot the edge, the stats and reconciliation read.

/** The goods' settings from Postgres (first use without pre-warm), or undefined when there is no such goods. */
export async function goodsFromPostgres(env: Env, goodsId: number): Promise<GoodsInit | undefined> {
  const row = await withDb(dbOptions(getConfig(env), 1), (db) => findGoods(db, goodsId));
  return row ? toGoodsInit(row) : undefined;
}

/** The object's own view of its sale, stock and backlog: a few rows read, whatever the sale's size. */
export function stockSnapshot(
  store: StockStorage,
  sale: Sale,
  instance: { mirrorStaleSince: number | null; reserveRequests: number; heldResultReads: number },
): StockSnapshot {
  const tally = store.tally();
  const ages = store.outboxAges();
  return {
    goodsId: sale.goodsId,
    initialized: true,
    totalStock: sale.totalStock,
    remaining: sale.remaining,
    startAt: sale.startAt,
    endAt: sale.endAt,
    paused: sale.paused,
    queued: tally.queued,
    confirmed: tally.confirmed,
    admittedQueued: tally.admittedQueued,
    admittedConfirmed: tally.admittedConfirmed,
    refused: sale.refused,
    oldestQueuedAt: ages.oldestUnsettled,
    outboxPending: tally.unsent,
    oldestOutboxAt: ages.oldestUnsent,
    mirrorStaleSince: instance.mirrorStaleSince,
    reserveRequests: instance.reserveRequests,
    heldResultReads: instance.heldResultReads,
  };
}

/** True while the sale takes reservations (inside its window, not paused). */
export function saleIsOn(sale: Sale, now: number): boolean {
  return now >= sale.startAt && now < sale.endAt && !sale.paused;
}

/** The answer for one request, for the result route (which checks the owner). */
export function resultView(store: StockStorage, requestId: string): ResultView | undefined {
  const r = store.reservation(requestId);
  if (!r) {
    return undefined;
  }
  return {
    requestId: r.request_id,
    userId: r.user_id,
    status: r.status,
    ...(r.order_id && r.status !== 'FAIL' ? { orderId: r.order_id } : {}),
    ...(r.reason ? { reason: r.reason as FailReason } : {}),
  };
}
