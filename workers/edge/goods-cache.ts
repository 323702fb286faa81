import { getTableColumns } from 'drizzle-orm';
import { dbOptions, httpDb, SHOPPER_STATEMENT_MS } from '../../db/client';
import { type GoodsRow, listCurrentGoods } from '../../db/goods';
import { seckillGoods } from '../../db/schema';
import type { Config } from '../kernel/config';
import { AppError, unavailable } from '../kernel/errors';
import { log } from '../kernel/log';
import { countRenewal, readShared, type SharedCopy, sharedKey, writeShared } from './shared-copies';

/** How long an isolate trusts its copy of the goods list. */
export const GOODS_TTL_MS = 4_000;
/**
 * How long the data center's shared copy answers its isolates before the next one to refresh
 * asks Postgres: a list is at most GOODS_TTL_MS + SHARED_TTL_MS old (5 s, as when each isolate
 * asked Postgres itself).
 */
const SHARED_TTL_MS = 1_000;
/** How long a shared copy is kept at all: while Postgres is away, an isolate with no list of its own answers from it. */
const SHARED_KEEP_SECONDS = 600;
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
 * is refreshed by ONE request while the others keep answering from the copy; only an isolate
 * with no copy at all makes each request load it. A refresh reads the data center's shared
 * copy first (sharedList), so a crowd's isolates ask Postgres about once a second per data
 * center rather than each every few seconds, and a new isolate's first shoppers do not wait
 * on Postgres.
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
    await reload(config, 'shared');
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

/**
 * The list into this isolate. `shared`: the data center's copy while it is fresh; otherwise
 * Postgres, whose list then becomes the shared copy (and a shared copy of any age answers if
 * Postgres does not). `postgres`: Postgres only (an admin change, or an id the list lacks).
 */
async function reload(config: Config, from: 'shared' | 'postgres'): Promise<void> {
  const shared = from === 'shared' ? await sharedList(config) : undefined;
  if (shared && Date.now() - shared.at < SHARED_TTL_MS) {
    countRenewal('goods_list', 'data_center');
    adopt(shared.value);
    return;
  }
  const at = Date.now();
  let rows: GoodsRow[];
  try {
    // One statement over SQL over HTTP: no Postgres session opened for it. A request waits on it
    // (the one renewing the isolate's list): given up after SHOPPER_STATEMENT_MS, as failed.
    rows = await listCurrentGoods(httpDb(dbOptions(config), SHOPPER_STATEMENT_MS), at, ENDED_VISIBLE_MS);
  } catch (error) {
    countRenewal('goods_list', 'failed');
    if (!shared) {
      throw error;
    }
    log.warn('goods.refresh_failed', { error, sharedAgeMs: Date.now() - shared.at });
    adopt(shared.value);
    return;
  }
  countRenewal('goods_list', 'postgres');
  adopt(rows);
  await writeShared(await sharedListKey(config.databaseUrl), { at, value: rows }, SHARED_KEEP_SECONDS);
}

function adopt(rows: GoodsRow[]): void {
  cache.byId = new Map(rows.map((r) => [r.id, r]));
  cache.at = Date.now();
}

/** The columns of a goods row that are dates (from the table), which a shared copy carries as ISO strings. */
const DATE_COLUMNS = Object.entries(getTableColumns(seckillGoods)).flatMap(([name, column]) => (column.dataType === 'date' ? [name] : []));

/** The Cache API's key of the deployment's shared list (shared-copies.ts). */
export function sharedListKey(databaseUrl: string): Promise<string> {
  return sharedKey(databaseUrl, 'goods-list');
}

/** The data center's copy of the list, of any age, with its dates as dates. */
async function sharedList(config: Config): Promise<SharedCopy<GoodsRow[]> | undefined> {
  const list = await readShared<GoodsRow[]>(await sharedListKey(config.databaseUrl));
  for (const row of list?.value ?? []) {
    const fields: Record<string, unknown> = row;
    for (const column of DATE_COLUMNS) {
      fields[column] = new Date(String(fields[column]));
    }
  }
  return list;
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
    await reload(config, 'postgres').catch((error: unknown) => log.warn('goods.refresh_failed', { error }));
    row = cache.byId.get(goodsId);
  }
  if (!row) {
    throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
  }
  return row;
}

/**
 * Reloads the list now from Postgres (after an admin change in this isolate), in the caller's
 * request: this isolate and the data center's copy have the change at once, the other data
 * centers within the list's 5 s.
 */
export async function invalidateGoods(config: Config): Promise<void> {
  await reload(config, 'postgres');
}
