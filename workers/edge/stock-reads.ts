import type { Config } from '../kernel/config';
import { FAIL_REASONS, type FailReason, type GoodsPlacement, type ResultView, type StockSnapshot } from '../kernel/contract';
import { readResult, readStocks } from '../mirror/client';
import { countRenewal, dropShared, readShared, sharedKey, writeShared } from './shared-copies';
import { goodsSnapshot } from './stock-shards';

// Shopper reads that try the mirror first and fall back to the goods' object, so polling
// shoppers and goods pages do not queue behind reservations on a hot object.

const isFailReason = (value: string): value is FailReason => (FAIL_REASONS as readonly string[]).includes(value);

/** A request's answer from the mirror, in the object's shape; undefined sends the caller to the object. */
export async function mirroredResult(config: Config, requestId: string): Promise<ResultView | undefined> {
  if (!config.redis) {
    return undefined;
  }
  const r = await readResult(config.redis, requestId);
  if (!r) {
    return undefined;
  }
  if (r.status === 'SUCCESS') {
    return { requestId, userId: r.userId, status: 'SUCCESS', orderId: r.orderId };
  }
  if (r.status === 'FAIL') {
    return isFailReason(r.reason) ? { requestId, userId: r.userId, status: 'FAIL', reason: r.reason } : undefined;
  }
  return { requestId, userId: r.userId, status: 'QUEUED' };
}

/** Remaining stock, and the object's snapshot when it had to be asked. */
export type StockRead = { remaining: number; snapshot?: StockSnapshot };

/**
 * How old a stock figure may be on a goods page: an isolate keeps what the mirror or the objects
 * said for this long, and the data center's copy serves its isolates as long after they gave
 * it. A crowd refreshing the page before a sale is then at most one read a second per data
 * center, of the mirror or of every shard of the goods, not one per page view.
 */
const PAGE_STOCK_MS = 1_000;
/** The data center keeps a copy no longer than this (an older one is never read). */
const SHARED_STOCK_KEEP_SECONDS = 60;
/**
 * What the view renewing a goods' figure waits for its shards: a shopper's page, which shows the
 * database's figure when they do not answer in time (the next view asks them again).
 */
const PAGE_OBJECT_MS = 1_000;

/**
 * What an isolate keeps of a goods' stock: the read (none before the first), when its source
 * gave it, and when a request last went to renew it.
 */
type KeptStock = { at: number; read: StockRead | undefined; renewingSince: number };
const kept = new Map<number, KeptStock>();

function stockKey(config: Config, goodsId: number): Promise<string> {
  return sharedKey(config.databaseUrl, `stock/${goodsId}`);
}

/**
 * Remaining stock of each goods, at most PAGE_STOCK_MS old: the isolate's own figure, else
 * renewed (renewStock). While one request renews a goods' figure the others answer from it, and
 * before there is one they answer none, as when no source answers (the page shows the
 * database's figure for that moment): no request waits on another, and a new isolate's first
 * views ask once, not once each.
 */
export async function readRemaining(env: Env, config: Config, goods: GoodsPlacement[]): Promise<(StockRead | undefined)[]> {
  const now = Date.now();
  const answers: (StockRead | undefined)[] = [];
  const renewing: { goods: GoodsPlacement; index: number; mine: KeptStock }[] = [];
  goods.forEach((g, index) => {
    const mine = kept.get(g.id) ?? { at: 0, read: undefined, renewingSince: 0 };
    if (now - mine.at < PAGE_STOCK_MS || now - mine.renewingSince < PAGE_STOCK_MS) {
      answers[index] = mine.read;
      return;
    }
    mine.renewingSince = now;
    kept.set(g.id, mine);
    renewing.push({ goods: g, index, mine });
  });
  if (renewing.length > 0) {
    const renewed = await renewStock(
      env,
      config,
      renewing.map((r) => r.goods),
    );
    renewing.forEach((r, k) => {
      answers[r.index] = renewed[k];
      if (renewed[k] === undefined) {
        // Nothing answered: the next request asks again.
        r.mine.renewingSince = 0;
      }
    });
  }
  return goods.map((_, index) => answers[index]);
}

/**
 * Fresh figures for `goods`: the data center's copies while under PAGE_STOCK_MS old, else the
 * mirror in one round trip, then the objects for whatever the mirror lacks (or for everything
 * when it is off or down); each new figure kept here and shared. Undefined where none answers.
 */
async function renewStock(env: Env, config: Config, goods: GoodsPlacement[]): Promise<(StockRead | undefined)[]> {
  const keys = await Promise.all(goods.map((g) => stockKey(config, g.id)));
  const shared = await Promise.all(keys.map((key) => readShared<StockRead>(key)));
  const at = Date.now();
  const reads = shared.map((copy, i): StockRead | undefined => {
    const g = goods[i];
    if (!copy || !g || at - copy.at >= PAGE_STOCK_MS) {
      return undefined;
    }
    keep(g.id, copy.at, copy.value);
    countRenewal('page_stock', 'data_center');
    return copy.value;
  });
  const missing = goods.flatMap((g, i) => (reads[i] === undefined ? [{ g, i }] : []));
  if (missing.length === 0) {
    return reads;
  }
  const mirrored = config.redis
    ? await readStocks(
        config.redis,
        missing.map((m) => m.g.id),
      )
    : undefined;
  await Promise.all(
    missing.map(async ({ g, i }, k) => {
      const m = mirrored?.[k];
      const fromMirror = m !== undefined && m !== null;
      const read = fromMirror ? { remaining: m } : await objectsRead(env, g);
      countRenewal('page_stock', read ? (fromMirror ? 'mirror' : 'objects') : 'failed');
      const key = keys[i];
      if (read && key) {
        reads[i] = read;
        keep(g.id, at, read);
        await writeShared(key, { at, value: read }, SHARED_STOCK_KEEP_SECONDS);
      }
    }),
  );
  return reads;
}

/** The goods' stock summed over its shards, with the snapshot; undefined when they do not answer in time. */
async function objectsRead(env: Env, goods: GoodsPlacement): Promise<StockRead | undefined> {
  const snapshot = await goodsSnapshot(env, goods, PAGE_OBJECT_MS).then(
    (s) => s.total,
    () => undefined,
  );
  return snapshot ? { remaining: snapshot.remaining, snapshot } : undefined;
}

function keep(goodsId: number, at: number, read: StockRead): void {
  kept.set(goodsId, { at, read, renewingSince: 0 });
}

/**
 * Forgets the goods' stock figures here and in the data center (after an admin change to its
 * sale: a pause, a new window), so the next page asks its objects.
 */
export async function forgetStock(config: Config, goodsId: number): Promise<void> {
  kept.delete(goodsId);
  await dropShared(await stockKey(config, goodsId));
}
