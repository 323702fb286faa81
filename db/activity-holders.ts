import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { SqlExecutor } from './orders';

// Who holds a live order of an `activity`-scoped sale (at most one per shopper and activity:
// the seed's unique index), for the edge's copies of it (workers/edge/activity-holders.ts): all
// of them at once, or the orders changed since a time, in the order they changed. One statement
// each, so SQL over HTTP fits.

/** An activity order as a copy learns it: whose, of which goods, how many units, and whether it is live (pending or paid). */
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
  const row = ReadRow.parse(rows[0]);
  if (row.n > max) {
    return { asOf: row.as_of, changes: null };
  }
  return { asOf: row.as_of, changes: row.changes.map(([userId, goodsId, quantity, live]) => ({ userId, goodsId, quantity, live })) };
}
