import { countOrdersByStatus, findGoods } from '../db/goods';
import { ORDER_STATUS, type OrderStatusName } from '../db/schema';
import type { Config } from './config';
import { db } from './goods';
import { goodsStock } from './routing';

export type GoodsStats = {
  goodsId: number;
  totalStock: number;
  doRemaining: number | null;
  dbStock: number;
  mirrorStock: number | null;
  orders: Record<OrderStatusName, number>;
  queued: number;
  outboxPending: number;
  consistent: boolean;
};

/**
 * The contract's stats: the stock as the object, Postgres and the mirror see it, orders by
 * status, and whether the invariants hold right now.
 */
export async function goodsStats(
  env: Env,
  config: Config,
  goodsId: number,
  mirrorStock: number | null = null,
): Promise<GoodsStats | undefined> {
  const [fromDb, snapshot] = await Promise.all([
    db(config, async (d) => {
      const row = await findGoods(d, goodsId);
      return row ? { row, counts: await countOrdersByStatus(d, goodsId) } : undefined;
    }),
    goodsStock(env, goodsId).snapshot(),
  ]);
  if (!fromDb) {
    return undefined;
  }
  const orders = Object.fromEntries(Object.entries(ORDER_STATUS).map(([name, code]) => [name, fromDb.counts[code] ?? 0])) as Record<
    OrderStatusName,
    number
  >;
  const doRemaining = snapshot?.remaining ?? null;
  const live = orders.PENDING_PAYMENT + orders.PAID;
  const queued = snapshot?.queued ?? 0;
  const consistent =
    doRemaining !== null &&
    queued === 0 &&
    doRemaining + live === fromDb.row.totalStock &&
    fromDb.row.stock === doRemaining &&
    (mirrorStock === null || mirrorStock === doRemaining);
  return {
    goodsId,
    totalStock: fromDb.row.totalStock,
    doRemaining,
    dbStock: fromDb.row.stock,
    mirrorStock,
    orders,
    queued,
    outboxPending: snapshot?.outboxPending ?? 0,
    consistent,
  };
}
