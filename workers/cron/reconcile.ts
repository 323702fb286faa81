import type { Db } from '../../db/client';
import { closeSettledDeadLetters, countOpenDeadLetters } from '../../db/dead-letters';
import { countLiveOrders, findGoods, type GoodsRow, listGoodsInScope, toGoodsInit } from '../../db/goods';
import { countOverdueOrders } from '../../db/lifecycle';
import { insertReconciliationReport } from '../../db/reconciliation';
import { allStockShards, type goodsStock } from '../../durable-objects/routing';
import { initShards, shardSnapshots } from '../edge/stock-shards';
import { getConfig } from '../kernel/config';
import type { StockSnapshot } from '../kernel/contract';
import { log } from '../kernel/log';
import { sumSnapshots } from '../kernel/shards';
import { count } from '../metrics/registry';
import { closeOverdueOrders } from './overdue';

// Scheduled reconciliation (定时对账): the goods' object, Postgres and the Redis mirror are
// compared for every goods on sale or recently ended. What can be repaired safely is: the
// mirror (rewritten from the object), a stuck outbox (sent again), reservations left QUEUED
// (sent again: the run only happens when Postgres answers, so now they can land), overdue
// unpaid orders (closed, units returned), units Postgres refused (put back on sale once
// Postgres has room for them), dead letters whose reservation has settled since (closed).
// Stock itself is never "fixed" here: when the object and Postgres disagree once the queue is
// drained, the run reports it and an operator decides, because the object is the authority
// and an automatic correction could sell a unit twice.

/** Outbox rows older than this mean the queue send keeps failing (a healthy flush takes ms). */
export const STUCK_OUTBOX_MS = 30_000;
/** A mirror behind the object for longer than this had a write fail (healthy writes take ms). */
export const STALE_MIRROR_MS = 10_000;
/** Goods reconciled at once. */
const RECONCILE_CONCURRENCY = 4;
/**
 * What a run waits for a goods' shards to say where they stand. A goods whose shards do not
 * answer in time is reported failed for this run, and the run goes on with the others instead
 * of waiting as long as an object that stopped answering does.
 */
const SNAPSHOT_MS = 3_000;

export type Discrepancy = { kind: string } & Record<string, string | number | boolean | null>;
export type Action = { action: string } & Record<string, string | number | boolean | null>;

export type GoodsReconciliation = {
  goodsId: number;
  totalStock: number;
  doRemaining: number | null;
  dbStock: number;
  mirrorStock: number | null;
  liveOrders: number;
  /** True when nothing was found wrong. */
  consistent: boolean;
  discrepancies: Discrepancy[];
  actions: Action[];
  /** Checks that could not be made this time, and why. */
  skipped: string[];
};

export type ReconcileTrigger = 'cron' | 'admin';

export type ReconcileReport = {
  runAt: string;
  trigger: ReconcileTrigger;
  goods: GoodsReconciliation[];
  discrepancies: number;
  actions: number;
};

type DbState = { stock: number; live: number };

async function dbState(db: Db, goodsId: number): Promise<DbState | undefined> {
  const row = await findGoods(db, goodsId);
  return row ? { stock: row.stock, live: await countLiveOrders(db, goodsId) } : undefined;
}

/** A reservation QUEUED longer than this is overdue: the object's first resend is due then. */
export function unsettledAfterMs(env: Env): number {
  return getConfig(env).retry.resendSeconds * 1000;
}

type Stub = ReturnType<typeof goodsStock>;

/**
 * Units Postgres refused are reported every run. At rest, when Postgres has more stock than the
 * objects sell (dbStock - doRemaining = k > 0), up to k of them go back on sale, shard by shard:
 * Postgres can take that many more orders. Returns the goods' snapshot as it is afterwards.
 */
async function decideRefused(
  stubs: Stub[],
  shards: (StockSnapshot | undefined)[],
  total: StockSnapshot,
  dbStock: number,
  found: Discrepancy[],
  actions: Action[],
): Promise<StockSnapshot> {
  if (total.refused === 0) {
    return total;
  }
  found.push({ kind: 'units_refused', units: total.refused, dbStock, doRemaining: total.remaining });
  let room = dbStock - total.remaining;
  let { remaining, refused } = total;
  for (const [i, s] of shards.entries()) {
    const stub = stubs[i];
    if (room <= 0 || !s || !stub || s.refused === 0) {
      continue;
    }
    const r = await stub.returnRefused(Math.min(room, s.refused), s.remaining);
    if (r.returned > 0) {
      actions.push({ action: 'refused_returned', units: r.returned, stillRefused: r.refused, ...shardLabel(stubs, i) });
      room -= r.returned;
      remaining += r.returned;
      refused -= r.returned;
    }
  }
  return { ...total, remaining, refused };
}

/** Names the shard in what a sharded goods' run reports (nothing for a one-shard goods). */
function shardLabel(stubs: Stub[], shard: number): { shard?: number } {
  return stubs.length > 1 ? { shard } : {};
}

/** One stock shard's outbox and unsettled reservations: re-driven when stuck. */
async function redriveShard(
  env: Env,
  stubs: Stub[],
  i: number,
  snapshot: StockSnapshot,
  now: number,
  found: Discrepancy[],
  actions: Action[],
) {
  const stub = stubs[i];
  if (!stub) {
    return;
  }
  const label = shardLabel(stubs, i);
  if (snapshot.outboxPending > 0 && snapshot.oldestOutboxAt !== null && now - snapshot.oldestOutboxAt > STUCK_OUTBOX_MS) {
    found.push({ kind: 'outbox_stuck', rows: snapshot.outboxPending, oldestAgeMs: now - snapshot.oldestOutboxAt, ...label });
    const r = await stub.redriveOutbox();
    actions.push({ action: 'outbox_redriven', rows: r.before, stillPending: r.pending, ...label });
  }
  // Accepted, sent, and still not an order: the queue's retries (and maybe the dead letter) ran
  // out while Postgres was down. The object re-sends on its own backoff; this run answers
  // because Postgres does, so it sends them now (those not sent within the threshold).
  const unsettledAfter = unsettledAfterMs(env);
  if (snapshot.queued > 0 && snapshot.oldestQueuedAt !== null && now - snapshot.oldestQueuedAt > unsettledAfter) {
    found.push({ kind: 'reservations_unsettled', count: snapshot.queued, oldestAgeMs: now - snapshot.oldestQueuedAt, ...label });
    const r = await stub.redriveUnsettled(now - unsettledAfter);
    actions.push({ action: 'reservations_redriven', rows: r.rows, stillQueued: r.queued, ...label });
  }
}

/** One stock shard's part of the mirror: compared, rewritten when it differs. The mirror's total stock, when read. */
async function checkShardMirror(stubs: Stub[], i: number, now: number, found: Discrepancy[], actions: Action[], skipped: string[]) {
  const stub = stubs[i];
  if (!stub) {
    return null;
  }
  const label = shardLabel(stubs, i);
  const check = await stub.mirrorCheck(true);
  if (check.ok) {
    // Behind because writes failed (Redis was down) or were lost with a restarted object; a
    // live sale's changes still on their way are not a discrepancy.
    const behindFor = check.staleSince === null ? 0 : now - check.staleSince;
    if (check.flushed === 'rewrite' || (check.flushed === 'delta' && behindFor > STALE_MIRROR_MS)) {
      found.push({ kind: 'mirror_stale', behindMs: behindFor, ...label });
      actions.push({ action: 'mirror_rewritten', reason: 'stale', ...label });
    }
    found.push(...check.discrepancies.map((d) => ({ ...d, ...label })));
    if (check.repaired) {
      actions.push({ action: 'mirror_rewritten', reason: 'differed', ...label });
    }
    return check.view.stock;
  }
  if (check.reason === 'UNREACHABLE') {
    found.push({ kind: 'mirror_unreachable', staleSinceMs: check.staleSince === null ? null : now - check.staleSince, ...label });
  } else if (check.reason === 'BUSY') {
    skipped.push('mirror: the sale kept changing while Redis was read');
  }
  return null;
}

/** One goods: find, repair what is safe, report the rest. A sharded goods is checked shard by shard and compared in total. */
async function reconcileGoods(env: Env, db: Db, row: GoodsRow, now: number): Promise<GoodsReconciliation> {
  const stubs = allStockShards(env, row);
  const found: Discrepancy[] = [];
  const actions: Action[] = [];
  const skipped: string[] = [];

  const snapshots = () => shardSnapshots(env, row, SNAPSHOT_MS);
  let shards = await snapshots();
  if (!shards[0] && row.endAt.getTime() > now) {
    // Pre-warm should have made it; a goods about to sell must not wait for its first shopper.
    found.push({ kind: 'object_missing' });
    await initShards(env, row, toGoodsInit(row));
    shards = await snapshots();
    actions.push({ action: 'object_initialised' });
  }
  const snapshot = sumSnapshots(shards);

  for (const [i, s] of shards.entries()) {
    if (s) {
      await redriveShard(env, stubs, i, s, now, found, actions);
    }
  }

  const overdue = await countOverdueOrders(db, row.id, now);
  if (overdue > 0) {
    found.push({ kind: 'orders_overdue', orders: overdue });
    const closed = await closeOverdueOrders(env, db, now, { goodsId: row.id });
    actions.push({ action: 'overdue_closed', orders: closed });
  }

  let mirrorStock: number | null = null;
  for (const [i, s] of shards.entries()) {
    if (s) {
      mirrorStock = (await checkShardMirror(stubs, i, now, found, actions, skipped)) ?? mirrorStock;
    }
  }

  // Stock is compared only at rest: Postgres read on both sides of the objects' snapshots,
  // unchanged, with nothing queued in between. Otherwise orders in flight make any
  // difference meaningless.
  const before = await dbState(db, row.id);
  const afterShards = snapshot ? await snapshots() : [];
  let after = sumSnapshots(afterShards);
  const db2 = await dbState(db, row.id);
  const state = db2 ?? before ?? { stock: row.stock, live: 0 };
  const atRest =
    after !== undefined && after.queued === 0 && after.outboxPending === 0 && before?.stock === db2?.stock && before?.live === db2?.live;
  if (after && atRest) {
    after = await decideRefused(stubs, afterShards, after, state.stock, found, actions);
    // Refused units are neither for sale nor sold: Postgres never had them.
    if (after.remaining + after.refused + state.live !== row.totalStock) {
      found.push({
        kind: 'stock_invariant',
        doRemaining: after.remaining,
        refusedUnits: after.refused,
        liveOrders: state.live,
        totalStock: row.totalStock,
      });
    }
    if (state.stock !== after.remaining) {
      found.push({ kind: 'db_stock', dbStock: state.stock, doRemaining: after.remaining });
    }
  } else if (after) {
    skipped.push('stock: orders are still in flight');
  }

  let deadLetters = await countOpenDeadLetters(db, row.id);
  if (deadLetters > 0) {
    // An order message that died while Postgres was down, whose reservation the object's resend
    // has settled since: nothing is left for an operator to do.
    const closed = await closeSettledDeadLetters(db, row.id, now);
    if (closed > 0) {
      actions.push({ action: 'dead_letters_closed', messages: closed });
      deadLetters -= closed;
    }
  }
  if (deadLetters > 0) {
    found.push({ kind: 'dead_letters', messages: deadLetters });
  }

  return {
    goodsId: row.id,
    totalStock: row.totalStock,
    doRemaining: (after ?? snapshot)?.remaining ?? null,
    dbStock: state.stock,
    mirrorStock,
    liveOrders: state.live,
    consistent: found.length === 0,
    discrepancies: found,
    actions,
    skipped,
  };
}

/** One goods reconciled, its report row written and its counts made; a failure is its discrepancy. */
async function reconcileOne(env: Env, db: Db, row: GoodsRow, now: number): Promise<GoodsReconciliation> {
  let result: GoodsReconciliation;
  try {
    result = await reconcileGoods(env, db, row, now);
  } catch (error) {
    log.error('reconcile.goods_failed', { goodsId: row.id, error });
    result = {
      goodsId: row.id,
      totalStock: row.totalStock,
      doRemaining: null,
      dbStock: row.stock,
      mirrorStock: null,
      liveOrders: 0,
      consistent: false,
      discrepancies: [{ kind: 'reconcile_failed', message: error instanceof Error ? error.message.slice(0, 200) : String(error) }],
      actions: [],
      skipped: [],
    };
  }
  await insertReconciliationReport(db, {
    goodsId: result.goodsId,
    runAt: new Date(now),
    doRemaining: result.doRemaining,
    dbStock: result.dbStock,
    mirrorStock: result.mirrorStock,
    liveOrders: result.liveOrders,
    consistent: result.consistent,
    discrepancies: result.discrepancies,
    actions: result.actions,
  });
  for (const d of result.discrepancies) {
    count('seckill_reconcile_discrepancies_total', { goods_id: String(result.goodsId), kind: d.kind });
  }
  for (const a of result.actions) {
    count('seckill_reconcile_actions_total', { goods_id: String(result.goodsId), action: a.action });
  }
  return result;
}

/**
 * Runs reconciliation for every goods in scope (or one), writes a reconciliation_report row
 * per goods, counts what it found and did, and returns the report. One goods failing does
 * not stop the others: its failure is reported as a discrepancy.
 */
export async function reconcile(
  env: Env,
  db: Db,
  now: number,
  options: { trigger: ReconcileTrigger; goodsId?: number },
): Promise<ReconcileReport> {
  let rows = await listGoodsInScope(db, now);
  if (options.goodsId !== undefined) {
    const one = rows.find((r) => r.id === options.goodsId) ?? (await findGoods(db, options.goodsId));
    rows = one ? [one] : [];
  }
  const goods: GoodsReconciliation[] = new Array(rows.length);
  // Goods are independent (their own objects and rows): a few at a time, so a shop with
  // hundreds in scope is not checked one object round trip after another. The pool's
  // connections bound the Postgres side; the objects' calls overlap.
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < rows.length; i = next++) {
      goods[i] = await reconcileOne(env, db, rows[i] as GoodsRow, now);
    }
  };
  await Promise.all(Array.from({ length: Math.min(RECONCILE_CONCURRENCY, rows.length) }, worker));
  count('seckill_reconcile_runs_total', { trigger: options.trigger });
  const report: ReconcileReport = {
    runAt: new Date(now).toISOString(),
    trigger: options.trigger,
    goods,
    discrepancies: goods.reduce((n, g) => n + g.discrepancies.length, 0),
    actions: goods.reduce((n, g) => n + g.actions.length, 0),
  };
  if (report.discrepancies > 0) {
    log.warn('reconcile.discrepancies', {
      trigger: options.trigger,
      goods: goods.filter((g) => !g.consistent).map((g) => ({ goodsId: g.goodsId, kinds: g.discrepancies.map((d) => d.kind) })),
    });
  }
  return report;
}
