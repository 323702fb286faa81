import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { SqlExecutor } from './orders';

// The shoppers an `allowlist` goods is open to, and what the edge asks about one shopper before
// a sale: on the list or not, units held, a live order of another goods of the activity; the
// list in pages for the edge's copies of it. Every function is single statements, so both the
// pool and SQL over HTTP fit.

/** Ids per statement: each chunk goes as one JSON value (one bound parameter, one round trip). */
export const ALLOWLIST_CHUNK = 20_000;

/** Adds and removes shoppers of a goods' allowlist in chunks; how many shoppers it holds afterwards. */
export async function changeAllowlist(
  db: SqlExecutor,
  goodsId: number,
  add: readonly string[],
  remove: readonly string[],
): Promise<number> {
  for (let i = 0; i < add.length; i += ALLOWLIST_CHUNK) {
    const ids = JSON.stringify(add.slice(i, i + ALLOWLIST_CHUNK));
    await db.execute(
      sql`INSERT INTO seckill_allowlist (goods_id, user_id) SELECT ${goodsId}::bigint, value FROM jsonb_array_elements_text(${ids}::jsonb) ON CONFLICT DO NOTHING`,
    );
  }
  for (let i = 0; i < remove.length; i += ALLOWLIST_CHUNK) {
    const ids = JSON.stringify(remove.slice(i, i + ALLOWLIST_CHUNK));
    await db.execute(
      sql`DELETE FROM seckill_allowlist WHERE goods_id = ${goodsId}::bigint AND user_id IN (SELECT value FROM jsonb_array_elements_text(${ids}::jsonb))`,
    );
  }
  if (add.length > 0 || remove.length > 0) {
    // After the change: an edge copy made under the old version holds at least what that version held.
    await db.execute(sql`UPDATE seckill_goods SET allowlist_version = allowlist_version + 1 WHERE id = ${goodsId}::bigint`);
  }
  return countAllowlist(db, goodsId);
}

/** Shoppers of a goods' allowlist in the primary key's order, `limit` after `after` (a keyset page). */
export async function allowlistPage(db: SqlExecutor, goodsId: number, after: string | null, limit: number): Promise<string[]> {
  const { rows } = await db.execute(
    after === null
      ? sql`SELECT user_id FROM seckill_allowlist WHERE goods_id = ${goodsId}::bigint ORDER BY user_id LIMIT ${limit}`
      : sql`SELECT user_id FROM seckill_allowlist WHERE goods_id = ${goodsId}::bigint AND user_id > ${after} ORDER BY user_id LIMIT ${limit}`,
  );
  return rows.map((r) => String(r.user_id));
}

/** How many shoppers a goods' allowlist holds. */
export async function countAllowlist(db: SqlExecutor, goodsId: number): Promise<number> {
  const { rows } = await db.execute(sql`SELECT count(*)::int AS n FROM seckill_allowlist WHERE goods_id = ${goodsId}::bigint`);
  return z.object({ n: z.coerce.number() }).parse(rows[0]).n;
}

const StandingRow = z.object({ listed: z.boolean(), held: z.coerce.number(), elsewhere: z.boolean() });

/** One shopper before a goods' sale, as Postgres knows it (orders still on their way to it are not counted). */
export type Standing = {
  /** On the goods' allowlist (true for any shopper of an `open` goods is the caller's to decide). */
  listed: boolean;
  /** Units of the shopper's live orders of this goods. */
  held: number;
  /** A live `activity`-scoped order of another goods of the same activity. */
  elsewhere: boolean;
};

/** What the token route and the eligibility route ask about one shopper: one indexed statement. */
export async function shopperStanding(db: SqlExecutor, goods: { id: number; activityId: number }, userId: string): Promise<Standing> {
  const { rows } = await db.execute(sql`SELECT
      EXISTS (SELECT 1 FROM seckill_allowlist WHERE goods_id = ${goods.id}::bigint AND user_id = ${userId}) AS listed,
      (SELECT coalesce(sum(quantity), 0)::int FROM seckill_order
        WHERE user_id = ${userId} AND goods_id = ${goods.id}::bigint AND status IN (0, 1)) AS held,
      EXISTS (SELECT 1 FROM seckill_order WHERE user_id = ${userId} AND activity_id = ${goods.activityId}::bigint
        AND goods_id <> ${goods.id}::bigint AND limit_scope = 'activity' AND status IN (0, 1)) AS elsewhere`);
  return StandingRow.parse(rows[0]);
}
