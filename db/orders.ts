import { and, eq, gte, inArray, sql } from 'drizzle-orm';
import type { FailReason, OrderMessage } from '../workers/schemas';
import type { Db } from './client';
import { mqConsumeLog, seckillGoods, seckillOrder } from './schema';

export type WriteResult =
  | { requestId: string; ok: true; orderId: string; created: boolean }
  | { requestId: string; ok: false; reason: FailReason };

/** Postgres refused the batch's guarded stock update: there is less stock than orders. */
class StockGuardFailed extends Error {}

function orderRow(m: OrderMessage, now: number) {
  return {
    id: m.orderId,
    orderNo: m.orderNo,
    requestId: m.requestId,
    userId: m.userId,
    goodsId: m.goodsId,
    activityId: m.activityId,
    priceCents: m.priceCents,
    reservedAt: new Date(m.reservedAt),
    // The payment window starts when the order exists, not when the unit was reserved.
    payDeadline: new Date(now + m.payTimeoutSeconds * 1000),
  };
}

/**
 * Writes one goods' reservations as orders in ONE transaction: a multi-row insert that skips
 * what exists, one guarded stock update for the rows it inserted, and the consume log.
 * Idempotent: a message delivered twice finds its order and reports it again.
 * When the guarded update fails, falls back to row-by-row so the rows that fit still land.
 */
export async function writeOrders(db: Db, goodsId: number, messages: OrderMessage[], now = Date.now()): Promise<WriteResult[]> {
  try {
    return await db.transaction(async (tx) => {
      const inserted = await tx
        .insert(seckillOrder)
        .values(messages.map((m) => orderRow(m, now)))
        .onConflictDoNothing()
        .returning({ requestId: seckillOrder.requestId });
      if (inserted.length > 0) {
        const updated = await tx
          .update(seckillGoods)
          .set({ stock: sql`${seckillGoods.stock} - ${inserted.length}`, updatedAt: new Date(now) })
          .where(and(eq(seckillGoods.id, goodsId), gte(seckillGoods.stock, inserted.length)))
          .returning({ id: seckillGoods.id });
        if (updated.length === 0) {
          throw new StockGuardFailed();
        }
      }
      const results = await classify(tx, messages, new Set(inserted.map((r) => r.requestId)));
      await logConsumed(tx, results);
      return results;
    });
  } catch (error) {
    if (!(error instanceof StockGuardFailed)) {
      throw error;
    }
    return writeOrdersOneByOne(db, goodsId, messages, now);
  }
}

async function writeOrdersOneByOne(db: Db, goodsId: number, messages: OrderMessage[], now: number): Promise<WriteResult[]> {
  return db.transaction(async (tx) => {
    const createdIds = new Set<string>();
    const refused = new Set<string>();
    for (const m of messages) {
      try {
        // A savepoint per row: a row without stock rolls back alone.
        await tx.transaction(async (row) => {
          const inserted = await row.insert(seckillOrder).values(orderRow(m, now)).onConflictDoNothing().returning({ id: seckillOrder.id });
          if (inserted.length === 0) {
            return;
          }
          const updated = await row
            .update(seckillGoods)
            .set({ stock: sql`${seckillGoods.stock} - 1`, updatedAt: new Date(now) })
            .where(and(eq(seckillGoods.id, goodsId), gte(seckillGoods.stock, 1)))
            .returning({ id: seckillGoods.id });
          if (updated.length === 0) {
            throw new StockGuardFailed();
          }
          createdIds.add(m.requestId);
        });
      } catch (error) {
        if (!(error instanceof StockGuardFailed)) {
          throw error;
        }
        refused.add(m.requestId);
      }
    }
    const results = (await classify(tx, messages, createdIds)).map(
      (r): WriteResult => (refused.has(r.requestId) ? { requestId: r.requestId, ok: false, reason: 'SOLD_OUT' } : r),
    );
    await logConsumed(tx, results);
    return results;
  });
}

type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

/** Sorts messages into created now, created earlier (a redelivery), or refused (the user already holds one). */
async function classify(tx: Tx, messages: OrderMessage[], created: Set<string>): Promise<WriteResult[]> {
  const others = messages.filter((m) => !created.has(m.requestId)).map((m) => m.requestId);
  const existing = new Map<string, string>();
  if (others.length > 0) {
    const rows = await tx
      .select({ id: seckillOrder.id, requestId: seckillOrder.requestId })
      .from(seckillOrder)
      .where(inArray(seckillOrder.requestId, others));
    for (const r of rows) {
      existing.set(r.requestId, r.id);
    }
  }
  return messages.map((m): WriteResult => {
    if (created.has(m.requestId)) {
      return { requestId: m.requestId, ok: true, orderId: m.orderId, created: true };
    }
    const orderId = existing.get(m.requestId);
    return orderId
      ? { requestId: m.requestId, ok: true, orderId, created: false }
      : { requestId: m.requestId, ok: false, reason: 'ALREADY_PURCHASED' };
  });
}

async function logConsumed(tx: Tx, results: WriteResult[]): Promise<void> {
  if (results.length === 0) {
    return;
  }
  await tx
    .insert(mqConsumeLog)
    .values(
      results.map((r) => ({
        messageId: `order:${r.requestId}`,
        queue: 'orders',
        status: r.ok ? 0 : 1,
        detail: r.ok ? r.orderId : r.reason,
      })),
    )
    .onConflictDoNothing();
}
