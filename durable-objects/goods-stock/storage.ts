import type { FailReason, GoodsInit, OrderMessage, ReserveItem } from '../../workers/kernel/contract';
import { migrateSchema } from '../../workers/kernel/schema-gate';
import type { ResultValue } from '../../workers/mirror/keys';
import type { MirrorResult } from '../../workers/mirror/plan';
import type { PriorAnswer, SaleState } from './rules';

// Every table of the goods' object and every statement on them. The schema is one list of
// versioned steps behind one version number; each step is idempotent, so an object made by an
// older build (or one that created a table outside the gate) opens under this one.
// Statements are synchronous: the object runs them inside one step of its single thread.

/** The sale as the object holds it: its settings, the authoritative stock and the order sequence. */
export type Sale = SaleState & {
  goodsId: number;
  activityId: number;
  priceCents: number;
  payTimeoutSeconds: number;
  nextSeq: number;
};

export type ReservationRow = {
  request_id: string;
  user_id: string;
  order_id: string | null;
  status: 'QUEUED' | 'SUCCESS' | 'FAIL';
  reason: string | null;
  released: number;
};

type SaleRow = {
  goods_id: number;
  activity_id: number;
  price_cents: number;
  total_stock: number;
  remaining: number;
  start_at: number;
  end_at: number;
  paused: number;
  pay_timeout_seconds: number;
  next_seq: number;
};

export type OutboxRow = { seq: number; body: string; attempts: number };

/** The mirror's bookkeeping: the goods' title (only the mirror's goods hash needs it) and since when the mirror lags. */
export type MirrorState = { title: string; staleSince: number | null };

/**
 * The schema, step by step. Version 1 made the sale, its reservations, holders, spent tokens and
 * the outbox. Version 2 brings mirror_state behind the gate: builds before it created that
 * table on their own at load, so the step is written to find it already there.
 */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS sale (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     goods_id INTEGER NOT NULL, activity_id INTEGER NOT NULL, price_cents INTEGER NOT NULL,
     total_stock INTEGER NOT NULL, remaining INTEGER NOT NULL CHECK (remaining >= 0),
     start_at INTEGER NOT NULL, end_at INTEGER NOT NULL, paused INTEGER NOT NULL,
     pay_timeout_seconds INTEGER NOT NULL, next_seq INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS reservation (
     request_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, order_id TEXT, status TEXT NOT NULL,
     reason TEXT, released INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,
     settled_at INTEGER);
   CREATE INDEX IF NOT EXISTS reservation_order ON reservation (order_id);
   CREATE TABLE IF NOT EXISTS holder (user_id TEXT PRIMARY KEY, request_id TEXT NOT NULL);
   CREATE TABLE IF NOT EXISTS used_token (token_id TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS outbox (
     seq INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, body TEXT NOT NULL,
     attempts INTEGER NOT NULL DEFAULT 0, next_at INTEGER NOT NULL, created_at INTEGER NOT NULL);`,
  'CREATE TABLE IF NOT EXISTS mirror_state (id INTEGER PRIMARY KEY CHECK (id = 1), title TEXT NOT NULL, stale_since INTEGER)',
];

/** The schema version this build writes. */
export const SCHEMA_VERSION = MIGRATIONS.length;

export class StockStorage {
  constructor(private readonly sql: SqlStorage) {}

  /** Brings the schema to SCHEMA_VERSION; call while the object loads (blockConcurrencyWhile). */
  migrate(): void {
    migrateSchema(this.sql, MIGRATIONS);
  }

  // The sale.

  readSale(): Sale | undefined {
    const r = this.sql.exec<SaleRow>('SELECT * FROM sale WHERE id = 1').toArray()[0];
    if (!r) {
      return undefined;
    }
    return {
      goodsId: r.goods_id,
      activityId: r.activity_id,
      priceCents: r.price_cents,
      totalStock: r.total_stock,
      remaining: r.remaining,
      startAt: r.start_at,
      endAt: r.end_at,
      paused: r.paused === 1,
      payTimeoutSeconds: r.pay_timeout_seconds,
      nextSeq: r.next_seq,
    };
  }

  /** Creates the sale; the stock is taken from Postgres this once (never above the total). */
  insertSale(goods: GoodsInit): void {
    this.sql.exec(
      `INSERT INTO sale (id, goods_id, activity_id, price_cents, total_stock, remaining, start_at, end_at, paused, pay_timeout_seconds, next_seq)
       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
      goods.goodsId,
      goods.activityId,
      goods.priceCents,
      goods.totalStock,
      Math.min(goods.stock, goods.totalStock),
      goods.startAt,
      goods.endAt,
      goods.paused ? 1 : 0,
      goods.payTimeoutSeconds,
    );
  }

  /** Refreshes the sale's settings; the stock stays the object's own. */
  updateSettings(goods: GoodsInit): void {
    this.sql.exec(
      'UPDATE sale SET activity_id = ?, price_cents = ?, start_at = ?, end_at = ?, paused = ?, pay_timeout_seconds = ? WHERE id = 1',
      goods.activityId,
      goods.priceCents,
      goods.startAt,
      goods.endAt,
      goods.paused ? 1 : 0,
      goods.payTimeoutSeconds,
    );
  }

  saveStock(sale: Pick<Sale, 'remaining' | 'nextSeq'>): void {
    this.sql.exec('UPDATE sale SET remaining = ?, next_seq = ? WHERE id = 1', sale.remaining, sale.nextSeq);
  }

  saveRemaining(remaining: number): void {
    this.sql.exec('UPDATE sale SET remaining = ? WHERE id = 1', remaining);
  }

  savePaused(paused: boolean): void {
    this.sql.exec('UPDATE sale SET paused = ? WHERE id = 1', paused ? 1 : 0);
  }

  // Reservations, holders and spent tokens: what the rules read.

  prior(requestId: string): PriorAnswer | undefined {
    const r = this.sql
      .exec<Pick<ReservationRow, 'order_id' | 'status' | 'reason' | 'released'>>(
        'SELECT order_id, status, reason, released FROM reservation WHERE request_id = ?',
        requestId,
      )
      .toArray()[0];
    if (!r) {
      return undefined;
    }
    return {
      orderId: r.status === 'FAIL' ? null : r.order_id,
      reason: (r.reason as FailReason | null) ?? null,
      released: r.released === 1,
    };
  }

  tokenUsed(tokenId: string): boolean {
    return this.sql.exec('SELECT 1 FROM used_token WHERE token_id = ?', tokenId).toArray().length > 0;
  }

  userHolds(userId: string): boolean {
    return this.sql.exec('SELECT 1 FROM holder WHERE user_id = ?', userId).toArray().length > 0;
  }

  reservation(requestId: string): ReservationRow | undefined {
    return this.sql.exec<ReservationRow>('SELECT * FROM reservation WHERE request_id = ?', requestId).toArray()[0];
  }

  // Reservations: what the decisions write.

  spendToken(item: Pick<ReserveItem, 'tokenId' | 'tokenExpiresAt'>): void {
    this.sql.exec('INSERT OR IGNORE INTO used_token (token_id, expires_at) VALUES (?, ?)', item.tokenId, item.tokenExpiresAt);
  }

  /** Remembers a keyed request's rejection, so its retry gets the same answer. */
  rememberRejection(item: ReserveItem, reason: FailReason, now: number): void {
    this.sql.exec(
      "INSERT INTO reservation (request_id, user_id, status, reason, released, created_at) VALUES (?, ?, 'FAIL', ?, 1, ?)",
      item.requestId,
      item.userId,
      reason,
      now,
    );
  }

  /** An accepted reservation: its row, its holder and its outbox message, in the caller's transaction. */
  recordAccepted(item: ReserveItem, message: OrderMessage, now: number): void {
    this.spendToken(item);
    this.sql.exec(
      "INSERT INTO reservation (request_id, user_id, order_id, status, created_at) VALUES (?, ?, ?, 'QUEUED', ?)",
      item.requestId,
      item.userId,
      message.orderId,
      now,
    );
    this.sql.exec('INSERT INTO holder (user_id, request_id) VALUES (?, ?)', item.userId, item.requestId);
    this.sql.exec(
      'INSERT INTO outbox (request_id, body, next_at, created_at) VALUES (?, ?, ?, ?)',
      item.requestId,
      JSON.stringify(message),
      now,
      now,
    );
  }

  /** Marks a queued reservation's order confirmed; the users it held for (none when it was not queued). */
  confirm(requestId: string, now: number): string[] {
    return this.sql
      .exec<{ user_id: string }>(
        "UPDATE reservation SET status = 'SUCCESS', settled_at = ? WHERE request_id = ? AND status = 'QUEUED' AND released = 0 RETURNING user_id",
        now,
        requestId,
      )
      .toArray()
      .map((r) => r.user_id);
  }

  /**
   * A reservation no longer holds a unit: one that never became an order reports the reason; an
   * order keeps SUCCESS (its own status tells the story). Its holder and unsent message go.
   */
  markReleased(row: ReservationRow, reason: FailReason, now: number): void {
    if (row.status === 'QUEUED') {
      this.sql.exec(
        "UPDATE reservation SET status = 'FAIL', reason = ?, released = 1, settled_at = ? WHERE request_id = ?",
        reason,
        now,
        row.request_id,
      );
    } else {
      this.sql.exec('UPDATE reservation SET released = 1 WHERE request_id = ?', row.request_id);
    }
    this.sql.exec('DELETE FROM holder WHERE user_id = ? AND request_id = ?', row.user_id, row.request_id);
    this.sql.exec('DELETE FROM outbox WHERE request_id = ?', row.request_id);
  }

  /** Reservations waiting for Postgres and confirmed ones, both still holding a unit. */
  heldCounts(): { queued: number; confirmed: number } {
    return this.sql
      .exec<{ queued: number; confirmed: number }>(
        `SELECT coalesce(sum(status = 'QUEUED' AND released = 0), 0) AS queued,
                coalesce(sum(status = 'SUCCESS' AND released = 0), 0) AS confirmed FROM reservation`,
      )
      .one();
  }

  // The outbox.

  outboxStats(): { n: number; oldest: number | null } {
    return this.sql.exec<{ n: number; oldest: number | null }>('SELECT count(*) AS n, min(created_at) AS oldest FROM outbox').one();
  }

  dueOutbox(now: number, limit: number): OutboxRow[] {
    return this.sql.exec<OutboxRow>('SELECT seq, body, attempts FROM outbox WHERE next_at <= ? ORDER BY seq LIMIT ?', now, limit).toArray();
  }

  deleteOutbox(seqs: number[]): void {
    this.sql.exec(`DELETE FROM outbox WHERE seq IN (${seqs.map(() => '?').join(',')})`, ...seqs);
  }

  retryOutbox(seqs: number[], at: number): void {
    for (const seq of seqs) {
      this.sql.exec('UPDATE outbox SET attempts = attempts + 1, next_at = ? WHERE seq = ?', at, seq);
    }
  }

  /** Makes every waiting row due now (a re-drive that ignores the backoff). */
  outboxDueNow(now: number): void {
    this.sql.exec('UPDATE outbox SET next_at = ? WHERE next_at > ?', now, now);
  }

  nextOutboxAt(): number | null {
    return this.sql.exec<{ at: number | null }>('SELECT min(next_at) AS at FROM outbox').one().at;
  }

  // Pruning (the alarm).

  /** Forgets expired tokens and old remembered rejections; true when spent tokens remain to prune later. */
  prune(now: number, rejectionsBefore: number): boolean {
    this.sql.exec('DELETE FROM used_token WHERE expires_at < ?', now);
    this.sql.exec("DELETE FROM reservation WHERE order_id IS NULL AND status = 'FAIL' AND created_at < ?", rejectionsBefore);
    return this.sql.exec('SELECT 1 FROM used_token LIMIT 1').toArray().length > 0;
  }

  // The mirror's bookkeeping and what the mirror copies.

  mirrorState(): MirrorState {
    const row = this.sql.exec<{ title: string; stale_since: number | null }>('SELECT title, stale_since FROM mirror_state').toArray()[0];
    return { title: row?.title ?? '', staleSince: row?.stale_since ?? null };
  }

  saveMirrorState(state: MirrorState): void {
    this.sql.exec('INSERT OR REPLACE INTO mirror_state (id, title, stale_since) VALUES (1, ?, ?)', state.title, state.staleSince);
  }

  /** Users currently holding a unit (the seed's seckill:users set). */
  holderIds(): string[] {
    return this.sql
      .exec<{ user_id: string }>('SELECT user_id FROM holder')
      .toArray()
      .map((r) => r.user_id);
  }

  /** How many users hold a unit (the size the users set should have). */
  holderCount(): number {
    return this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM holder').one().n;
  }

  /** Answers of the reservations made since `since` (older ones would expire from Redis at once). */
  recentResults(since: number): MirrorResult[] {
    return this.sql
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
}
