import { and, asc, eq, lte } from 'drizzle-orm';
import { withDb } from '../../db/client';
import { listCurrentGoods, toGoodsInit } from '../../db/goods';
import { closePendingOrder } from '../../db/lifecycle';
import { ORDER_STATUS, seckillOrder } from '../../db/schema';
import { getConfig } from '../config';
import { dbOptions } from '../goods';
import { log } from '../log';
import { goodsStock } from '../routing';

/** Goods starting within this window are pre-warmed. */
const PREWARM_AHEAD_MS = 5 * 60_000;

/**
 * Every minute: pre-warm goods about to start, and close overdue unpaid orders whose timeout
 * message never came (the safety net under the delayed queue).
 */
export async function runScheduled(env: Env, now = Date.now()) {
  const config = getConfig(env);
  return withDb({ ...dbOptions(config), max: 2 }, async (db) => {
    const goods = await listCurrentGoods(db, now);
    let prewarmed = 0;
    for (const g of goods.filter((r) => r.startAt.getTime() - now <= PREWARM_AHEAD_MS)) {
      await goodsStock(env, g.id).init(toGoodsInit(g));
      prewarmed++;
    }
    const overdue = await db
      .select({ id: seckillOrder.id })
      .from(seckillOrder)
      .where(and(eq(seckillOrder.status, ORDER_STATUS.PENDING_PAYMENT), lte(seckillOrder.payDeadline, new Date(now))))
      .orderBy(asc(seckillOrder.payDeadline))
      .limit(500);
    let closed = 0;
    for (const o of overdue) {
      const r = await closePendingOrder(db, o.id, ORDER_STATUS.CLOSED_TIMEOUT, now);
      if (r.kind === 'closed') {
        await goodsStock(env, r.order.goodsId).release(r.order.requestId, 'CLOSED_TIMEOUT');
        closed++;
      }
    }
    log.info('cron.run', { prewarmed, closedOverdue: closed });
    return { prewarmed, closedOverdue: closed };
  });
}
