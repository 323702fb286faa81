import { DurableObject } from 'cloudflare:workers';
import { dbOptions, withDb } from '../../db/client';
import { findGoods, toGoodsInit } from '../../db/goods';
import { backoffSeconds } from '../../workers/kernel/backoff';
import { getConfig } from '../../workers/kernel/config';
import type {
  FailReason,
  GoodsInit,
  OrderMessage,
  ReserveItem,
  ReserveOutcome,
  ResultView,
  Settlement,
  StockSnapshot,
} from '../../workers/kernel/contract';
import { log } from '../../workers/kernel/log';
import { scheduleMetricsFlush } from '../../workers/metrics/flush';
import { count } from '../../workers/metrics/registry';
import type { MirrorExpectation } from '../../workers/mirror/compare';
import { FINAL_TTL_SECONDS } from '../../workers/mirror/keys';
import { holderCount, holderIds, recentResults } from '../../workers/mirror/object-state';
import type { MirrorFullState, MirrorGoods } from '../../workers/mirror/plan';
import { type MirrorCheck, MirrorSync } from '../../workers/mirror/sync';
import { decide, orderNumber, type PriorAnswer, type ReservationView, type SaleState } from './rules';

const SCHEMA_VERSION = 1;
/** The outbox's safety net: if the immediate flush did not empty it, the alarm retries. */
const OUTBOX_ALARM_DELAY_MS = 2_000;
const SEND_BATCH_MAX = 100;
const PRUNE_INTERVAL_MS = 5 * 60_000;
/** Remembered rejections (Idempotency-Key retries) are kept this long. */
const REJECTION_TTL_MS = 24 * 3600_000;

type Sale = SaleState & {
  goodsId: number;
  activityId: number;
  priceCents: number;
  payTimeoutSeconds: number;
  nextSeq: number;
};

type ReservationRow = {
  request_id: string;
  user_id: string;
  order_id: string | null;
  status: 'QUEUED' | 'SUCCESS' | 'FAIL';
  reason: string | null;
  released: number;
};

/**
 * One per seckill goods: the seed's Redis Lua script as a single-threaded object with
 * transactional SQLite storage. Every reservation's checks, decrement and outbox row commit
 * together, so "stock taken but message lost" cannot happen.
 */
export class GoodsStock extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private sale: Sale | undefined;
  private flushing: Promise<void> | undefined;
  private flushAgain = false;
  private alarmAt: number | null = null;
  /** Reservation items received since this instance started; in memory, for load and admission checks. */
  private reserveRequests = 0;
  /** The Redis mirror of this object (seckill:stock:{id}, ...), written after commits. */
  private readonly mirror: MirrorSync;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.mirror = new MirrorSync(this.sql, () => getConfig(env).redis, {
      goodsId: () => this.sale?.goodsId,
      fullState: () => this.mirrorState(),
      expectation: () => this.mirrorExpectation(),
      retryAt: (at) => this.ensureAlarm(at),
    });
    void ctx.blockConcurrencyWhile(async () => {
      this.migrate();
      this.mirror.load();
      this.sale = this.readSale();
      this.alarmAt = await ctx.storage.getAlarm();
      if (this.mirror.staleSinceMs !== null) {
        // The previous instance left the mirror behind: the alarm rewrites it.
        this.ensureAlarm(Date.now() + 1_000);
      }
    });
  }

  private migrate(): void {
    this.sql.exec('CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)');
    const version = this.sql.exec<{ value: number }>("SELECT value FROM meta WHERE key = 'schema'").toArray()[0]?.value ?? 0;
    if (version >= SCHEMA_VERSION) {
      return;
    }
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS sale (
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
        attempts INTEGER NOT NULL DEFAULT 0, next_at INTEGER NOT NULL, created_at INTEGER NOT NULL);
    `);
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", SCHEMA_VERSION);
  }

  private readSale(): Sale | undefined {
    const r = this.sql
      .exec<{
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
      }>('SELECT * FROM sale WHERE id = 1')
      .toArray()[0];
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

  /**
   * Creates the sale from Postgres' settings, or refreshes its settings. The stock count is
   * taken only the first time: afterwards this object is the authority on it.
   */
  async init(goods: GoodsInit): Promise<StockSnapshot> {
    const before = this.sale && this.mirrorGoods(this.sale);
    if (this.sale) {
      this.sql.exec(
        'UPDATE sale SET activity_id = ?, price_cents = ?, start_at = ?, end_at = ?, paused = ?, pay_timeout_seconds = ? WHERE id = 1',
        goods.activityId,
        goods.priceCents,
        goods.startAt,
        goods.endAt,
        goods.paused ? 1 : 0,
        goods.payTimeoutSeconds,
      );
    } else {
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
    this.sale = this.readSale();
    this.mirror.setTitle(goods.title);
    const after = this.sale && this.mirrorGoods(this.sale);
    if (!before) {
      // A new sale replaces whatever an older deployment may have left under its keys.
      this.mirror.noteFull();
    } else if (after && JSON.stringify(after) !== JSON.stringify(before)) {
      // Only a real change: a mirror that drifted on its own is for reconciliation to find and count.
      this.mirror.noteGoods(after);
    }
    this.syncMirror();
    return this.snapshotNow();
  }

  /** Loads the sale from Postgres the first time a goods is used without pre-warm. */
  private async ensureSale(goodsId: number): Promise<Sale | 'NOT_FOUND' | 'BUSY'> {
    if (this.sale) {
      return this.sale;
    }
    let outcome: Sale | 'NOT_FOUND' | 'BUSY' = 'BUSY';
    // Block other calls while loading so exactly one initialisation happens.
    await this.ctx.blockConcurrencyWhile(async () => {
      if (this.sale) {
        outcome = this.sale;
        return;
      }
      try {
        const config = getConfig(this.env);
        const row = await withDb(dbOptions(config, 1), (db) => findGoods(db, goodsId));
        if (!row) {
          outcome = 'NOT_FOUND';
          return;
        }
        await this.init(toGoodsInit(row));
        outcome = this.sale ?? 'BUSY';
      } catch (error) {
        log.error('goods_stock.lazy_init_failed', { goodsId, error });
        outcome = 'BUSY';
      }
    });
    return outcome;
  }

  /**
   * Reserves for a batch of shoppers (one isolate's group commit, or a single request).
   * All checks and writes happen in one synchronous transaction, in arrival order.
   */
  async reserveMany(goodsId: number, items: ReserveItem[]): Promise<ReserveOutcome[]> {
    this.reserveRequests += items.length;
    const sale = await this.ensureSale(goodsId);
    if (typeof sale === 'string') {
      return items.map((i) => ({ ok: false, requestId: i.requestId, reason: sale, replay: false }));
    }
    const now = Date.now();
    let accepted = 0;
    let outcomes: ReserveOutcome[];
    try {
      outcomes = this.ctx.storage.transactionSync(() => {
        const answers = items.map((item) => {
          const outcome = this.reserveOne(sale, item, now);
          if (outcome.ok && !outcome.replay) {
            accepted++;
          }
          return outcome;
        });
        if (accepted > 0) {
          this.sql.exec('UPDATE sale SET remaining = ?, next_seq = ? WHERE id = 1', sale.remaining, sale.nextSeq);
        }
        return answers;
      });
    } catch (error) {
      // The transaction rolled back; the in-memory copy may have moved ahead of it.
      this.sale = this.readSale();
      throw error;
    }
    if (accepted > 0) {
      this.ensureAlarm(now + OUTBOX_ALARM_DELAY_MS);
      // The rows are committed; sending them now only shortens the wait. The alarm retries.
      this.ctx.waitUntil(this.flushOutbox());
      this.mirrorAccepted(sale, items, outcomes);
    }
    this.countDecisions(sale.goodsId, outcomes);
    return outcomes;
  }

  /** One reservation inside the batch's transaction: decide, then apply the decision. */
  private reserveOne(sale: Sale, item: ReserveItem, now: number): ReserveOutcome {
    const decision = decide(this.view(sale), item, now);
    if (decision.kind === 'replay') {
      return decision.orderId
        ? { ok: true, requestId: item.requestId, orderId: decision.orderId, replay: true }
        : { ok: false, requestId: item.requestId, reason: decision.reason ?? 'BUSY', replay: true };
    }
    if (decision.kind === 'reject') {
      if (decision.spendToken) {
        this.spendToken(item);
      }
      if (item.keyed) {
        this.sql.exec(
          "INSERT INTO reservation (request_id, user_id, status, reason, released, created_at) VALUES (?, ?, 'FAIL', ?, 1, ?)",
          item.requestId,
          item.userId,
          decision.reason,
          now,
        );
      }
      return { ok: false, requestId: item.requestId, reason: decision.reason, replay: false };
    }
    return { ok: true, requestId: item.requestId, orderId: this.accept(sale, item, now), replay: false };
  }

  private view(sale: Sale): ReservationView {
    return {
      sale,
      prior: (requestId) => {
        const r = this.sql
          .exec<Pick<ReservationRow, 'order_id' | 'status' | 'reason' | 'released'>>(
            'SELECT order_id, status, reason, released FROM reservation WHERE request_id = ?',
            requestId,
          )
          .toArray()[0];
        if (!r) {
          return undefined;
        }
        const answer: PriorAnswer = {
          orderId: r.status === 'FAIL' ? null : r.order_id,
          reason: (r.reason as FailReason | null) ?? null,
          released: r.released === 1,
        };
        return answer;
      },
      tokenUsed: (tokenId) => this.sql.exec('SELECT 1 FROM used_token WHERE token_id = ?', tokenId).toArray().length > 0,
      userHolds: (userId) => this.sql.exec('SELECT 1 FROM holder WHERE user_id = ?', userId).toArray().length > 0,
    };
  }

  private spendToken(item: ReserveItem): void {
    this.sql.exec('INSERT OR IGNORE INTO used_token (token_id, expires_at) VALUES (?, ?)', item.tokenId, item.tokenExpiresAt);
  }

  private accept(sale: Sale, item: ReserveItem, now: number): string {
    const seq = sale.nextSeq++;
    sale.remaining--;
    const orderId = `${sale.goodsId}-${seq}`;
    const message: OrderMessage = {
      v: 1,
      kind: 'reserve',
      requestId: item.requestId,
      orderId,
      orderNo: orderNumber(sale.goodsId, seq, now),
      userId: item.userId,
      goodsId: sale.goodsId,
      activityId: sale.activityId,
      priceCents: sale.priceCents,
      payTimeoutSeconds: sale.payTimeoutSeconds,
      reservedAt: now,
    };
    this.spendToken(item);
    this.sql.exec(
      "INSERT INTO reservation (request_id, user_id, order_id, status, created_at) VALUES (?, ?, ?, 'QUEUED', ?)",
      item.requestId,
      item.userId,
      orderId,
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
    return orderId;
  }

  /** Records what Postgres made of reservations: confirmed orders, or failures that give the unit back. */
  async settle(settlements: Settlement[]): Promise<{ confirmed: number; released: number }> {
    const now = Date.now();
    let confirmed = 0;
    let released = 0;
    this.ctx.storage.transactionSync(() => {
      for (const s of settlements) {
        if (s.ok) {
          const rows = this.sql
            .exec<{ user_id: string }>(
              "UPDATE reservation SET status = 'SUCCESS', settled_at = ? WHERE request_id = ? AND status = 'QUEUED' AND released = 0 RETURNING user_id",
              now,
              s.requestId,
            )
            .toArray();
          confirmed += rows.length;
          for (const r of rows) {
            this.mirror.noteResult({ requestId: s.requestId, userId: r.user_id, value: `SUCCESS:${s.orderId}` });
          }
        } else if (this.releaseRow(s.requestId, s.reason, now)) {
          released++;
        }
      }
    });
    if (confirmed > 0 || released > 0) {
      this.syncMirror();
    }
    return { confirmed, released };
  }

  /**
   * Gives a reservation's unit back (cancelled, timed out, or refused by Postgres) and lets the
   * user try again. Idempotent: a second release of the same request changes nothing.
   */
  async release(requestId: string, reason: FailReason): Promise<{ released: boolean; remaining: number }> {
    const released = this.ctx.storage.transactionSync(() => this.releaseRow(requestId, reason, Date.now()));
    if (released) {
      this.syncMirror();
    }
    return { released, remaining: this.sale?.remaining ?? 0 };
  }

  private releaseRow(requestId: string, reason: FailReason, now: number): boolean {
    const sale = this.sale;
    const row = this.sql.exec<ReservationRow>('SELECT * FROM reservation WHERE request_id = ?', requestId).toArray()[0];
    if (!sale || !row || row.released === 1 || row.order_id === null) {
      return false;
    }
    // A reservation that never became an order reports the reason; an order keeps SUCCESS
    // (its own status tells the story) but no longer holds a unit.
    if (row.status === 'QUEUED') {
      this.sql.exec(
        "UPDATE reservation SET status = 'FAIL', reason = ?, released = 1, settled_at = ? WHERE request_id = ?",
        reason,
        now,
        requestId,
      );
    } else {
      this.sql.exec('UPDATE reservation SET released = 1 WHERE request_id = ?', requestId);
    }
    this.sql.exec('DELETE FROM holder WHERE user_id = ? AND request_id = ?', row.user_id, requestId);
    this.sql.exec('DELETE FROM outbox WHERE request_id = ?', requestId);
    sale.remaining = Math.min(sale.totalStock, sale.remaining + 1);
    this.sql.exec('UPDATE sale SET remaining = ? WHERE id = 1', sale.remaining);
    this.mirror.noteUser(row.user_id, false);
    this.mirror.noteStock(sale.remaining);
    if (row.status === 'QUEUED') {
      this.mirror.noteResult({ requestId, userId: row.user_id, value: `FAIL:${reason}` });
    }
    return true;
  }

  /** The answer for one request, for the result route (which checks the owner). */
  async result(requestId: string): Promise<ResultView | undefined> {
    const r = this.sql.exec<ReservationRow>('SELECT * FROM reservation WHERE request_id = ?', requestId).toArray()[0];
    if (!r) {
      return undefined;
    }
    return {
      requestId: r.request_id,
      userId: r.user_id,
      status: r.status,
      ...(r.order_id && r.status !== 'FAIL' ? { orderId: r.order_id } : {}),
      ...(r.reason ? { reason: r.reason as FailReason } : {}),
    };
  }

  async setPaused(paused: boolean): Promise<StockSnapshot | undefined> {
    if (!this.sale) {
      return undefined;
    }
    this.sql.exec('UPDATE sale SET paused = ? WHERE id = 1', paused ? 1 : 0);
    this.sale.paused = paused;
    this.mirror.noteGoods(this.mirrorGoods(this.sale));
    this.syncMirror();
    return this.snapshotNow();
  }

  async snapshot(): Promise<StockSnapshot | undefined> {
    return this.sale ? this.snapshotNow() : undefined;
  }

  private snapshotNow(): StockSnapshot {
    const sale = this.sale;
    if (!sale) {
      throw new Error('snapshot of an uninitialised sale');
    }
    const counts = this.sql
      .exec<{ queued: number; confirmed: number }>(
        `SELECT coalesce(sum(status = 'QUEUED' AND released = 0), 0) AS queued,
                coalesce(sum(status = 'SUCCESS' AND released = 0), 0) AS confirmed FROM reservation`,
      )
      .one();
    const outbox = this.sql.exec<{ n: number; oldest: number | null }>('SELECT count(*) AS n, min(created_at) AS oldest FROM outbox').one();
    return {
      goodsId: sale.goodsId,
      initialized: true,
      totalStock: sale.totalStock,
      remaining: sale.remaining,
      startAt: sale.startAt,
      endAt: sale.endAt,
      paused: sale.paused,
      queued: counts.queued,
      confirmed: counts.confirmed,
      outboxPending: outbox.n,
      oldestOutboxAt: outbox.oldest,
      mirrorStaleSince: this.mirror.staleSinceMs,
      reserveRequests: this.reserveRequests,
    };
  }

  /** Sends due outbox rows to the order queue. Single-flight: concurrent callers share a run. */
  flushOutbox(): Promise<void> {
    if (this.flushing) {
      this.flushAgain = true;
      return this.flushing;
    }
    this.flushing = (async () => {
      try {
        do {
          this.flushAgain = false;
          await this.flushDue();
        } while (this.flushAgain);
      } finally {
        this.flushing = undefined;
      }
    })();
    return this.flushing;
  }

  private async flushDue(): Promise<void> {
    const now = Date.now();
    const rows = this.sql
      .exec<{ seq: number; body: string; attempts: number }>(
        'SELECT seq, body, attempts FROM outbox WHERE next_at <= ? ORDER BY seq LIMIT 1000',
        now,
      )
      .toArray();
    for (let i = 0; i < rows.length; i += SEND_BATCH_MAX) {
      const chunk = rows.slice(i, i + SEND_BATCH_MAX);
      try {
        await this.env.ORDER_QUEUE.sendBatch(chunk.map((r) => ({ body: JSON.parse(r.body) as OrderMessage, contentType: 'json' })));
        const seqs = chunk.map((r) => r.seq);
        this.sql.exec(`DELETE FROM outbox WHERE seq IN (${seqs.map(() => '?').join(',')})`, ...seqs);
      } catch (error) {
        const attempts = (chunk[0]?.attempts ?? 0) + 1;
        const retryAt = Date.now() + backoffSeconds(attempts, 60) * 1000;
        log.warn('goods_stock.outbox_send_failed', { goodsId: this.sale?.goodsId, rows: chunk.length, attempts, error });
        for (const r of chunk) {
          this.sql.exec('UPDATE outbox SET attempts = attempts + 1, next_at = ? WHERE seq = ?', retryAt, r.seq);
        }
        this.ensureAlarm(retryAt);
        return;
      }
    }
  }

  /** Keeps one alarm set at the earliest due work (outbox retry or pruning). */
  private ensureAlarm(at: number): void {
    if (this.alarmAt !== null && this.alarmAt <= at) {
      return;
    }
    this.alarmAt = at;
    // Storage writes are covered by the output gate: the caller's answer waits for it.
    void this.ctx.storage.setAlarm(at);
  }

  async alarm(): Promise<void> {
    this.alarmAt = null;
    await this.flushOutbox();
    if (this.mirror.staleSinceMs !== null) {
      await this.mirror.flush(true);
    }
    const now = Date.now();
    this.sql.exec('DELETE FROM used_token WHERE expires_at < ?', now);
    this.sql.exec("DELETE FROM reservation WHERE order_id IS NULL AND status = 'FAIL' AND created_at < ?", now - REJECTION_TTL_MS);
    const next = this.sql.exec<{ at: number | null }>('SELECT min(next_at) AS at FROM outbox').one().at;
    if (next !== null) {
      this.ensureAlarm(Math.max(next, now + 100));
    } else if (this.sql.exec('SELECT 1 FROM used_token LIMIT 1').toArray().length > 0) {
      this.ensureAlarm(now + PRUNE_INTERVAL_MS);
    }
    const mirrorRetry = this.mirror.retryAtMs;
    if (mirrorRetry !== null) {
      this.ensureAlarm(Math.max(mirrorRetry, now + 100));
    }
  }

  /** Compares the Redis mirror with this object; with `repair`, rewrites it when they differ. */
  async mirrorCheck(repair: boolean): Promise<MirrorCheck> {
    return this.mirror.check(repair);
  }

  /**
   * Sends the whole outbox now, ignoring the retry backoff (the reconciler's re-drive of a
   * stuck outbox). Returns how many rows are still waiting afterwards.
   */
  async redriveOutbox(): Promise<{ before: number; pending: number }> {
    const now = Date.now();
    const before = this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM outbox').one().n;
    this.sql.exec('UPDATE outbox SET next_at = ? WHERE next_at > ?', now, now);
    await this.flushOutbox();
    return { before, pending: this.sql.exec<{ n: number }>('SELECT count(*) AS n FROM outbox').one().n };
  }

  // Mirror and metrics bookkeeping: after a commit, never on the way to the shopper's answer.

  private syncMirror(): void {
    if (this.mirror.enabled) {
      this.ctx.waitUntil(this.mirror.flush());
    }
  }

  private mirrorAccepted(sale: Sale, items: ReserveItem[], outcomes: ReserveOutcome[]): void {
    outcomes.forEach((o, i) => {
      const userId = items[i]?.userId;
      if (o.ok && !o.replay && userId !== undefined) {
        this.mirror.noteUser(userId, true);
        this.mirror.noteResult({ requestId: o.requestId, userId, value: 'QUEUED' });
      }
    });
    this.mirror.noteStock(sale.remaining);
    this.syncMirror();
  }

  private countDecisions(goodsId: number, outcomes: ReserveOutcome[]): void {
    for (const o of outcomes) {
      count('seckill_reservations_total', {
        goods_id: String(goodsId),
        outcome: o.replay ? 'replay' : o.ok ? 'accepted' : o.reason.toLowerCase(),
      });
    }
    scheduleMetricsFlush(this.env, (p) => this.ctx.waitUntil(p));
  }

  private mirrorGoods(sale: Sale): MirrorGoods {
    return {
      goodsId: sale.goodsId,
      activityId: sale.activityId,
      title: this.mirror.title,
      priceCents: sale.priceCents,
      totalStock: sale.totalStock,
      startAt: sale.startAt,
      endAt: sale.endAt,
      paused: sale.paused,
      payTimeoutSeconds: sale.payTimeoutSeconds,
    };
  }

  private mirrorExpectation(): MirrorExpectation | undefined {
    return this.sale && { goods: this.mirrorGoods(this.sale), remaining: this.sale.remaining, holders: holderCount(this.sql) };
  }

  private mirrorState(): MirrorFullState | undefined {
    return (
      this.sale && {
        goods: this.mirrorGoods(this.sale),
        remaining: this.sale.remaining,
        holders: holderIds(this.sql),
        results: recentResults(this.sql, Date.now() - FINAL_TTL_SECONDS * 1000),
      }
    );
  }
}
