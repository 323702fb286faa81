import { and, asc, eq, gt, inArray, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { GoodsInit, GoodsPlacement } from '../workers/kernel/contract';
import { AppError } from '../workers/kernel/errors';
import type { CreateGoodsBody, UpdateGoodsBody } from '../workers/kernel/http-bodies';
import { PREWARM_AHEAD_MS, RECONCILE_ENDED_WITHIN_MS } from '../workers/kernel/schedule';
import { ROOM_SHARDS } from '../workers/kernel/waiting-room';
import type { AnyDb, Db } from './client';
import type { SqlExecutor } from './orders';
import { ORDER_STATUS, seckillGoods, seckillOrder } from './schema';

export type GoodsRow = typeof seckillGoods.$inferSelect;

/** An admin create's `Idempotency-Key`, and the digest of its body (the create route's `createDigest`). */
export type CreateKey = { key: string; digest: string };

/**
 * Creates a goods with all of its stock free. With `create`, the key's goods when it made one
 * already (`replayed`), or CONFLICT when that one was made from another body: a create sent
 * again after its answer was lost makes no second goods.
 */
export async function insertGoods(db: Db, body: CreateGoodsBody, create?: CreateKey): Promise<{ row: GoodsRow; replayed: boolean }> {
  const [row] = await db
    .insert(seckillGoods)
    .values({
      activityId: body.activityId,
      title: body.title,
      imageUrl: body.imageUrl ?? null,
      priceCents: body.priceCents,
      totalStock: body.stock,
      stock: body.stock,
      startAt: new Date(body.startAt),
      endAt: new Date(body.endAt),
      payTimeoutSeconds: body.payTimeoutSeconds ?? 900,
      locationHint: body.locationHint ?? null,
      queue: body.queue ?? { mode: 'off' },
      shards: body.shards ?? 1,
      perUserLimit: body.perUserLimit ?? 1,
      limitScope: body.limitScope ?? 'goods',
      eligibility: body.eligibility ?? 'open',
      createKey: create?.key ?? null,
      createDigest: create?.digest ?? null,
    })
    .onConflictDoNothing({ target: seckillGoods.createKey, where: sql`${seckillGoods.createKey} IS NOT NULL` })
    .returning();
  if (row) {
    return { row, replayed: false };
  }
  const [made] = create ? await db.select().from(seckillGoods).where(eq(seckillGoods.createKey, create.key)).limit(1) : [];
  if (!made || !create) {
    throw new Error('insert into seckill_goods returned no row');
  }
  if (made.createDigest !== create.digest) {
    throw new AppError(
      'CONFLICT',
      `Idempotency-Key ${JSON.stringify(create.key)} already created goods ${made.id} from another request body`,
    );
  }
  return { row: made, replayed: true };
}

export async function findGoods(db: Db, goodsId: number): Promise<GoodsRow | undefined> {
  const [row] = await db.select().from(seckillGoods).where(eq(seckillGoods.id, goodsId)).limit(1);
  return row;
}

/** Goods whose sale has not ended more than `endedWithinMs` ago, earliest first. */
export function listCurrentGoods(db: AnyDb, now: number, endedWithinMs = 0): Promise<GoodsRow[]> {
  return db
    .select()
    .from(seckillGoods)
    .where(gt(seckillGoods.endAt, new Date(now - endedWithinMs)))
    .orderBy(asc(seckillGoods.startAt), asc(seckillGoods.id))
    .limit(500);
}

/** Goods on sale, about to start (pre-warmed), or ended within the last hour: what reconciliation and the gauges look at. */
export async function listGoodsInScope(db: Db, now: number): Promise<GoodsRow[]> {
  const rows = await listCurrentGoods(db, now, RECONCILE_ENDED_WITHIN_MS);
  return rows.filter((r) => r.startAt.getTime() - now <= PREWARM_AHEAD_MS);
}

export async function setGoodsPaused(db: Db, goodsId: number, paused: boolean): Promise<GoodsRow | undefined> {
  const [row] = await db
    .update(seckillGoods)
    .set({ status: paused ? 1 : 0, updatedAt: new Date() })
    .where(eq(seckillGoods.id, goodsId))
    .returning();
  return row;
}

/** Changes a goods' settings that may change after creation: the waiting room and the sale rules. */
export async function updateGoodsSettings(db: Db, goodsId: number, change: UpdateGoodsBody): Promise<GoodsRow | undefined> {
  const [row] = await db
    .update(seckillGoods)
    .set({ ...change, updatedAt: new Date() })
    .where(eq(seckillGoods.id, goodsId))
    .returning();
  return row;
}

/**
 * Changes a goods' stock shard count, only while its sale has not started (`now` before its
 * start): the row after the change, 'SALE_STARTED', or undefined when there is no such goods.
 */
export async function setGoodsShards(db: Db, goodsId: number, shards: number, now: number): Promise<GoodsRow | 'SALE_STARTED' | undefined> {
  const [row] = await db
    .update(seckillGoods)
    .set({ shards, updatedAt: new Date() })
    .where(and(eq(seckillGoods.id, goodsId), gt(seckillGoods.startAt, new Date(now))))
    .returning();
  if (row) {
    return row;
  }
  return (await findGoods(db, goodsId)) ? 'SALE_STARTED' : undefined;
}

/** The units of a set of orders (every count of orders is in units). */
const units = sql<number>`coalesce(sum(${seckillOrder.quantity}), 0)::int`;

/** Order units by status for one goods. */
export async function countOrdersByStatus(db: Db, goodsId: number): Promise<Record<number, number>> {
  const rows = await db
    .select({ status: seckillOrder.status, n: units })
    .from(seckillOrder)
    .where(eq(seckillOrder.goodsId, goodsId))
    .groupBy(seckillOrder.status);
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** Order units by goods and status code, for several goods at once. */
export function countOrdersByGoodsAndStatus(db: Db, goodsIds: number[]): Promise<{ goodsId: number; status: number; n: number }[]> {
  if (goodsIds.length === 0) {
    return Promise.resolve([]);
  }
  return db
    .select({ goodsId: seckillOrder.goodsId, status: seckillOrder.status, n: units })
    .from(seckillOrder)
    .where(inArray(seckillOrder.goodsId, goodsIds))
    .groupBy(seckillOrder.goodsId, seckillOrder.status);
}

/** Units of the live (pending or paid) orders of one goods. */
export async function countLiveOrders(db: Db, goodsId: number): Promise<number> {
  const [row] = await db
    .select({ n: units })
    .from(seckillOrder)
    .where(and(eq(seckillOrder.goodsId, goodsId), sql`${seckillOrder.status} IN (${ORDER_STATUS.PENDING_PAYMENT}, ${ORDER_STATUS.PAID})`));
  return row?.n ?? 0;
}

/** The settings a goods' stock object is initialised from. */
export function toGoodsInit(row: GoodsRow): GoodsInit {
  return {
    goodsId: row.id,
    activityId: row.activityId,
    title: row.title,
    priceCents: row.priceCents,
    totalStock: row.totalStock,
    stock: row.stock,
    startAt: row.startAt.getTime(),
    endAt: row.endAt.getTime(),
    paused: row.status === 1,
    payTimeoutSeconds: row.payTimeoutSeconds,
    shards: row.shards,
    locationHint: row.locationHint,
    perUserLimit: row.perUserLimit,
    limitScope: row.limitScope,
    eligibility: row.eligibility,
  };
}

const PlacementRow = z.object({
  id: z.coerce.number(),
  location_hint: z.string().nullable(),
  shards: z.coerce.number().optional(),
  room_shards: z.coerce.number().int().positive().nullish(),
});

/** The placements (id and location hint) of these goods; one statement, on a pool or over HTTP. */
export async function findPlacements(db: SqlExecutor, goodsIds: number[]): Promise<GoodsPlacement[]> {
  if (goodsIds.length === 0) {
    return [];
  }
  const ids = sql.join(
    goodsIds.map((id) => sql`${id}`),
    sql`, `,
  );
  const { rows } = await db.execute(
    sql`SELECT id, location_hint, shards, queue->>'shards' AS room_shards FROM seckill_goods WHERE id IN (${ids})`,
  );
  return rows.map((r) => {
    const row = PlacementRow.parse(r);
    return { id: row.id, locationHint: row.location_hint, shards: row.shards ?? 1, roomShards: row.room_shards ?? ROOM_SHARDS };
  });
}
