import { type Db, withDb } from '../db/client';
import { type GoodsRow, listCurrentGoods } from '../db/goods';
import type { Config } from './config';
import { AppError } from './errors';
import type { StockSnapshot } from './schemas';

/** How long an isolate trusts its copy of the goods list. */
const GOODS_TTL_MS = 5_000;
/** An unknown id refreshes the list early, but no more often than this. */
const MISS_REFRESH_MS = 1_000;
/** Goods that ended within this window still answer ENDED instead of NOT_FOUND. */
const ENDED_VISIBLE_MS = 24 * 3600_000;

type Cached = { at: number; byId: Map<number, GoodsRow>; loading?: Promise<void> };
const cache: Cached = { at: 0, byId: new Map() };

export function dbOptions(config: Config) {
  return { databaseUrl: config.databaseUrl, wsProxy: config.pgWsProxy };
}

/** Runs `work` on Postgres with the configured driver settings. */
export function db<T>(config: Config, work: (db: Db) => Promise<T>): Promise<T> {
  return withDb(dbOptions(config), work);
}

/**
 * The current goods (on sale, upcoming, or recently ended), from an isolate-local copy
 * refreshed every few seconds by one request at a time: shoppers never wait on Postgres
 * while a copy exists, and unknown ids cost nothing.
 */
export async function currentGoods(config: Config, now = Date.now()): Promise<Map<number, GoodsRow>> {
  if (now - cache.at < GOODS_TTL_MS) {
    return cache.byId;
  }
  if (!cache.loading) {
    cache.loading = db(config, (d) => listCurrentGoods(d, now, ENDED_VISIBLE_MS))
      .then((rows) => {
        cache.byId = new Map(rows.map((r) => [r.id, r]));
        cache.at = Date.now();
      })
      .finally(() => {
        cache.loading = undefined;
      });
  }
  if (cache.at === 0) {
    try {
      await cache.loading;
    } catch {
      throw new AppError('UNAVAILABLE', 'the goods list is unavailable, please retry');
    }
  }
  return cache.byId;
}

/**
 * One goods a shopper may see: from the cached list only, so an unknown or made-up id costs
 * neither a Postgres query nor a Durable Object.
 */
export async function getGoods(config: Config, goodsId: number): Promise<GoodsRow> {
  let row = (await currentGoods(config)).get(goodsId);
  if (!row && Date.now() - cache.at > MISS_REFRESH_MS) {
    // A goods created moments ago in another isolate: refresh, at most once a second.
    cache.at = 0;
    row = (await currentGoods(config)).get(goodsId);
  }
  if (!row) {
    throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
  }
  return row;
}

/** Forget the cached list (after an admin change in this isolate). */
export function invalidateGoods(): void {
  cache.at = 0;
}

export type GoodsStatus = 'UPCOMING' | 'ON_SALE' | 'PAUSED' | 'SOLD_OUT' | 'ENDED';

/** The contract's goods shape. */
export function goodsView(row: GoodsRow, snapshot: StockSnapshot | undefined, remainingOverride: number | undefined, now: number) {
  const remaining = remainingOverride ?? snapshot?.remaining ?? row.stock;
  const paused = snapshot?.paused ?? row.status === 1;
  const startAt = row.startAt.getTime();
  const endAt = row.endAt.getTime();
  let status: GoodsStatus = 'ON_SALE';
  if (now >= endAt) {
    status = 'ENDED';
  } else if (remaining <= 0) {
    status = 'SOLD_OUT';
  } else if (paused) {
    status = 'PAUSED';
  } else if (now < startAt) {
    status = 'UPCOMING';
  }
  return {
    goodsId: row.id,
    activityId: row.activityId,
    title: row.title,
    imageUrl: row.imageUrl,
    priceCents: row.priceCents,
    totalStock: row.totalStock,
    remaining,
    startAt: row.startAt.toISOString(),
    endAt: row.endAt.toISOString(),
    status,
    payTimeoutSeconds: row.payTimeoutSeconds,
    serverTime: new Date(now).toISOString(),
  };
}
