import type { Config } from '../kernel/config';
import { FAIL_REASONS, type FailReason, type GoodsPlacement, type ResultView, type StockSnapshot } from '../kernel/contract';
import { readResult, readStocks } from '../mirror/client';
import { dropShared, readShared, sharedKey, writeShared } from './shared-copies';
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
 * Remaining stock of each goods: the mirror in one round trip, then the objects for whatever
 * the mirror lacks (or for everything when it is off or down), as kept below. An entry is
 * undefined when neither answers (the page shows the database's figure).
 */
export async function readRemaining(env: Env, config: Config, goods: GoodsPlacement[]): Promise<(StockRead | undefined)[]> {
  const mirrored = config.redis
    ? await readStocks(
        config.redis,
        goods.map((g) => g.id),
      )
    : undefined;
  return Promise.all(
    goods.map(async (g, i): Promise<StockRead | undefined> => {
      const m = mirrored?.[i];
      if (m !== undefined && m !== null) {
        return { remaining: m };
      }
      return objectStock(env, config, g);
    }),
  );
}

/**
 * How old a stock figure from the objects may be on a goods page: an isolate keeps what they
 * said for this long, and the data center's copy serves its isolates as long after the objects
 * gave it. A crowd refreshing the page before a sale is then at most one read of the goods'
 * shards a second per data center, not one per page view (each of which asks every shard).
 */
const PAGE_STOCK_MS = 1_000;
/** The data center keeps a copy no longer than this (an older one is never read). */
const SHARED_STOCK_KEEP_SECONDS = 60;

/**
 * What an isolate keeps of a goods' stock: the read (none before the first), when the objects
 * gave it, and when a request last went to renew it.
 */
type KeptStock = { at: number; read: StockRead | undefined; renewingSince: number };
const kept = new Map<number, KeptStock>();

function stockKey(config: Config, goodsId: number): Promise<string> {
  return sharedKey(config.databaseUrl, `stock/${goodsId}`);
}

/**
 * The goods' stock as its objects last said it, at most PAGE_STOCK_MS old: the isolate's own
 * copy, else the data center's, else the objects themselves (whose figure both then keep). While
 * one request renews the isolate's copy the others answer from it, and before there is one they
 * answer none (the page shows the database's figure for that moment): no request waits on
 * another, and a new isolate's first views ask the shards once, not once each.
 */
async function objectStock(env: Env, config: Config, goods: GoodsPlacement): Promise<StockRead | undefined> {
  const now = Date.now();
  const mine = kept.get(goods.id) ?? { at: 0, read: undefined, renewingSince: 0 };
  if (now - mine.at < PAGE_STOCK_MS || now - mine.renewingSince < PAGE_STOCK_MS) {
    return mine.read;
  }
  mine.renewingSince = now;
  kept.set(goods.id, mine);
  const key = await stockKey(config, goods.id);
  const shared = await readShared<StockRead>(key);
  if (shared && Date.now() - shared.at < PAGE_STOCK_MS) {
    keep(goods.id, shared.at, shared.value);
    return shared.value;
  }
  const at = Date.now();
  const snapshot = await goodsSnapshot(env, goods).then(
    (s) => s.total,
    () => undefined,
  );
  if (!snapshot) {
    // Neither answers: the next request asks again.
    mine.renewingSince = 0;
    return undefined;
  }
  const read = { remaining: snapshot.remaining, snapshot };
  keep(goods.id, at, read);
  await writeShared(key, { at, value: read }, SHARED_STOCK_KEEP_SECONDS);
  return read;
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
