import { and, asc, count, eq, lte, sql } from 'drizzle-orm';
import { OVERDUE_GRACE_MS } from '../workers/kernel/schedule';
import type { AnyDb, Db } from './client';
import { mqConsumeLog, ORDER_STATUS, seckillGoods, seckillOrder } from './schema';
import { recordOrderEvents } from './webhooks';

export type OrderRow = typeof seckillOrder.$inferSelect;

export type CloseResult =
  /** The order moved to the target status and its unit went back to stock; `webhookIds` are its events to send. */
  | { kind: 'closed'; order: OrderRow; webhookIds: string[] }
  /** The order was already closed or cancelled before (and maybe refunded since): nothing moved now. */
  | { kind: 'already-closed'; order: OrderRow }
  /** Paid: the unit stays sold. */
  | { kind: 'not-pending'; order: OrderRow }
  | { kind: 'not-yet-due'; order: OrderRow }
  | { kind: 'missing' };

/**
 * Closes a pending order (cancelled by its owner, or its payment window over) and returns its
 * units to Postgres' stock, in one transaction. The update is guarded by `status = PENDING`,
 * so a payment and a close racing for the same order end with exactly one winner. The shop's
 * order.closed event is written in the same transaction.
 */
export async function closePendingOrder(
  db: Db,
  orderId: string,
  to: typeof ORDER_STATUS.CANCELLED | typeof ORDER_STATUS.CLOSED_TIMEOUT,
  now = Date.now(),
): Promise<CloseResult> {
  return db.transaction(async (tx) => {
    const guard = [eq(seckillOrder.id, orderId), eq(seckillOrder.status, ORDER_STATUS.PENDING_PAYMENT)];
    if (to === ORDER_STATUS.CLOSED_TIMEOUT) {
      guard.push(sql`${seckillOrder.payDeadline} <= ${new Date(now)}`);
    }
    const [closed] = await tx
      .update(seckillOrder)
      .set({ status: to, closedAt: new Date(now), updatedAt: new Date(now) })
      .where(and(...guard))
      .returning();
    if (closed) {
      await tx
        .update(seckillGoods)
        .set({ stock: sql`${seckillGoods.stock} + ${closed.quantity}`, updatedAt: new Date(now) })
        .where(eq(seckillGoods.id, closed.goodsId));
      await tx
        .insert(mqConsumeLog)
        .values({ messageId: `close:${orderId}`, queue: 'lifecycle', status: 0, detail: String(to) })
        .onConflictDoNothing();
      const webhookIds = await recordOrderEvents(tx, 'order.closed', [closed]);
      return { kind: 'closed', order: closed, webhookIds };
    }
    const [order] = await tx.select().from(seckillOrder).where(eq(seckillOrder.id, orderId)).limit(1);
    if (!order) {
      return { kind: 'missing' };
    }
    // A refunded order was closed first (a payment that came late): its unit went back then.
    if (order.status === ORDER_STATUS.CANCELLED || order.status === ORDER_STATUS.CLOSED_TIMEOUT || order.closedAt !== null) {
      return { kind: 'already-closed', order };
    }
    if (order.status === ORDER_STATUS.PENDING_PAYMENT) {
      return { kind: 'not-yet-due', order };
    }
    return { kind: 'not-pending', order };
  });
}

/** One order by id. */
export async function findOrder(db: AnyDb, orderId: string): Promise<OrderRow | undefined> {
  const [row] = await db.select().from(seckillOrder).where(eq(seckillOrder.id, orderId)).limit(1);
  return row;
}

function overdue(now: number, goodsId: number | undefined) {
  const conditions = [
    eq(seckillOrder.status, ORDER_STATUS.PENDING_PAYMENT),
    lte(seckillOrder.payDeadline, new Date(now - OVERDUE_GRACE_MS)),
  ];
  if (goodsId !== undefined) {
    conditions.push(eq(seckillOrder.goodsId, goodsId));
  }
  return and(...conditions);
}

/** Pending orders past their deadline and the grace period (of one goods, or all), earliest deadline first. */
export function listOverdueOrders(
  db: Db,
  now: number,
  options: { goodsId?: number | undefined; limit: number },
): Promise<{ id: string }[]> {
  return db
    .select({ id: seckillOrder.id })
    .from(seckillOrder)
    .where(overdue(now, options.goodsId))
    .orderBy(asc(seckillOrder.payDeadline))
    .limit(options.limit);
}

/** How many of a goods' pending orders are past their deadline and the grace period. */
export async function countOverdueOrders(db: Db, goodsId: number, now: number): Promise<number> {
  const [row] = await db.select({ n: count() }).from(seckillOrder).where(overdue(now, goodsId));
  return row?.n ?? 0;
}
