import { and, count, desc, eq, isNotNull, isNull, sql } from 'drizzle-orm';
import type { Db } from './client';
import { deadLetter, mqConsumeLog } from './schema';

export type DeadLetterRow = typeof deadLetter.$inferSelect;
export type NewDeadLetter = typeof deadLetter.$inferInsert;

/** Stores dead messages, one row per (queue, key); a message that dies again reopens its row. */
export async function storeDeadLetters(db: Db, rows: NewDeadLetter[]): Promise<void> {
  await db
    .insert(deadLetter)
    .values(rows)
    .onConflictDoUpdate({
      target: [deadLetter.queue, deadLetter.messageKey],
      set: {
        body: sql`excluded.body`,
        goodsId: sql`excluded.goods_id`,
        attempts: sql`${deadLetter.attempts} + excluded.attempts`,
        createdAt: sql`now()`,
        redrivenAt: null,
      },
    });
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

/** Dead letters not re-driven yet, by source queue (the gauges). */
export function countOpenDeadLettersByQueue(db: Db): Promise<{ queue: string; n: number }[]> {
  return db.select({ queue: deadLetter.queue, n: count() }).from(deadLetter).where(isNull(deadLetter.redrivenAt)).groupBy(deadLetter.queue);
}

export async function findDeadLetter(db: Db, id: number): Promise<DeadLetterRow | undefined> {
  const [row] = await db.select().from(deadLetter).where(eq(deadLetter.id, id)).limit(1);
  return row;
}

/** Claims a dead letter for a re-drive (a guarded update); false when someone else did first. */
export async function claimDeadLetter(db: Db, id: number, now: number): Promise<boolean> {
  const claimed = await db
    .update(deadLetter)
    .set({ redrivenAt: new Date(now) })
    .where(and(eq(deadLetter.id, id), isNull(deadLetter.redrivenAt)))
    .returning({ id: deadLetter.id });
  return claimed.length > 0;
}

/** Gives a claim back (the send failed). */
export async function unclaimDeadLetter(db: Db, id: number): Promise<void> {
  await db.update(deadLetter).set({ redrivenAt: null }).where(eq(deadLetter.id, id));
}

/**
 * Closes (marks re-driven) the open dead order messages of a goods whose reservation Postgres
 * has settled since: the goods' object sent the message again and it landed. A message's key
 * is its consume-log key (`order:<requestId>`). Returns how many it closed.
 */
export async function closeSettledDeadLetters(db: Db, goodsId: number, now: number): Promise<number> {
  const closed = await db
    .update(deadLetter)
    .set({ redrivenAt: new Date(now) })
    .where(
      and(
        eq(deadLetter.goodsId, goodsId),
        eq(deadLetter.queue, 'orders'),
        isNull(deadLetter.redrivenAt),
        sql`EXISTS (SELECT 1 FROM ${mqConsumeLog} WHERE ${mqConsumeLog.messageId} = ${deadLetter.messageKey})`,
      ),
    )
    .returning({ id: deadLetter.id });
  return closed.length;
}
