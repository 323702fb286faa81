import { type SQL, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { FailReason, OrderMessage } from '../workers/kernel/contract';

export type WriteResult =
  | { requestId: string; ok: true; orderId: string; created: boolean }
  | { requestId: string; ok: false; reason: FailReason };

/** Runs one statement: the HTTP client (one fetch) or a pool's client both fit. */
export type SqlExecutor = { execute(query: SQL): PromiseLike<{ rows: Record<string, unknown>[] }> };

/** A row of seckill_write_orders (migrations/0001_write_orders.sql). */
const WrittenRow = z.object({
  request_id: z.string(),
  order_id: z.string().nullable(),
  outcome: z.enum(['CREATED', 'EXISTING', 'ALREADY_PURCHASED', 'LIMIT_REACHED', 'SOLD_OUT']),
});

/**
 * Writes one goods' reservations as orders in ONE statement (so one round trip, in its own
 * transaction): the Postgres function seckill_write_orders inserts what does not exist yet,
 * takes the stock with one guarded update, falls back to row by row when Postgres has less
 * stock than the batch (the rows that fit land, the rest are SOLD_OUT), classifies every
 * message and writes the consume log. Idempotent: a message delivered twice finds its order
 * and reports it again. `now` starts the payment windows.
 */
export async function writeOrders(db: SqlExecutor, goodsId: number, messages: OrderMessage[], now = Date.now()): Promise<WriteResult[]> {
  if (messages.length === 0) {
    return [];
  }
  // The messages go as they are: the function reads the queue's own field names.
  const { rows } = await db.execute(
    sql`SELECT request_id, order_id, outcome FROM seckill_write_orders(${goodsId}::bigint, ${JSON.stringify(messages)}::jsonb, ${new Date(now).toISOString()}::timestamptz)`,
  );
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
      return { requestId: m.requestId, ok: true, orderId: row.order_id, created: row.outcome === 'CREATED' };
    }
    return { requestId: m.requestId, ok: false, reason: row.outcome };
  });
}
