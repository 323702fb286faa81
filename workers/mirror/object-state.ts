import type { ResultValue } from './keys';
import type { MirrorResult } from './plan';

// Reads of the GoodsStock object's own tables (holder, reservation) that only the mirror
// needs, kept here so the object's file stays about reservations. Synchronous, so they run
// inside one step of the single-threaded object and see one consistent state.

/** Users currently holding a unit (the seed's seckill:users set). */
export function holderIds(sql: SqlStorage): string[] {
  return sql
    .exec<{ user_id: string }>('SELECT user_id FROM holder')
    .toArray()
    .map((r) => r.user_id);
}

/** How many users hold a unit (the size the users set should have). */
export function holderCount(sql: SqlStorage): number {
  return sql.exec<{ n: number }>('SELECT count(*) AS n FROM holder').one().n;
}

/** Answers of the reservations made since `since` (older ones would expire from Redis at once). */
export function recentResults(sql: SqlStorage, since: number): MirrorResult[] {
  return sql
    .exec<{ request_id: string; user_id: string; order_id: string | null; status: string; reason: string | null }>(
      'SELECT request_id, user_id, order_id, status, reason FROM reservation WHERE order_id IS NOT NULL AND created_at > ?',
      since,
    )
    .toArray()
    .map((r) => {
      const value: ResultValue =
        r.status === 'QUEUED' ? 'QUEUED' : r.status === 'SUCCESS' ? `SUCCESS:${r.order_id}` : `FAIL:${r.reason ?? 'ORDER_FAILED'}`;
      return { requestId: r.request_id, userId: r.user_id, value };
    });
}
