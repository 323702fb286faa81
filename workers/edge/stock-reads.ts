import type { Config } from '../kernel/config';
import { FAIL_REASONS, type FailReason, type GoodsPlacement, type ResultView, type StockSnapshot } from '../kernel/contract';
import { readResult, readStocks } from '../mirror/client';
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
 * Remaining stock of each goods: the mirror in one round trip, then the object for whatever
 * the mirror lacks (or for everything when it is off or down). An entry is undefined when
 * neither answers (the page shows the database's figure).
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
      const snapshot = await goodsSnapshot(env, g).then(
        (s) => s.total,
        () => undefined,
      );
      return snapshot ? { remaining: snapshot.remaining, snapshot } : undefined;
    }),
  );
}
