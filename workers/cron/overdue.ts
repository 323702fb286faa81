import { and, asc, eq, lte } from 'drizzle-orm';
import type { Db } from '../../db/client';
import { closePendingOrder } from '../../db/lifecycle';
import { ORDER_STATUS, seckillOrder } from '../../db/schema';
import { goodsStock } from '../routing';

/**
 * The safety net under the delayed timeout queue: closes pending orders past their deadline
 * whose timeout message never came, and returns their units.
 */
export async function closeOverdueOrders(env: Env, db: Db, now: number, limit = 500): Promise<number> {
  const overdue = await db
    .select({ id: seckillOrder.id })
    .from(seckillOrder)
    .where(and(eq(seckillOrder.status, ORDER_STATUS.PENDING_PAYMENT), lte(seckillOrder.payDeadline, new Date(now))))
    .orderBy(asc(seckillOrder.payDeadline))
    .limit(limit);
  let closed = 0;
  for (const o of overdue) {
    const r = await closePendingOrder(db, o.id, ORDER_STATUS.CLOSED_TIMEOUT, now);
    if (r.kind === 'closed') {
      await goodsStock(env, r.order.goodsId).release(r.order.requestId, 'CLOSED_TIMEOUT');
      closed++;
    }
  }
  return closed;
}
