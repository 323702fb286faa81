import { and, count, desc, eq, inArray, lte, type SQL, sql } from 'drizzle-orm';
import {
  type DeliveryStatus,
  WEBHOOK_LEASE_MS,
  type WebhookEvent,
  type WebhookOrder,
  webhookEventId,
  webhookOrder,
} from '../workers/kernel/webhooks';
import type { AnyDb } from './client';
import type { OrderRow } from './lifecycle';
import { webhookConfig, webhookDelivery } from './schema';

export type WebhookConfigRow = typeof webhookConfig.$inferSelect;
export type DeliveryRow = typeof webhookDelivery.$inferSelect;

/** A transaction (or client) that runs one raw statement. */
type SqlRunner = { execute(query: SQL): PromiseLike<{ rows: Record<string, unknown>[] }> };

/** An event about to be written: its type and the order as the shop will see it. */
export type WebhookCandidate = { type: WebhookEvent; order: WebhookOrder };

/** The candidates as the JSON the outbox insert reads (jsonb_to_recordset). */
export function candidatesJson(candidates: WebhookCandidate[]): string {
  return JSON.stringify(
    candidates.map((c) => ({
      id: webhookEventId(c.type, c.order.orderId),
      type: c.type,
      order_id: c.order.orderId,
      goods_id: c.order.goodsId,
      payload: { order: c.order },
    })),
  );
}

/**
 * Whether the shop is subscribed to `type` now. The order consumer reads it once per batch and
 * writes order.created events with that batch's orders when it is: a subscription made while a
 * batch is being written starts with the next batch.
 */
export async function subscribedTo(db: SqlRunner, type: WebhookEvent): Promise<boolean> {
  const { rows } = await db.execute(sql`SELECT EXISTS (SELECT 1 FROM webhook_config WHERE ${type} = ANY (events)) AS subscribed`);
  return rows[0]?.subscribed === true;
}

/**
 * The outbox insert as SQL, for a statement of its own or a CTE: writes the candidates whose
 * type the shop subscribed to (nothing when webhooks are off) and, when `onlyOrders` says so,
 * whose order it names; skips events that exist (a change repeated writes nothing); returns
 * the ids written and their orders.
 */
export function outboxInsert(candidates: string, onlyOrders: SQL = sql`TRUE`): SQL {
  return sql`INSERT INTO webhook_delivery (id, type, order_id, goods_id, payload)
    SELECT v.id, v.type, v.order_id, v.goods_id, v.payload
    FROM jsonb_to_recordset(${candidates}::jsonb) AS v(id text, type text, order_id text, goods_id bigint, payload jsonb)
    WHERE EXISTS (SELECT 1 FROM webhook_config AS c WHERE v.type = ANY (c.events)) AND ${onlyOrders}
    ON CONFLICT DO NOTHING
    RETURNING id, order_id`;
}

/**
 * Records the events of orders that just changed, inside the caller's transaction (`tx`), so
 * an event exists exactly when its change committed. Returns the ids written, for the caller
 * to enqueue after the commit.
 */
export async function recordOrderEvents(tx: SqlRunner, type: WebhookEvent, orders: OrderRow[]): Promise<string[]> {
  if (orders.length === 0) {
    return [];
  }
  const json = candidatesJson(orders.map((o) => ({ type, order: webhookOrder(o) })));
  const { rows } = await tx.execute(outboxInsert(json));
  return rows.map((r) => String(r.id));
}

/** The endpoint and its settings, or undefined when none was ever set (or it was deleted). */
export async function getWebhookConfig(db: AnyDb): Promise<WebhookConfigRow | undefined> {
  const [row] = await db.select().from(webhookConfig).where(eq(webhookConfig.id, 1)).limit(1);
  return row;
}

/** Sets the endpoint (the one row), returning it. */
export async function putWebhookConfig(
  db: AnyDb,
  input: { url: string; secret: string; events: string[] },
  now = Date.now(),
): Promise<WebhookConfigRow> {
  const values = { id: 1, url: input.url, secret: input.secret, events: input.events, updatedAt: new Date(now) };
  const [row] = await db
    .insert(webhookConfig)
    .values(values)
    .onConflictDoUpdate({
      target: webhookConfig.id,
      set: { url: values.url, secret: values.secret, events: values.events, updatedAt: values.updatedAt },
    })
    .returning();
  if (!row) {
    throw new Error('upsert into webhook_config returned no row');
  }
  return row;
}

/** Removes the endpoint: no event is written or sent afterwards. True when there was one. */
export async function deleteWebhookConfig(db: AnyDb): Promise<boolean> {
  const gone = await db.delete(webhookConfig).where(eq(webhookConfig.id, 1)).returning({ id: webhookConfig.id });
  return gone.length > 0;
}

export type DeliveryCounts = Record<'pending' | 'delivered' | 'failed', number>;

/** Deliveries by status, of one goods or of all. */
export async function countDeliveries(db: AnyDb, goodsId?: number): Promise<DeliveryCounts> {
  const rows = await db
    .select({ status: webhookDelivery.status, n: count() })
    .from(webhookDelivery)
    .where(goodsId === undefined ? undefined : eq(webhookDelivery.goodsId, goodsId))
    .groupBy(webhookDelivery.status);
  const of = (s: DeliveryStatus) => rows.find((r) => r.status === s)?.n ?? 0;
  return { pending: of('PENDING'), delivered: of('DELIVERED'), failed: of('FAILED') };
}

export type DeliveryFilter = {
  status?: DeliveryStatus | undefined;
  goodsId?: number | undefined;
  orderId?: string | undefined;
  limit: number;
};

/** The delivery log, newest first. */
export function listDeliveries(db: AnyDb, filter: DeliveryFilter): Promise<DeliveryRow[]> {
  const conditions: SQL[] = [];
  if (filter.status) {
    conditions.push(eq(webhookDelivery.status, filter.status));
  }
  if (filter.goodsId !== undefined) {
    conditions.push(eq(webhookDelivery.goodsId, filter.goodsId));
  }
  if (filter.orderId !== undefined) {
    conditions.push(eq(webhookDelivery.orderId, filter.orderId));
  }
  return db
    .select()
    .from(webhookDelivery)
    .where(and(...conditions))
    .orderBy(desc(webhookDelivery.createdAt), desc(webhookDelivery.id))
    .limit(filter.limit);
}

export async function findDelivery(db: AnyDb, id: string): Promise<DeliveryRow | undefined> {
  const [row] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.id, id)).limit(1);
  return row;
}

/**
 * Claims the due, pending deliveries among `ids` for one attempt each (a guarded update), so
 * two copies of a message, or a message and the cron's re-send, do not POST the same event at
 * once. A claim lasts WEBHOOK_LEASE_MS; an attempt that never reports back is taken over then.
 */
export async function claimDeliveries(db: AnyDb, ids: string[], now: number): Promise<DeliveryRow[]> {
  if (ids.length === 0) {
    return [];
  }
  return db
    .update(webhookDelivery)
    .set({
      attempts: sql`${webhookDelivery.attempts} + 1`,
      lastAttemptAt: new Date(now),
      nextAttemptAt: new Date(now + WEBHOOK_LEASE_MS),
    })
    .where(
      and(
        inArray(webhookDelivery.id, ids),
        eq(webhookDelivery.status, 'PENDING'),
        // A retry message may arrive a moment before the due time it was sent for.
        lte(webhookDelivery.nextAttemptAt, new Date(now + 2_000)),
      ),
    )
    .returning();
}

export type AttemptOutcome =
  | { kind: 'delivered'; statusCode: number }
  | { kind: 'retry'; statusCode: number | null; error: string; nextAttemptAt: number }
  | { kind: 'failed'; statusCode: number | null; error: string };

/** Records what one attempt got. */
export async function recordAttempt(db: AnyDb, id: string, outcome: AttemptOutcome, now: number): Promise<void> {
  const common = { lastStatusCode: outcome.statusCode, lastError: outcome.kind === 'delivered' ? null : outcome.error.slice(0, 500) };
  const set =
    outcome.kind === 'delivered'
      ? { ...common, status: 'DELIVERED', deliveredAt: new Date(now) }
      : outcome.kind === 'retry'
        ? { ...common, nextAttemptAt: new Date(outcome.nextAttemptAt) }
        : { ...common, status: 'FAILED' };
  await db
    .update(webhookDelivery)
    .set(set)
    .where(and(eq(webhookDelivery.id, id), eq(webhookDelivery.status, 'PENDING')));
}

/** Pending deliveries overdue by more than `graceMs` (their queue message was lost), oldest due first. */
export async function overdueDeliveries(db: AnyDb, now: number, graceMs: number, limit = 500): Promise<string[]> {
  const rows = await db
    .select({ id: webhookDelivery.id })
    .from(webhookDelivery)
    .where(and(eq(webhookDelivery.status, 'PENDING'), lte(webhookDelivery.nextAttemptAt, new Date(now - graceMs))))
    .orderBy(webhookDelivery.nextAttemptAt)
    .limit(limit);
  return rows.map((r) => r.id);
}

export type RedeliverResult = { kind: 'queued'; row: DeliveryRow } | { kind: 'missing' } | { kind: 'pending'; row: DeliveryRow };

/**
 * Puts a finished (failed, or delivered) delivery back in line under the same event id, with
 * a fresh retry window. A pending one is already on its way and is left alone.
 */
export async function resetDelivery(db: AnyDb, id: string, now: number): Promise<RedeliverResult> {
  const [row] = await db
    .update(webhookDelivery)
    .set({ status: 'PENDING', nextAttemptAt: new Date(now), retrySince: new Date(now), deliveredAt: null })
    .where(and(eq(webhookDelivery.id, id), inArray(webhookDelivery.status, ['FAILED', 'DELIVERED'])))
    .returning();
  if (row) {
    return { kind: 'queued', row };
  }
  const found = await findDelivery(db, id);
  return found ? { kind: 'pending', row: found } : { kind: 'missing' };
}
