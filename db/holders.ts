import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { SqlExecutor } from './orders';

// Who holds live orders, for the edge's copies of it (workers/edge/holders-copies.ts): of an
// `activity`-scoped sale, each shopper's one live order across the activity (the seed's unique
// index); of a per-goods sale, the units each shopper holds of the goods (the page's "held").
// All of them at once, or what changed since a time. One statement each, so SQL over HTTP fits.

/**
 * A change as a copy learns it: whose, of which goods, how many units, and whether it is live
 * (pending or paid). An activity's changes are its orders, oldest change first; a goods' are its
 * shoppers' sums of live units now (live: some held).
 */
export type HolderChange = { userId: string; goodsId: number; quantity: number; live: boolean };

/** What a read gave: Postgres' clock when it read, and the orders (null: more than the caller keeps). */
export type HoldersRead = { asOf: number; changes: HolderChange[] | null };

const Change = z.tuple([z.string(), z.coerce.number(), z.coerce.number(), z.boolean()]);
const ReadRow = z.object({
  as_of: z.coerce.number(),
  n: z.coerce.number(),
  // Neon's driver and PGlite both parse json; a text form is parsed here all the same.
  changes: z.preprocess((v) => (typeof v === 'string' ? JSON.parse(v) : v), z.array(Change)),
});

/** A read's one row: its changes, or null ones past `max`. */
function holdersRead(first: unknown, max: number): HoldersRead {
  const row = ReadRow.parse(first);
  if (row.n > max) {
    return { asOf: row.as_of, changes: null };
  }
  return { asOf: row.as_of, changes: row.changes.map(([userId, goodsId, quantity, live]) => ({ userId, goodsId, quantity, live })) };
}

/**
 * The live orders of the activity (`since` null), or every order of it stamped at or after
 * `since` (ms), whatever its status, oldest change first; null changes when there are more than
 * `max`. `asOf` is Postgres' clock at the read: changes stamped before it and committed after
 * it are read by a later read whose `since` reaches back before it.
 */
export async function readActivityHolders(db: SqlExecutor, activityId: number, since: number | null, max: number): Promise<HoldersRead> {
  const which = since === null ? sql`status IN (0, 1)` : sql`updated_at >= to_timestamp(${since / 1000}::float8)`;
  const { rows } = await db.execute(sql`SELECT (extract(epoch FROM now()) * 1000)::float8 AS as_of, count(*)::int AS n,
      coalesce(json_agg(json_build_array(o.user_id, o.goods_id, o.quantity, o.status IN (0, 1)) ORDER BY o.updated_at, o.id), '[]'::json) AS changes
    FROM (SELECT id, user_id, goods_id, quantity, status, updated_at FROM seckill_order
      WHERE activity_id = ${activityId}::bigint AND limit_scope = 'activity' AND ${which}
      ORDER BY updated_at, id LIMIT ${max + 1}) AS o`);
  return holdersRead(rows[0], max);
}

/**
 * The units each shopper holds of the goods in live orders (`since` null), or, of each shopper
 * with an order of it stamped at or after `since` (ms), those units now (0: none live); null
 * changes when there are more such shoppers than `max`. Only per-goods orders are read for the
 * changes (an index on the goods and the change time); a whole read counts every live order.
 */
export async function readGoodsHolders(db: SqlExecutor, goodsId: number, since: number | null, max: number): Promise<HoldersRead> {
  const shoppers =
    since === null
      ? sql`SELECT user_id, sum(quantity)::int AS held FROM seckill_order
          WHERE goods_id = ${goodsId}::bigint AND status IN (0, 1) GROUP BY user_id LIMIT ${max + 1}`
      : sql`SELECT c.user_id, (SELECT coalesce(sum(o.quantity), 0)::int FROM seckill_order o
            WHERE o.user_id = c.user_id AND o.goods_id = ${goodsId}::bigint AND o.status IN (0, 1)) AS held
          FROM (SELECT DISTINCT user_id FROM seckill_order
            WHERE goods_id = ${goodsId}::bigint AND limit_scope = 'goods' AND updated_at >= to_timestamp(${since / 1000}::float8)
            LIMIT ${max + 1}) AS c`;
  const { rows } = await db.execute(sql`SELECT (extract(epoch FROM now()) * 1000)::float8 AS as_of, count(*)::int AS n,
      coalesce(json_agg(json_build_array(s.user_id, ${goodsId}::bigint, s.held, s.held > 0)), '[]'::json) AS changes
    FROM (${shoppers}) AS s`);
  return holdersRead(rows[0], max);
}
