import { createExecutionContext, createScheduledController, runInDurableObject, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { desc, eq } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { reconciliationReport, seckillGoods, seckillOrder } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import worker from '../../workers/index';
import {
  ADMIN,
  buy,
  buyOrder,
  call,
  createGoods,
  eventually,
  json,
  metric,
  mirrorRedis,
  reconcileNow,
  scrape,
  settled,
  spreadGoodsIds,
  sql,
  stats,
  stockObject,
} from './helpers';

const redis = mirrorRedis();
if (!redis) {
  console.warn('reconcile-repair.integration: mirror cases skipped, set TEST_REDIS_URL=redis://127.0.0.1:6379 to run them');
}

const failingQueue = {
  send: () => Promise.reject(new Error('queue unavailable')),
  sendBatch: () => Promise.reject(new Error('queue unavailable')),
  metrics: () => Promise.reject(new Error('queue unavailable')),
} as unknown as Queue;

/** Points the object's queue binding elsewhere (the object reads this.env when it sends). */
function swapQueue(instance: GoodsStock, queue: Queue): void {
  (instance as unknown as { env: Env }).env = { ...env, ORDER_QUEUE: queue };
}

/**
 * Leaves `units` reservations stuck in the goods' outbox: the queue refuses them, and they are
 * made to look minutes old with their next retry far away (many failed attempts behind them).
 */
async function stuckOutbox(goodsId: number, units: number): Promise<void> {
  const stub = stockObject(goodsId);
  await runInDurableObject(stub, (instance: GoodsStock) => swapQueue(instance, failingQueue));
  for (let i = 0; i < units; i++) {
    expect((await buy(`stuck-${goodsId}-${i}`, goodsId)).status).toBe(202);
  }
  await eventually(async () => ((await stub.snapshot())?.outboxPending === units ? true : undefined));
  await runInDurableObject(stub, (instance: GoodsStock, state) => {
    state.storage.sql.exec('UPDATE outbox SET created_at = created_at - 120000, next_at = ?', Date.now() + 3600_000);
    swapQueue(instance, env.ORDER_QUEUE);
  });
}

/** The per-goods reconciliation counters, once the scrape shows them. */
function countedFor(goodsId: number, kind: string, expected: number) {
  return eventually(async () => {
    const m = await scrape();
    return metric(m, 'seckill_reconcile_discrepancies_total', { goods_id: String(goodsId), kind }) === expected ? m : undefined;
  });
}

async function runCron(): Promise<void> {
  const ctx = createExecutionContext();
  worker.scheduled(createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() }), env, ctx);
  await waitOnExecutionContext(ctx);
}

async function lastReport(goodsId: number) {
  const [row] = await sql((db) =>
    db.select().from(reconciliationReport).where(eq(reconciliationReport.goodsId, goodsId)).orderBy(desc(reconciliationReport.id)).limit(1),
  );
  return row;
}

describe('POST /admin/reconcile', () => {
  beforeAll(spreadGoodsIds);

  it('needs the admin token and a valid goods id', async () => {
    expect((await call('/admin/reconcile', { method: 'POST' })).status).toBe(401);
    const bad = await call('/admin/reconcile?goodsId=abc', { method: 'POST', headers: ADMIN });
    expect(bad.status).toBe(400);
    expect(await json(bad)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    expect((await call('/admin/reconcile?goodsId=1&x=1', { method: 'POST', headers: ADMIN })).status).toBe(400);
    const missing = await call('/admin/reconcile?goodsId=999999999999', { method: 'POST', headers: ADMIN });
    expect(missing.status).toBe(404);
    expect(await json(missing)).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('finds nothing on a healthy goods and writes a consistent report row', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    await buyOrder('rc-ok', goodsId);
    await settled(goodsId);
    const report = await reconcileNow(goodsId);
    expect(report.trigger).toBe('admin');
    const [g] = report.goods;
    expect(g).toMatchObject({ goodsId, doRemaining: 2, dbStock: 2, liveOrders: 1, consistent: true, discrepancies: [], actions: [] });
    if (redis) {
      expect(g?.mirrorStock).toBe(2);
    }
    const row = await lastReport(goodsId);
    expect(row).toMatchObject({ doRemaining: 2, dbStock: 2, liveOrders: 1, consistent: true, discrepancies: [], actions: [] });
  });

  it('re-drives a stuck outbox, counts it, and the orders land', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    await stuckOutbox(goodsId, 2);
    const report = await reconcileNow(goodsId);
    const [g] = report.goods;
    expect(g?.discrepancies).toContainEqual(expect.objectContaining({ kind: 'outbox_stuck', rows: 2 }));
    expect(g?.actions).toContainEqual({ action: 'outbox_redriven', rows: 2, stillPending: 0 });
    expect(g?.consistent).toBe(false);
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 3, dbStock: 3, orders: { PENDING_PAYMENT: 2 }, outboxPending: 0 });
    const m = await countedFor(goodsId, 'outbox_stuck', 1);
    expect(metric(m, 'seckill_reconcile_actions_total', { goods_id: String(goodsId), action: 'outbox_redriven' })).toBe(1);
  });

  it('closes an unpaid order whose timeout never came, returning its unit', async () => {
    const { goodsId } = await createGoods({ stock: 2, payTimeoutSeconds: 900 });
    const { orderId } = await buyOrder('rc-late', goodsId);
    await settled(goodsId);
    // The delayed timeout message is 15 minutes away; pretend the deadline passed long ago.
    await sql((db) =>
      db
        .update(seckillOrder)
        .set({ payDeadline: new Date(Date.now() - 10 * 60_000) })
        .where(eq(seckillOrder.id, orderId)),
    );
    const [g] = (await reconcileNow(goodsId)).goods;
    expect(g?.discrepancies).toContainEqual({ kind: 'orders_overdue', orders: 1 });
    expect(g?.actions).toContainEqual({ action: 'overdue_closed', orders: 1 });
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 0, CLOSED_TIMEOUT: 1 } });
  });

  it('reports a Postgres stock that disagrees with the object, and does not touch it', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    await buyOrder('rc-db', goodsId);
    await settled(goodsId);
    await sql((db) => db.update(seckillGoods).set({ stock: 1 }).where(eq(seckillGoods.id, goodsId)));
    const [g] = (await reconcileNow(goodsId)).goods;
    expect(g?.discrepancies).toEqual([{ kind: 'db_stock', dbStock: 1, doRemaining: 2 }]);
    expect(g?.actions).toEqual([]);
    expect((await stats(goodsId)).dbStock).toBe(1);
    const row = await lastReport(goodsId);
    expect(row).toMatchObject({ consistent: false, dbStock: 1, doRemaining: 2 });
    await countedFor(goodsId, 'db_stock', 1);

    await sql((db) => db.update(seckillGoods).set({ stock: 2 }).where(eq(seckillGoods.id, goodsId)));
    expect((await reconcileNow(goodsId)).goods[0]?.consistent).toBe(true);
  });

  it('leaves stock alone while orders are still in flight', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    await stuckOutbox(goodsId, 1);
    // Not stuck long enough to re-drive: the reservation is simply on its way.
    await runInDurableObject(stockObject(goodsId), (_i, state) => {
      state.storage.sql.exec('UPDATE outbox SET created_at = ?', Date.now());
    });
    const [g] = (await reconcileNow(goodsId)).goods;
    expect(g?.discrepancies).toEqual([]);
    expect(g?.skipped).toContain('stock: orders are still in flight');
    await runInDurableObject(stockObject(goodsId), (_i, state) => {
      state.storage.sql.exec('UPDATE outbox SET next_at = 0');
    });
    await stockObject(goodsId).redriveOutbox();
    await settled(goodsId);
  });

  describe.skipIf(!redis)('with the Redis mirror', () => {
    it('finds a corrupted mirror, rewrites it from the object, and counts it', async () => {
      const { goodsId } = await createGoods({ stock: 4 });
      await buyOrder('rc-mirror', goodsId);
      await settled(goodsId);
      await redis?.set(`seckill:stock:${goodsId}`, '99');
      await redis?.sadd(`seckill:users:${goodsId}`, 'ghost');
      await redis?.hset(`seckill:goods:${goodsId}`, { paused: '1' });

      const report = await reconcileNow(goodsId);
      const [g] = report.goods;
      expect(g?.mirrorStock).toBe(99);
      expect(g?.discrepancies).toEqual(
        expect.arrayContaining([
          { kind: 'mirror_stock', expected: 3, found: 99 },
          { kind: 'mirror_users', expected: 1, found: 2 },
          { kind: 'mirror_goods', field: 'paused', expected: '0', found: '1' },
        ]),
      );
      expect(g?.actions).toEqual([{ action: 'mirror_rewritten', reason: 'differed' }]);

      expect(await redis?.get(`seckill:stock:${goodsId}`)).toBe('3');
      expect(await redis?.smembers(`seckill:users:${goodsId}`)).toEqual(['rc-mirror']);
      expect(await redis?.hget(`seckill:goods:${goodsId}`, 'paused')).toBe('0');
      expect((await stats(goodsId)).consistent).toBe(true);

      const m = await countedFor(goodsId, 'mirror_stock', 1);
      expect(metric(m, 'seckill_reconcile_discrepancies_total', { goods_id: String(goodsId), kind: 'mirror_users' })).toBe(1);
      expect(metric(m, 'seckill_reconcile_discrepancies_total', { goods_id: String(goodsId), kind: 'mirror_goods' })).toBe(1);
      expect(metric(m, 'seckill_reconcile_actions_total', { goods_id: String(goodsId), action: 'mirror_rewritten' })).toBe(1);
      expect((await lastReport(goodsId))?.consistent).toBe(false);

      // Repaired: the next run finds nothing.
      expect((await reconcileNow(goodsId)).goods[0]).toMatchObject({ consistent: true, mirrorStock: 3 });
    });
  });
});

describe('the reconciliation cron', () => {
  beforeAll(spreadGoodsIds);

  it('finds and repairs a stuck outbox and, with Redis, a corrupted mirror, and counts both', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    await stuckOutbox(goodsId, 1);
    if (redis) {
      await eventually(async () => (await redis.get(`seckill:stock:${goodsId}`)) === '3');
      await redis.set(`seckill:stock:${goodsId}`, '0');
    }
    await runCron();

    const row = await lastReport(goodsId);
    const kinds = ((row?.discrepancies ?? []) as { kind: string }[]).map((d) => d.kind);
    expect(kinds).toContain('outbox_stuck');
    expect(((row?.actions ?? []) as { action: string }[]).map((a) => a.action)).toContain('outbox_redriven');
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 3, dbStock: 3, orders: { PENDING_PAYMENT: 1 } });
    await countedFor(goodsId, 'outbox_stuck', 1);
    if (redis) {
      expect(kinds).toContain('mirror_stock');
      expect(await redis.get(`seckill:stock:${goodsId}`)).toBe('3');
      await countedFor(goodsId, 'mirror_stock', 1);
    }
  });
});
