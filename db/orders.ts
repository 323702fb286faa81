import { type SQL, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { FailReason, OrderMessage } from '../workers/kernel/contract';
import { ORDER_STATUS } from '../workers/kernel/order-status';
import { sleep } from '../workers/kernel/sleep';
import { webhookOrder } from '../workers/kernel/webhooks';
import { candidatesJson, outboxInsert } from './webhooks';

export type WriteResult =
  /** `webhookId`: the order.created event written with a new order, when the shop subscribed to it. */
  | { requestId: string; ok: true; orderId: string; created: boolean; webhookId?: string }
  | { requestId: string; ok: false; reason: FailReason };

/** Runs one statement: the HTTP client (one fetch) or a pool's client both fit. */
export type SqlExecutor = { execute(query: SQL): PromiseLike<{ rows: Record<string, unknown>[] }> };

/** A row of seckill_write_orders (migrations/0001_write_orders.sql, last replaced in 0006). */
const WrittenRow = z.object({
  request_id: z.string(),
  order_id: z.string().nullable(),
  outcome: z.enum(['CREATED', 'EXISTING', 'ALREADY_PURCHASED', 'LIMIT_REACHED', 'SOLD_OUT']),
  webhook_id: z.string().nullable(),
});

/** The order.created events of a batch, should its orders be created (the statement keeps those that were). */
function createdEvents(goodsId: number, messages: OrderMessage[], now: number): string {
  return candidatesJson(
    messages.map((m) => ({
      type: 'order.created' as const,
      order: webhookOrder({
        id: m.orderId,
        orderNo: m.orderNo,
        goodsId,
        activityId: m.activityId,
        userId: m.userId,
        status: ORDER_STATUS.PENDING_PAYMENT,
        priceCents: m.priceCents,
        quantity: m.quantity ?? 1,
        payDeadline: new Date(now + m.payTimeoutSeconds * 1000),
        createdAt: new Date(now),
        paidAt: null,
        closedAt: null,
      }),
    })),
  );
}

/** Attempts of the write statement when Postgres aborts it for a deadlock or a serialisation failure. */
const WRITE_ATTEMPTS = 3;

/** Postgres aborted the statement to break a deadlock (40P01) or a serialisation conflict (40001): nothing was written. */
function abortedForConcurrency(error: unknown): boolean {
  const code = (error as { cause?: { code?: unknown }; code?: unknown } | null)?.cause?.code ?? (error as { code?: unknown } | null)?.code;
  return code === '40P01' || code === '40001';
}

/**
 * The write statement, again when Postgres aborted it for a deadlock or a serialisation failure:
 * the statement is one transaction, rolled back whole, and idempotent, so running it again at
 * once is what the queue's retry would do, minutes sooner. The function inserts in one order
 * every writer shares (migrations/0006_write_order_locks.sql), so overlapping batches wait for
 * each other; this covers what that order cannot rule out.
 */
async function writeStatement(
  db: SqlExecutor,
  goodsId: number,
  messages: OrderMessage[],
  now: number,
  events: boolean,
): Promise<Record<string, unknown>[]> {
  // Without a subscription the events would be sent, parsed and dropped: as much JSON again as the orders.
  const candidates = events ? createdEvents(goodsId, messages, now) : '[]';
  for (let attempt = 1; ; attempt++) {
    try {
      // The messages go as they are: the function reads the queue's own field names. The outbox
      // insert reads the function's answer (a CTE), so both are one statement and one transaction.
      const { rows } = await db.execute(
        sql`WITH w AS MATERIALIZED (
          SELECT f.request_id, f.order_id, f.outcome, f.n
          FROM seckill_write_orders(${goodsId}::bigint, ${JSON.stringify(messages)}::jsonb, ${new Date(now).toISOString()}::timestamptz)
            WITH ORDINALITY AS f(request_id, order_id, outcome, n)
        ), hooks AS (
          ${outboxInsert(candidates, sql`v.order_id IN (SELECT w.order_id FROM w WHERE w.outcome = 'CREATED')`)}
        )
        SELECT w.request_id, w.order_id, w.outcome, h.id AS webhook_id
        FROM w LEFT JOIN hooks AS h ON h.order_id = w.order_id AND w.outcome = 'CREATED'
        ORDER BY w.n`,
      );
      return rows;
    } catch (error) {
      if (attempt >= WRITE_ATTEMPTS || !abortedForConcurrency(error)) {
        throw error;
      }
      // The other writer commits in milliseconds; a little jitter keeps the two from meeting again.
      await sleep(5 + Math.random() * 20 * attempt);
    }
  }
}

/**
 * Writes one goods' reservations as orders in ONE statement (so one round trip, in its own
 * transaction): the Postgres function seckill_write_orders inserts what does not exist yet,
 * takes the stock with one guarded update, falls back to row by row when Postgres has less
 * stock than the batch (the rows that fit land, the rest are SOLD_OUT), classifies every
 * message and writes the consume log. Idempotent: a message delivered twice finds its order
 * and reports it again. `now` starts the payment windows. With `events` (the shop subscribed
 * to order.created, as the caller read it), the same statement writes the events of the orders
 * it created, so such an event exists exactly when its order does.
 */
export async function writeOrders(
  db: SqlExecutor,
  goodsId: number,
  messages: OrderMessage[],
  now = Date.now(),
  { events = true }: { events?: boolean } = {},
): Promise<WriteResult[]> {
  if (messages.length === 0) {
    return [];
  }
  const rows = await writeStatement(db, goodsId, messages, now, events);
  if (rows.length !== messages.length) {
    throw new Error(`seckill_write_orders answered ${rows.length} rows for ${messages.length} messages`);
  }
  return messages.map((m, i): WriteResult => {
    const row = WrittenRow.parse(rows[i]);
    if (row.request_id !== m.requestId) {
      throw new Error(`seckill_write_orders answered out of order at row ${i}`);
    }
    if (row.outcome === 'CREATED' || row.outcome === 'EXISTING') {
      if (row.order_id === null) {
        throw new Error(`seckill_write_orders answered ${row.outcome} without an order id`);
      }
      return {
        requestId: m.requestId,
        ok: true,
        orderId: row.order_id,
        created: row.outcome === 'CREATED',
        ...(row.webhook_id === null ? {} : { webhookId: row.webhook_id }),
      };
    }
    return { requestId: m.requestId, ok: false, reason: row.outcome };
  });
}
