import { DurableObject } from 'cloudflare:workers';
import { getConfig } from '../../workers/kernel/config';
import {
  ACCEPTED_KEYED_WINDOW_MS,
  type FailReason,
  type GoodsInit,
  type ReserveItem,
  type ReserveOutcome,
  type ResultView,
  type Settlement,
  type StockSnapshot,
} from '../../workers/kernel/contract';
import { resetIfAsked, resetName } from '../../workers/kernel/dev-faults';
import { log } from '../../workers/kernel/log';
import { scheduleMetricsFlush } from '../../workers/metrics/flush';
import { type MirrorCheck, MirrorSync } from '../../workers/mirror/sync';
import { nextAlarmAt, PRUNE_INTERVAL_MS } from './alarm-plan';
import { changeAllowlist } from './allowlist';
import { countDecisions } from './decision-counts';
import { KeyedAccepts } from './keyed-accepts';
import { type GiveBack, type Grant, Leases } from './leases';
import { commitReservations, refusalsInGoodsUnits, restoreUnsettled } from './ledger';
import { mirrorExpectation, mirrorFullState, mirrorGoods, noteAccepted } from './mirror-view';
import { coalesceMs, Outbox } from './outbox';
import { ReserveStore } from './reserve-store';
import { type ResultWait, ResultWaiters } from './result-waiters';
import { quantityOf } from './rules';
import { goodsFromPostgres, resultView, saleIsOn, stockSnapshot } from './sale';
import { OUTBOX_KEEPS_UNSETTLED } from './schema';
import { applySettlements, releaseAndMirror, reportRefused, returnRefusedAndMirror, type SettleCounts, settleInParts } from './settlements';
import { type Sale, StockStorage } from './storage';

/** The outbox's safety net: if the immediate flush did not empty it, the alarm retries. */
const OUTBOX_ALARM_DELAY_MS = 2_000;
/** Remembered rejections (Idempotency-Key retries) are kept this long. */
const REJECTION_TTL_MS = 24 * 3600_000;

/**
 * One per seckill goods: the seed's Redis Lua script as a single-threaded object with
 * transactional SQLite storage. Every reservation's checks, decrement and outbox row commit
 * together, so "stock taken but message lost" cannot happen.
 *
 * This class is the RPC surface; the tables are storage.ts, the decisions rules.ts (applied by
 * ledger.ts, and Postgres' answers by settlements.ts), the queue sends outbox.ts, the stock
 * shards' leases leases.ts, and the Redis mirror the mirror library, fed plain data.
 */
export class GoodsStock extends DurableObject<Env> {
  private readonly store: StockStorage;
  private readonly reservations: ReserveStore;
  /** The sale row's in-memory copy (undefined until the goods is initialised). */
  private sale: Sale | undefined;
  private readonly outbox: Outbox;
  /** The Redis mirror of this object (seckill:stock:{id}, ...), written after commits. */
  private readonly mirror: MirrorSync;
  private alarmAt: number | null = null;
  /** Reservation items received since this instance started; in memory, for load and admission checks. */
  private reserveRequests = 0;
  /** Keyed purchases accepted in the last minutes, named in SOLD_OUT answers (rebuilt at start). */
  private readonly keyedAccepts = new KeyedAccepts();
  private lastPruneAt = 0;
  /** Stock shards: this object's lease of the goods' stock, or (shard 0) the goods' pool. */
  private readonly leases: Leases;
  /** Result reads held until their answer is final (result-waiters.ts). */
  private readonly waiters: ResultWaiters;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new StockStorage(ctx.storage.sql);
    this.reservations = new ReserveStore(ctx.storage.sql);
    this.waiters = new ResultWaiters((requestId) => resultView(this.store, requestId));
    const goodsId = () => this.sale?.goodsId;
    const retryAt = (at: number) => this.ensureAlarm(at);
    // The queue binding is read at send time from this.env.
    this.outbox = new Outbox(this.store, {
      queue: () => this.env.ORDER_QUEUE,
      goodsId,
      schedule: () => getConfig(this.env).retry,
      coalesceMs: () => coalesceMs(this.leases.shards),
      retryAt,
    });
    const stockPart = () => (this.leases.shards > 1 ? String(this.leases.shard) : undefined);
    this.mirror = new MirrorSync(() => getConfig(env).redis, {
      goodsId,
      fullState: () => this.sale && mirrorFullState(this.store, this.sale, this.mirror.title, Date.now(), stockPart()),
      expectation: () => this.sale && mirrorExpectation(this.store, this.sale, this.mirror.title, stockPart()),
      stockPart,
      retryAt,
      persist: (state) => this.store.saveMirrorState(state),
    });
    const stockChanged = (remaining: number) => {
      this.mirror.noteStock(remaining);
      this.syncMirror();
    };
    this.leases = new Leases(ctx, env, { sale: () => this.sale, stockChanged, retryAt });
    void ctx.blockConcurrencyWhile(async () => {
      const now = Date.now();
      let restored = 0;
      ctx.storage.transactionSync(() => {
        const found = this.store.migrate();
        this.sale = this.store.readSale();
        this.leases.load();
        if (this.sale && found > 0 && found < OUTBOX_KEEPS_UNSETTLED) {
          restored = restoreUnsettled(this.store, this.sale, now);
        }
      });
      if (restored > 0) {
        log.warn('goods_stock.outbox_restored', { goodsId: this.sale?.goodsId, rows: restored });
      }
      this.mirror.load(this.store.mirrorState());
      this.keyedAccepts.load(this.store.keyedAcceptedSince(now - ACCEPTED_KEYED_WINDOW_MS, this.keyedAccepts.loadLimit));
      this.alarmAt = await ctx.storage.getAlarm();
      if (restored > 0 || this.leases.pending) {
        // Rows to send, or an answer between shards (a grant or give-back) the instance before lost.
        this.ensureAlarm(now);
      }
      if (this.mirror.staleSinceMs !== null) {
        // The previous instance left the mirror behind: the alarm rewrites it.
        this.ensureAlarm(Date.now() + 1_000);
      }
    });
  }

  /** Creates the sale from Postgres' settings or refreshes them; the stock count only the first time (then this object owns it).
   * `shard` is this object's stock shard (routing.ts); a shard other than 0 then takes its first lease. */
  async init(goods: GoodsInit, shard = 0, lease = true): Promise<StockSnapshot> {
    this.devReset(goods.goodsId, shard);
    const before = this.sale && mirrorGoods(this.sale, this.mirror.title);
    if (this.sale) {
      this.store.updateSettings(goods);
    } else {
      this.store.insertSale(goods, shard);
    }
    this.sale = this.store.readSale();
    // Lazy init (inside blockConcurrencyWhile) takes no lease: its first batch asks if it must.
    await this.leases.configure(shard, goods.shards ?? 1, goods.locationHint, lease);
    this.mirror.setTitle(goods.title);
    const after = this.sale && mirrorGoods(this.sale, this.mirror.title);
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
  private async ensureSale(goodsId: number, shard = 0): Promise<Sale | 'NOT_FOUND' | 'BUSY'> {
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
        const goods = await goodsFromPostgres(this.env, goodsId);
        if (!goods) {
          outcome = 'NOT_FOUND';
          return;
        }
        await this.init(goods, shard, false);
        outcome = this.sale ?? 'BUSY';
      } catch (error) {
        log.error('goods_stock.lazy_init_failed', { goodsId, error });
        outcome = 'BUSY';
      }
    });
    return outcome;
  }

  /** Reserves for a batch of shoppers (one isolate's group commit, or a single request), in one transaction (commitBatch). */
  async reserveMany(goodsId: number, items: ReserveItem[], shard = 0): Promise<ReserveOutcome[]> {
    this.reserveRequests += items.length;
    const loaded = await this.ensureSale(goodsId, shard);
    if (typeof loaded === 'string') {
      return items.map((i) => ({ ok: false, requestId: i.requestId, reason: loaded, replay: false }));
    }
    // A stock shard that cannot cover the batch's units asks for stock first, until it can or
    // none comes: a purchase of several units is refused only once the goods as a whole lacks them.
    const units = items.reduce((n, item) => n + quantityOf(item), 0);
    const commit = (soldOutKnown: boolean) => this.commitBatch(loaded, items, soldOutKnown);
    const batch = this.leases.short(units) ? await this.leases.cover(units, () => saleIsOn(loaded, Date.now()), commit) : commit(true);
    const { sale, now, accepted } = batch;
    let { outcomes } = batch;
    if (accepted > 0) {
      this.ensureAlarm(now + OUTBOX_ALARM_DELAY_MS);
      // The rows are committed; sending them soon, with the next calls' rows, only shortens
      // the wait. The alarm retries.
      this.ctx.waitUntil(this.outbox.flushSoon());
      noteAccepted(this.mirror, sale, items, outcomes);
      this.syncMirror();
      this.leases.afterBatch(now);
    }
    if (this.leases.shards > 1) {
      outcomes = await refusalsInGoodsUnits(items, outcomes, () => this.leases.goodsLeft(sale));
    }
    countDecisions(sale.goodsId, items, outcomes);
    scheduleMetricsFlush(this.env, (p) => this.ctx.waitUntil(p));
    return this.keyedAccepts.answer(items, outcomes, now);
  }

  /** A batch's one synchronous transaction: every check and write, in arrival order. */
  private commitBatch(loaded: Sale, items: ReserveItem[], soldOutKnown: boolean) {
    const rows = { reservations: this.reservations, stock: this.store };
    try {
      return commitReservations(this.ctx.storage, rows, this.sale ?? loaded, items, soldOutKnown);
    } catch (error) {
      // The transaction rolled back; the in-memory copy may have moved ahead of it.
      this.sale = this.store.readSale();
      throw error;
    }
  }

  // Stock shards (leases.ts): shard 0 answers grant and report, the others giveBack.
  async grant(goodsId: number, from: number, grantId: string, want: number, need: number, dry: boolean, reported: number): Promise<Grant> {
    const sale = await this.ensureSale(goodsId, 0);
    return typeof sale === 'string' ? { units: 0 } : this.leases.pool.grant(sale, from, grantId, want, need, dry, reported);
  }

  /** Shard 0: the goods' free units over every shard, read so none is counted twice (a refusal of several units says it). */
  async goodsLeft(goodsId: number): Promise<number> {
    const sale = await this.ensureSale(goodsId, 0);
    return typeof sale === 'string' ? 0 : this.leases.pool.goodsLeft(sale);
  }

  async report(shard: number, remaining: number): Promise<void> {
    this.leases.pool.report(shard, remaining);
  }

  async giveBack(_goodsId: number, reclaimId: string, max: number): Promise<GiveBack> {
    return this.leases.giveBack(reclaimId, max);
  }

  /** Records what Postgres made of reservations, SETTLE_PART to a transaction (settlements.ts). */
  async settle(settlements: Settlement[]): Promise<SettleCounts> {
    const { confirmed, released, refused } = await settleInParts(settlements, (part) =>
      this.ctx.storage.transactionSync(() => applySettlements(this.store, this.sale, this.mirror, part, Date.now())),
    );
    const sale = this.sale;
    if (refused > 0 && sale) {
      reportRefused(sale, refused);
      scheduleMetricsFlush(this.env, (p) => this.ctx.waitUntil(p));
    }
    if (confirmed > 0 || released > 0 || refused > 0) {
      this.syncMirror();
      this.waiters.wake(settlements.map((s) => s.requestId));
    }
    if (released > 0) {
      this.ctx.waitUntil(this.leases.noteReleased());
    }
    return { confirmed, released, refused };
  }

  /** Puts up to `units` refused units back on sale (reconciliation, once Postgres has room), only while the stock is still
   * `expectedRemaining`, what the decision was made on; otherwise nothing, and the next run decides again. */
  async returnRefused(units: number, expectedRemaining: number): Promise<{ returned: number; remaining: number; refused: number }> {
    const returned = this.ctx.storage.transactionSync(() =>
      returnRefusedAndMirror(this.store, this.sale, this.mirror, units, expectedRemaining),
    );
    if (returned > 0) {
      this.syncMirror();
      // As a release does: shard 0 may be answering from its memory of a sell-out.
      await this.leases.noteReleased();
    }
    return { returned, remaining: this.sale?.remaining ?? 0, refused: this.sale?.refused ?? 0 };
  }

  /** Gives a reservation's unit back (cancelled, timed out, refused by Postgres) so the user may try again; idempotent. */
  async release(requestId: string, reason: FailReason): Promise<{ released: boolean; remaining: number }> {
    const released = this.ctx.storage.transactionSync(() =>
      releaseAndMirror(this.store, this.sale, this.mirror, requestId, reason, Date.now()),
    );
    if (released) {
      this.syncMirror();
      this.waiters.wake([requestId]);
      // Before the answer: the shopper who cancelled may tell a friend on another shard at once.
      await this.leases.noteReleased();
    }
    return { released, remaining: this.sale?.remaining ?? 0 };
  }

  /** One request's answer, for the result route (which checks the owner); with `wait`, held until final (result-waiters.ts). */
  async result(requestId: string, wait?: ResultWait): Promise<ResultView | undefined> {
    this.devReset();
    return this.waiters.answer(requestId, wait);
  }

  /** Adds and removes shoppers of the sale's allowlist (one chunk of a larger change); how many it holds. */
  async changeAllowlist(add: string[], remove: string[]): Promise<{ count: number }> {
    this.devReset();
    return { count: this.ctx.storage.transactionSync(() => changeAllowlist(this.ctx.storage.sql, add, remove)) };
  }

  async setPaused(paused: boolean): Promise<StockSnapshot | undefined> {
    this.devReset();
    if (!this.sale) {
      return undefined;
    }
    this.store.savePaused(paused);
    this.sale.paused = paused;
    this.mirror.noteGoods(mirrorGoods(this.sale, this.mirror.title));
    this.syncMirror();
    return this.snapshotNow();
  }

  async snapshot(): Promise<StockSnapshot | undefined> {
    this.devReset();
    return this.sale ? this.snapshotNow() : undefined;
  }

  /** Dev builds: this instance goes when a reset was asked for this stock shard (dev-faults.ts). */
  private devReset(goodsId = this.sale?.goodsId, shard = this.leases.shard): void {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetIfAsked(this.ctx, goodsId === undefined ? undefined : resetName(goodsId, { stock: shard }));
    }
  }

  private snapshotNow(): StockSnapshot {
    if (!this.sale) {
      throw new Error('snapshot of an uninitialised sale');
    }
    const instance = {
      mirrorStaleSince: this.mirror.staleSinceMs,
      reserveRequests: this.reserveRequests,
      heldResultReads: this.waiters.size,
    };
    return this.leases.decorate(stockSnapshot(this.store, this.sale, instance), this.sale);
  }

  /** Sends due outbox rows to the order queue. Single-flight: concurrent callers share a run. */
  flushOutbox(): Promise<void> {
    return this.outbox.flush();
  }

  /** Sends every message the queue has not taken now, past the retry backoff (the reconciler's re-drive of a stuck outbox). */
  async redriveOutbox(): Promise<{ before: number; pending: number }> {
    return this.outbox.redrive();
  }

  /** Sends again every unsettled reservation last sent before `before` (the reconciler's re-drive once Postgres answers again). */
  async redriveUnsettled(before: number): Promise<{ rows: number; queued: number }> {
    return this.outbox.redriveUnsettled(before);
  }

  /** Keeps one alarm set at the earliest due work (outbox retry, mirror retry or pruning); null: none. */
  private ensureAlarm(at: number | null): void {
    if (at === null || (this.alarmAt !== null && this.alarmAt <= at)) {
      return;
    }
    this.alarmAt = at;
    // Storage writes are covered by the output gate: the caller's answer waits for it.
    void this.ctx.storage.setAlarm(at);
  }

  async alarm(): Promise<void> {
    this.alarmAt = null;
    await this.outbox.flush();
    await this.leases.retryPending();
    if (this.mirror.staleSinceMs !== null) {
      await this.mirror.flush(true);
    }
    const now = Date.now();
    // The alarm comes every few minutes while reservations wait to settle; pruning needs less.
    let tokensLeft = true;
    if (now - this.lastPruneAt >= PRUNE_INTERVAL_MS) {
      this.lastPruneAt = now;
      tokensLeft = this.store.prune(now, now - REJECTION_TTL_MS);
    }
    this.ensureAlarm(
      nextAlarmAt(now, {
        outboxAt: this.store.nextOutboxAt(),
        pruneLeft: tokensLeft,
        leasesPending: this.leases.pending,
        mirrorRetryAt: this.mirror.retryAtMs,
      }),
    );
    scheduleMetricsFlush(this.env, (p) => this.ctx.waitUntil(p));
  }

  /** Compares the Redis mirror with this object; with `repair`, rewrites it when they differ. */
  async mirrorCheck(repair: boolean): Promise<MirrorCheck> {
    return this.mirror.check(repair);
  }

  // Mirror and metrics bookkeeping: after a commit, never on the way to the shopper's answer.

  private syncMirror(): void {
    if (this.mirror.enabled) {
      this.ctx.waitUntil(this.mirror.flush());
    }
  }
}
