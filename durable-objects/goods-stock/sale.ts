import { dbOptions, withDb } from '../../db/client';
import { findGoods, toGoodsInit } from '../../db/goods';
import { getConfig } from '../../workers/kernel/config';
import type { GoodsInit, StockSnapshot } from '../../workers/kernel/contract';
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
  instance: { mirrorStaleSince: number | null; reserveRequests: number },
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
    refused: sale.refused,
    oldestQueuedAt: ages.oldestUnsettled,
    outboxPending: tally.unsent,
    oldestOutboxAt: ages.oldestUnsent,
    mirrorStaleSince: instance.mirrorStaleSince,
    reserveRequests: instance.reserveRequests,
  };
}
