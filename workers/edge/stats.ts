import { withDbFor } from '../../db/client';
import { countOpenDeadLetters } from '../../db/dead-letters';
import { countOrdersByStatus, findGoods } from '../../db/goods';
import { ORDER_STATUS, type OrderStatusName } from '../../db/schema';
import { countDeliveries, type DeliveryCounts } from '../../db/webhooks';
import type { Config } from '../kernel/config';
import { unavailable } from '../kernel/errors';
import type { ShardStock } from '../kernel/shards';
import { within } from '../kernel/within';
import { OPERATOR_READ, readStocks } from '../mirror/client';
import { goodsSnapshot, ShardsLate } from './stock-shards';
import { roomStatsOf } from './waiting-room';

/**
 * What the stats wait for an object's answer: an operator's read, not a shopper's, but one an
 * object that stopped answering must not hold for as long as the object does.
 */
const STATS_OBJECT_MS = 3_000;

export type GoodsStats = {
  goodsId: number;
  totalStock: number;
  doRemaining: number | null;
  dbStock: number;
  mirrorStock: number | null;
  /** off: no Redis configured; ok: read; missing: Redis has no stock key; unreachable: Redis did not answer. */
  mirror: 'off' | 'ok' | 'missing' | 'unreachable';
  orders: Record<OrderStatusName, number>;
  queued: number;
  /** Units Postgres refused although the object had them, held aside until reconciliation puts them back (0 when healthy). */
  refusedUnits: number;
  outboxPending: number;
  /** Messages of this goods that exhausted their retries and were not re-driven yet. */
  deadLetters: number;
  consistent: boolean;
  /** The shop's webhook deliveries of this goods' orders, by state. */
  webhooks: DeliveryCounts;
  /** The waiting room: shoppers in line, admissions per second, and the room's other totals. */
  queue: Awaited<ReturnType<typeof roomStatsOf>> | null;
  /** Each stock shard's figures (one entry for a one-shard goods); they add up to the totals. */
  shards: ShardStock[];
  /** Calls between the goods' shards (leases and give-backs) since their objects last started; 0 with one shard. */
  poolCalls: number;
  /** Shoppers' result reads its stock shards hold now, waiting for their orders to be written (`?wait=`). */
  heldResultReads: number;
};

/**
 * The contract's stats: the stock as the object, Postgres and the mirror see it, orders by
 * status, and whether the invariants hold right now. A mirror that does not answer does not
 * make the goods inconsistent (it is a cache), but one that answers wrongly does.
 */
export async function goodsStats(env: Env, config: Config, goodsId: number): Promise<GoodsStats | undefined> {
  const found = await withDbFor(config, async (d) => {
    const row = await findGoods(d, goodsId);
    if (!row) {
      return undefined;
    }
    // The row first: it says where the goods' object lives; the rest is read side by side.
    const [counts, deadLetters, webhooks, stock, mirrored, queue] = await Promise.all([
      countOrdersByStatus(d, goodsId),
      countOpenDeadLetters(d, goodsId),
      countDeliveries(d, goodsId),
      // The stock's figures whole or not at all: without a shard's, every sum below would be wrong.
      goodsSnapshot(env, row, STATS_OBJECT_MS).catch((error: unknown) => {
        throw error instanceof ShardsLate
          ? unavailable(`the stock shards of goods ${goodsId} did not answer in time, please retry`)
          : error;
      }),
      config.redis ? readStocks(config.redis, [goodsId], OPERATOR_READ) : Promise.resolve(undefined),
      within(roomStatsOf(env, row), STATS_OBJECT_MS, () => new Error('late')).catch(() => null),
    ]);
    return { fromDb: { row, counts, deadLetters, webhooks }, snapshot: stock.total, shards: stock.shards, mirrored, queue };
  });
  if (!found) {
    return undefined;
  }
  const { fromDb, snapshot, shards, mirrored, queue } = found;
  const mirrorStock = mirrored?.[0] ?? null;
  const mirror = !config.redis ? 'off' : !mirrored ? 'unreachable' : mirrorStock === null ? 'missing' : 'ok';
  const orders = Object.fromEntries(Object.entries(ORDER_STATUS).map(([name, code]) => [name, fromDb.counts[code] ?? 0])) as Record<
    OrderStatusName,
    number
  >;
  const doRemaining = snapshot?.remaining ?? null;
  const live = orders.PENDING_PAYMENT + orders.PAID;
  const queued = snapshot?.queued ?? 0;
  const refusedUnits = snapshot?.refused ?? 0;
  // Refused units break the first sum on purpose: Postgres is missing units the object had.
  const consistent =
    doRemaining !== null &&
    queued === 0 &&
    refusedUnits === 0 &&
    doRemaining + live === fromDb.row.totalStock &&
    fromDb.row.stock === doRemaining &&
    (mirror === 'off' || mirror === 'unreachable' || mirrorStock === doRemaining);
  return {
    goodsId,
    totalStock: fromDb.row.totalStock,
    doRemaining,
    dbStock: fromDb.row.stock,
    mirrorStock,
    mirror,
    orders,
    queued,
    refusedUnits,
    outboxPending: snapshot?.outboxPending ?? 0,
    deadLetters: fromDb.deadLetters,
    consistent,
    webhooks: fromDb.webhooks,
    queue,
    shards,
    poolCalls: snapshot?.poolCalls ?? 0,
    heldResultReads: snapshot?.heldResultReads ?? 0,
  };
}
