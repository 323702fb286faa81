import { dbOptions, httpDb } from '../../db/client';
import { type GoodsRow, listCurrentGoods } from '../../db/goods';
import type { Config } from '../kernel/config';
import { AppError, unavailable } from '../kernel/errors';
import { log } from '../kernel/log';

/** How long an isolate trusts its copy of the goods list. */
const GOODS_TTL_MS = 5_000;
/** An unknown id refreshes the list early, but no more often than this. */
const MISS_REFRESH_MS = 1_000;
/** Goods that ended within this window still answer ENDED instead of NOT_FOUND. */
const ENDED_VISIBLE_MS = 24 * 3600_000;

type Cached = { at: number; byId: Map<number, GoodsRow>; refreshStartedAt: number; missRefreshAt: number };
const cache: Cached = { at: 0, byId: new Map(), refreshStartedAt: 0, missRefreshAt: 0 };

/**
 * The current goods (on sale, upcoming, or recently ended), from an isolate-local copy.
 *
 * No request ever waits on a promise another request started: workerd ties I/O to the
 * request that made it, so such a wait can hang forever once that request ends. A stale copy
 * is refreshed by ONE request with its own query while the others keep answering from the
 * copy; only an isolate with no copy at all makes each request load it.
 */
export async function currentGoods(config: Config, now = Date.now()): Promise<Map<number, GoodsRow>> {
  if (now - cache.at < GOODS_TTL_MS) {
    return cache.byId;
  }
  if (cache.at > 0 && now - cache.refreshStartedAt < GOODS_TTL_MS) {
    return cache.byId;
  }
  cache.refreshStartedAt = now;
  try {
    await reload(config);
  } catch (error) {
    if (cache.at > 0) {
      // Postgres is away: a stale list still answers shoppers; the next refresh retries.
      log.warn('goods.refresh_failed', { error });
      return cache.byId;
    }
    log.warn('goods.load_failed', { error });
    throw unavailable('the goods list is unavailable, please retry');
  }
  return cache.byId;
}

async function reload(config: Config): Promise<void> {
  // One statement over SQL over HTTP: no Postgres session opened for it.
  const rows = await listCurrentGoods(httpDb(dbOptions(config)), Date.now(), ENDED_VISIBLE_MS);
  cache.byId = new Map(rows.map((r) => [r.id, r]));
  cache.at = Date.now();
}

/**
 * One goods a shopper may see: from the cached list only, so an unknown or made-up id costs
 * neither a Postgres query nor a Durable Object.
 */
export async function getGoods(config: Config, goodsId: number): Promise<GoodsRow> {
  let row = (await currentGoods(config)).get(goodsId);
  const now = Date.now();
  if (!row && now - cache.at > MISS_REFRESH_MS && now - cache.missRefreshAt > MISS_REFRESH_MS) {
    // Perhaps a goods created moments ago in another isolate: look again, at most once a second.
    cache.missRefreshAt = now;
    await reload(config).catch((error: unknown) => log.warn('goods.refresh_failed', { error }));
    row = cache.byId.get(goodsId);
  }
  if (!row) {
    throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
  }
  return row;
}

/** Reloads the list now (after an admin change in this isolate), in the caller's request. */
export async function invalidateGoods(config: Config): Promise<void> {
  await reload(config);
}
