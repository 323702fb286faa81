import { and, count, desc, eq, isNotNull, isNull, sql } from 'drizzle-orm';
import { type Db, withDb } from '../../db/client';
import { deadLetter } from '../../db/schema';
import { dbOptions } from '../goods';
import { getConfig } from '../kernel/config';
import { OrderMessage, TimeoutMessage } from '../kernel/contract';
import { log } from '../kernel/log';

export type DeadLetterRow = typeof deadLetter.$inferSelect;
export type SourceQueue = 'orders' | 'timeouts' | 'unknown';

function messageKey(message: Message<unknown>): string {
  const body = message.body as { requestId?: unknown; orderId?: unknown; kind?: unknown } | null;
  if (body && typeof body === 'object') {
    if (typeof body.requestId === 'string') {
      return `order:${body.requestId}`;
    }
    if (typeof body.orderId === 'string') {
      return `${String(body.kind)}:${body.orderId}`;
    }
  }
  return `message:${message.id}`;
}

/** Which queue a dead message came from, by its kind (the dead-letter queue does not say). */
function sourceQueue(body: unknown): SourceQueue {
  const kind = (body as { kind?: unknown } | null)?.kind;
  return kind === 'reserve' ? 'orders' : kind === 'pay-timeout' ? 'timeouts' : 'unknown';
}

function goodsOf(body: unknown): number | null {
  const g = (body as { goodsId?: unknown } | null)?.goodsId;
  return typeof g === 'number' && Number.isSafeInteger(g) ? g : null;
}

/**
 * Messages that exhausted their retries land here and are kept in Postgres, where the goods'
 * stats count them and an operator can re-drive them. Nothing is dropped: if Postgres is
 * down too, the message is retried on this queue. A message that dies again after a re-drive
 * reopens its row.
 */
export async function consumeDeadLetters(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const config = getConfig(env);
  // One row per key: a batch may carry the same message twice, and an upsert may touch a row once.
  const rows = new Map<string, typeof deadLetter.$inferInsert>();
  for (const m of batch.messages) {
    const queue = sourceQueue(m.body);
    const key = messageKey(m);
    rows.set(`${queue}|${key}`, { queue, messageKey: key, goodsId: goodsOf(m.body), body: m.body ?? {}, attempts: m.attempts });
  }
  try {
    await withDb({ ...dbOptions(config), max: 1 }, (db) =>
      db
        .insert(deadLetter)
        .values([...rows.values()])
        .onConflictDoUpdate({
          target: [deadLetter.queue, deadLetter.messageKey],
          set: {
            body: sql`excluded.body`,
            goodsId: sql`excluded.goods_id`,
            attempts: sql`${deadLetter.attempts} + excluded.attempts`,
            createdAt: sql`now()`,
            redrivenAt: null,
          },
        }),
    );
    for (const m of batch.messages) {
      log.error('dead_letter.stored', { key: messageKey(m), attempts: m.attempts });
    }
    batch.ackAll();
  } catch (error) {
    log.error('dead_letter.store_failed', { messages: batch.messages.length, error });
    batch.retryAll({ delaySeconds: 30 });
  }
}

export type DeadLetterFilter = { goodsId?: number | undefined; state: 'open' | 'redriven' | 'all'; limit: number };

/** Dead letters, newest first. */
export function listDeadLetters(db: Db, filter: DeadLetterFilter): Promise<DeadLetterRow[]> {
  const conditions = [];
  if (filter.goodsId !== undefined) {
    conditions.push(eq(deadLetter.goodsId, filter.goodsId));
  }
  if (filter.state === 'open') {
    conditions.push(isNull(deadLetter.redrivenAt));
  } else if (filter.state === 'redriven') {
    conditions.push(isNotNull(deadLetter.redrivenAt));
  }
  return db
    .select()
    .from(deadLetter)
    .where(and(...conditions))
    .orderBy(desc(deadLetter.createdAt), desc(deadLetter.id))
    .limit(filter.limit);
}

/** Dead letters of a goods not re-driven yet (the stats' `deadLetters`). */
export async function countOpenDeadLetters(db: Db, goodsId: number): Promise<number> {
  const [row] = await db
    .select({ n: count() })
    .from(deadLetter)
    .where(and(eq(deadLetter.goodsId, goodsId), isNull(deadLetter.redrivenAt)));
  return row?.n ?? 0;
}

export type RedriveResult =
  | { ok: true; id: number; queue: 'orders' | 'timeouts' }
  | { ok: false; id: number; reason: 'NOT_FOUND' | 'ALREADY_REDRIVEN' | 'UNROUTABLE' | 'MALFORMED' | 'SEND_FAILED' };

/** The queue a dead letter goes back to, if its body is one that queue's consumer accepts. */
function destination(env: Env, row: DeadLetterRow): { queue: Queue; name: 'orders' | 'timeouts' } | 'UNROUTABLE' | 'MALFORMED' {
  if (row.queue === 'orders') {
    return OrderMessage.safeParse(row.body).success ? { queue: env.ORDER_QUEUE, name: 'orders' } : 'MALFORMED';
  }
  if (row.queue === 'timeouts') {
    return TimeoutMessage.safeParse(row.body).success ? { queue: env.TIMEOUT_QUEUE, name: 'timeouts' } : 'MALFORMED';
  }
  return 'UNROUTABLE';
}

/**
 * Sends a dead letter's body back to its source queue. The row is claimed first (a guarded
 * update of redriven_at), so two operators re-driving at once send it once; a failed send
 * gives the claim back. The consumers are idempotent, so a re-driven message that already
 * took effect changes nothing.
 */
export async function redriveDeadLetter(env: Env, db: Db, id: number, now = Date.now()): Promise<RedriveResult> {
  const [row] = await db.select().from(deadLetter).where(eq(deadLetter.id, id)).limit(1);
  if (!row) {
    return { ok: false, id, reason: 'NOT_FOUND' };
  }
  if (row.redrivenAt !== null) {
    return { ok: false, id, reason: 'ALREADY_REDRIVEN' };
  }
  const to = destination(env, row);
  if (typeof to === 'string') {
    return { ok: false, id, reason: to };
  }
  const claimed = await db
    .update(deadLetter)
    .set({ redrivenAt: new Date(now) })
    .where(and(eq(deadLetter.id, id), isNull(deadLetter.redrivenAt)))
    .returning({ id: deadLetter.id });
  if (claimed.length === 0) {
    return { ok: false, id, reason: 'ALREADY_REDRIVEN' };
  }
  try {
    await to.queue.send(row.body, { contentType: 'json' });
  } catch (error) {
    log.error('dead_letter.redrive_failed', { id, queue: to.name, error });
    await db.update(deadLetter).set({ redrivenAt: null }).where(eq(deadLetter.id, id));
    return { ok: false, id, reason: 'SEND_FAILED' };
  }
  log.info('dead_letter.redriven', { id, queue: to.name, key: row.messageKey });
  return { ok: true, id, queue: to.name };
}
