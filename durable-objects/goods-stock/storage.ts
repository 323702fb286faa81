import type { FailReason, GoodsInit, OrderMessage } from '../../workers/kernel/contract';
import { migrateSchema } from '../../workers/kernel/schema-gate';
import { firstSeqOf } from '../../workers/kernel/shards';
import type { ResultValue } from '../../workers/mirror/keys';
import type { MirrorResult } from '../../workers/mirror/plan';
import type { SaleState } from './rules';
import { MIGRATIONS } from './schema';

// Every table of the goods' object and every statement on them, behind the one version gate
// of schema.ts. Statements are synchronous: the object runs them inside one step of its single
// thread. Nothing the object runs per request, per alarm or per snapshot reads more rows as the
// sale grows: counts come from the tally row, due work and ages from indexes.

/** The sale as the object holds it: its settings, the authoritative stock and the order sequence. */
export type Sale = SaleState & {
  goodsId: number;
  activityId: number;
  priceCents: number;
  payTimeoutSeconds: number;
  nextSeq: number;
  /** Units Postgres refused (it had less stock than this object): neither for sale nor sold. */
  refused: number;
};

export type ReservationRow = {
  request_id: string;
  user_id: string;
  order_id: string | null;
  status: 'QUEUED' | 'SUCCESS' | 'FAIL';
  reason: string | null;
  released: number;
  created_at: number;
  quantity: number;
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
  refused: number;
  per_user_limit: number;
  limit_scope: string;
  eligibility: string;
};

export type OutboxRow = { seq: number; body: string; attempts: number; sends: number };

/**
 * The counts the triggers keep (schema.ts): unsettled and confirmed reservations, holders, outbox
 * rows never sent, and the unsettled and confirmed ones of shoppers the waiting room let in.
 */
export type Tally = {
  queued: number;
  confirmed: number;
  holders: number;
  unsent: number;
  admittedQueued: number;
  admittedConfirmed: number;
};

/** The mirror's bookkeeping: the goods' title (only the mirror's goods hash needs it) and since when the mirror lags. */
export type MirrorState = { title: string; staleSince: number | null };

/** An unsettled reservation an older build sent and forgot: what its order message is rebuilt from. */
export type UnsettledRow = Pick<ReservationRow, 'request_id' | 'user_id' | 'created_at' | 'quantity'> & { order_id: string };

/** The schema version this build writes. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/** The sale rules' columns, in the order insertSale and updateSettings bind them; absent ones keep the defaults. */
function rulesOf(goods: GoodsInit): [number, string, string] {
  return [goods.perUserLimit ?? 1, goods.limitScope ?? 'goods', goods.eligibility ?? 'open'];
}

/** The rows of a list of seqs, as one bound value (a statement takes at most 100 of them). */
const SEQS_IN = 'seq IN (SELECT value FROM json_each(?))';
/** The same for request ids. */
const REQUESTS_IN = 'request_id IN (SELECT value FROM json_each(?))';

export class StockStorage {
  constructor(private readonly sql: SqlStorage) {}

  /** Brings the schema to SCHEMA_VERSION and returns the version it found; call while the object loads, in a transaction. */
  migrate(): number {
    return migrateSchema(this.sql, MIGRATIONS);
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
      refused: r.refused,
      perUserLimit: r.per_user_limit,
      limitScope: r.limit_scope === 'activity' ? 'activity' : 'goods',
      eligibility: r.eligibility === 'allowlist' ? 'allowlist' : 'open',
    };
  }

  /**
   * Creates the sale; the stock is taken from Postgres this once (never above the total), by
   * shard 0. Another shard starts empty and leases its stock from shard 0 (leases.ts).
   */
  insertSale(goods: GoodsInit, shard = 0): void {
    this.sql.exec(
      `INSERT INTO sale (id, goods_id, activity_id, price_cents, total_stock, remaining, start_at, end_at, paused, pay_timeout_seconds, next_seq,
         per_user_limit, limit_scope, eligibility)
       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      goods.goodsId,
      goods.activityId,
      goods.priceCents,
      goods.totalStock,
      shard === 0 ? Math.min(goods.stock, goods.totalStock) : 0,
      goods.startAt,
      goods.endAt,
      goods.paused ? 1 : 0,
      goods.payTimeoutSeconds,
      firstSeqOf(shard),
      ...rulesOf(goods),
    );
  }

  /** Refreshes the sale's settings; the stock stays the object's own. */
  updateSettings(goods: GoodsInit): void {
    this.sql.exec(
      `UPDATE sale SET activity_id = ?, price_cents = ?, start_at = ?, end_at = ?, paused = ?, pay_timeout_seconds = ?,
         per_user_limit = ?, limit_scope = ?, eligibility = ? WHERE id = 1`,
      goods.activityId,
      goods.priceCents,
      goods.startAt,
      goods.endAt,
      goods.paused ? 1 : 0,
      goods.payTimeoutSeconds,
      ...rulesOf(goods),
    );
  }

  saveStock(sale: Pick<Sale, 'remaining' | 'nextSeq'>): void {
    this.sql.exec('UPDATE sale SET remaining = ?, next_seq = ? WHERE id = 1', sale.remaining, sale.nextSeq);
  }

  saveRemaining(remaining: number): void {
    this.sql.exec('UPDATE sale SET remaining = ? WHERE id = 1', remaining);
  }

  /** The units held aside and those for sale, which move together when refused units come back. */
  saveRefused(sale: Pick<Sale, 'remaining' | 'refused'>): void {
    this.sql.exec('UPDATE sale SET remaining = ?, refused = ? WHERE id = 1', sale.remaining, sale.refused);
  }

  savePaused(paused: boolean): void {
    this.sql.exec('UPDATE sale SET paused = ? WHERE id = 1', paused ? 1 : 0);
  }

  // Reservations and holders.

  /** The units a shopper holds now (0 when none). */
  userUnits(userId: string): number {
    return this.sql.exec<{ units: number }>('SELECT units FROM holder WHERE user_id = ?', userId).toArray()[0]?.units ?? 0;
  }

  reservation(requestId: string): ReservationRow | undefined {
    return this.sql
      .exec<ReservationRow>(
        'SELECT request_id, user_id, order_id, status, reason, released, created_at, quantity FROM reservation WHERE request_id = ?',
        requestId,
      )
      .toArray()[0];
  }

  // Reservations: what settlements and releases change (a batch's own reads and writes are reserve-store.ts).

  /**
   * Marks queued reservations' orders confirmed (their outbox rows go), in two statements
   * whatever their number: a consumer batch confirms thousands. The ones that were queued, with
   * their shoppers; one that was not (settled already, released) is left as it is.
   */
  confirmMany(requestIds: string[], now: number): { requestId: string; userId: string }[] {
    if (requestIds.length === 0) {
      return [];
    }
    const confirmed = this.sql
      .exec<{ request_id: string; user_id: string }>(
        `UPDATE reservation SET status = 'SUCCESS', settled_at = ? WHERE ${REQUESTS_IN} AND status = 'QUEUED' AND released = 0
         RETURNING request_id, user_id`,
        now,
        JSON.stringify(requestIds),
      )
      .toArray();
    if (confirmed.length > 0) {
      this.sql.exec(`DELETE FROM outbox WHERE ${REQUESTS_IN}`, JSON.stringify(confirmed.map((r) => r.request_id)));
    }
    return confirmed.map((r) => ({ requestId: r.request_id, userId: r.user_id }));
  }

  /**
   * A reservation no longer holds a unit: one that never became an order reports the reason; an
   * order keeps SUCCESS (its own status tells the story). Its units leave the shopper's holding
   * (the holder row goes once it holds none) and its outbox row goes. The units the shopper
   * still holds afterwards.
   */
  markReleased(row: ReservationRow, reason: FailReason, now: number): number {
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
    this.sql.exec('UPDATE holder SET units = units - ? WHERE user_id = ?', row.quantity, row.user_id);
    this.sql.exec('DELETE FROM holder WHERE user_id = ? AND units <= 0', row.user_id);
    this.sql.exec('DELETE FROM outbox WHERE request_id = ?', row.request_id);
    return this.userUnits(row.user_id);
  }

  /** The counts the snapshot reports, kept by triggers: one row, whatever the sale's size. */
  tally(): Tally {
    return this.sql
      .exec<Tally>(
        'SELECT queued, confirmed, holders, unsent, admitted_queued AS admittedQueued, admitted_confirmed AS admittedConfirmed FROM tally WHERE id = 1',
      )
      .one();
  }

  /** Keyed purchases accepted after `since`, newest first (for the list a SOLD_OUT answer carries). */
  keyedAcceptedSince(since: number, limit: number): { requestId: string; at: number }[] {
    return this.sql
      .exec<{ request_id: string; created_at: number }>(
        'SELECT request_id, created_at FROM reservation WHERE order_id IS NOT NULL AND keyed IS NOT 0 AND created_at > ? ORDER BY created_at DESC LIMIT ?',
        since,
        limit,
      )
      .toArray()
      .map((r) => ({ requestId: r.request_id, at: r.created_at }));
  }

  // The outbox: one row per unsettled reservation, from its acceptance until it settles.

  /** When the oldest unsettled reservation was accepted, and the oldest one the queue never took (null when none). */
  outboxAges(): { oldestUnsettled: number | null; oldestUnsent: number | null } {
    const unsettled = this.sql.exec<{ created_at: number }>('SELECT created_at FROM outbox ORDER BY seq LIMIT 1').toArray()[0];
    const unsent = this.sql.exec<{ at: number | null }>('SELECT min(created_at) AS at FROM outbox WHERE sends = 0').one().at;
    return { oldestUnsettled: unsettled?.created_at ?? null, oldestUnsent: unsent };
  }

  /** Rows due for a (re)send, soonest first. */
  dueOutbox(now: number, limit: number): OutboxRow[] {
    return this.sql
      .exec<OutboxRow>('SELECT seq, body, attempts, sends FROM outbox WHERE next_at <= ? ORDER BY next_at LIMIT ?', now, limit)
      .toArray();
  }

  /** The queue took these rows: each is due again after `baseMs`, doubling with every send, at most `capMs`. */
  markSent(seqs: number[], now: number, resend: { baseMs: number; capMs: number }): void {
    this.sql.exec(
      `UPDATE outbox SET sends = sends + 1, attempts = 0, sent_at = ?, next_at = ? + min(?, ? * (1 << min(sends, 30))) WHERE ${SEQS_IN}`,
      now,
      now,
      resend.capMs,
      resend.baseMs,
      JSON.stringify(seqs),
    );
  }

  /** The queue refused these rows: try again at `at`. */
  retryOutbox(seqs: number[], at: number): void {
    this.sql.exec(`UPDATE outbox SET attempts = attempts + 1, next_at = ? WHERE ${SEQS_IN}`, at, JSON.stringify(seqs));
  }

  /** Makes every row the queue never took due now (the re-drive of a stuck outbox); how many. */
  unsentDueNow(now: number): number {
    return this.sql.exec('UPDATE outbox SET next_at = ? WHERE sends = 0 AND next_at > ? RETURNING seq', now, now).toArray().length;
  }

  /** Makes due now every row accepted and last sent before `before` (the re-drive of unsettled reservations); how many. */
  unsettledDueNow(before: number, now: number): number {
    const sql = 'UPDATE outbox SET next_at = ? WHERE created_at < ? AND sent_at < ? AND next_at > ? RETURNING seq';
    return this.sql.exec(sql, now, before, before, now).toArray().length;
  }

  nextOutboxAt(): number | null {
    return this.sql.exec<{ at: number | null }>('SELECT min(next_at) AS at FROM outbox').one().at;
  }

  /**
   * Unsettled reservations without an outbox row: builds before OUTBOX_KEEPS_UNSETTLED deleted the
   * row once the queue took it. Read once, when such an object is upgraded.
   */
  unsettledWithoutOutbox(): UnsettledRow[] {
    return this.sql
      .exec<UnsettledRow>(
        `SELECT r.request_id, r.user_id, r.order_id, r.created_at, r.quantity FROM reservation AS r
         WHERE r.status = 'QUEUED' AND r.released = 0 AND r.order_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.request_id = r.request_id)`,
      )
      .toArray();
  }

  /** Puts back the outbox row of a reservation that was sent before and never settled, due now. */
  restoreOutbox(message: OrderMessage, sentAt: number, now: number): void {
    this.sql.exec(
      'INSERT INTO outbox (request_id, body, next_at, created_at, sends, sent_at) VALUES (?, ?, ?, ?, 1, ?)',
      message.requestId,
      JSON.stringify(message),
      now,
      message.reservedAt,
      sentAt,
    );
  }

  // Pruning (the alarm).

  /** Forgets expired tokens and old remembered rejections; true when spent tokens remain to prune later. */
  prune(now: number, rejectionsBefore: number): boolean {
    this.sql.exec('DELETE FROM used_token WHERE expires_at < ?', now);
    this.sql.exec('DELETE FROM reservation WHERE order_id IS NULL AND created_at < ?', rejectionsBefore);
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
