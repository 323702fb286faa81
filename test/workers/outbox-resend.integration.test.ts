import {
  createExecutionContext,
  createMessageBatch,
  createScheduledController,
  getQueueResult,
  runInDurableObject,
  waitOnExecutionContext,
} from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { desc, eq } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { reconciliationReport, seckillOrder } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import worker from '../../workers/index';
import type { OrderMessage, OrderPack, ReserveItem } from '../../workers/kernel/contract';
import { consumeDeadLetters } from '../../workers/queue/dead-letters';
import { createGoods, eventually, metric, reconcileNow, scrape, settled, spreadGoodsIds, sql, stats, stockObject } from './helpers';

// The goods' object stays responsible for every accepted reservation until the order consumer
// settles it: whatever the queue lost (retries used up, the dead letter dropped while Postgres
// was down), the object sends the reservation again, and the reconciliation cron does too.

/** A short schedule, as a fault drill runs it: resend after 1 s, then every 2 s. */
const SHORT = { OUTBOX_RESEND_SECONDS: '1', OUTBOX_RESEND_CAP_SECONDS: '2' };

/** The Worker with its Postgres unreachable (a refused port behind the bridge's allow-list). */
const postgresDown = { ...env, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/nowhere' } as Env;

let seq = 0;
function item(goodsId: number, userId: string): ReserveItem {
  seq++;
  return {
    requestId: `${goodsId}.${String(seq).padStart(22, 'o')}`,
    userId,
    tokenId: `resend-token-${seq}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: false,
  };
}

/**
 * A queue that takes every message and delivers none (what the consumer never saw, or gave up
 * on), noting when: `sent` holds each order of the packs as it went, `packs` the messages.
 */
function lossyQueue() {
  const sent: { body: OrderMessage; at: number }[] = [];
  const packs: OrderPack[] = [];
  const queue = {
    sendBatch: async (messages: Iterable<MessageSendRequest<OrderPack>>) => {
      for (const m of messages) {
        packs.push(m.body);
        for (const order of m.body.orders) {
          sent.push({ body: order, at: Date.now() });
        }
      }
    },
  } as unknown as Queue;
  return { sent, packs, queue };
}

/** Gives the object other bindings (it reads this.env when it sends and when it reads its schedule). */
function rebind(goodsId: number, overrides: Partial<Record<keyof Env, unknown>>) {
  return runInDurableObject(stockObject(goodsId), (instance: GoodsStock) => {
    (instance as unknown as { env: Env }).env = { ...env, ...overrides } as Env;
  });
}

function batchOf(queue: string, bodies: unknown[], attempts: number) {
  return createMessageBatch(
    queue,
    bodies.map((body, i) => ({ id: `resend-${queue}-${Date.now()}-${i}-${Math.random()}`, timestamp: new Date(), attempts, body })),
  );
}

/** The order queue's delivery of `bodies` at retry number `attempts`. */
async function deliverOrders(bodies: unknown[], attempts: number, workerEnv: Env) {
  const batch = batchOf('seckill-orders', bodies, attempts);
  const ctx = createExecutionContext();
  await worker.queue(batch, workerEnv, ctx);
  return getQueueResult(batch, ctx);
}

async function deliverDeadLetters(bodies: unknown[], attempts: number, workerEnv: Env) {
  const batch = batchOf('seckill-dlq', bodies, attempts);
  // The harness records that the batch was retried, not its delay: note it on the way.
  let retryDelay: number | undefined;
  const retryAll = batch.retryAll.bind(batch);
  batch.retryAll = (options) => {
    retryDelay = options?.delaySeconds;
    retryAll(options);
  };
  const ctx = createExecutionContext();
  await consumeDeadLetters(batch, workerEnv);
  return { ...(await getQueueResult(batch, ctx)), retryDelay };
}

function ordersOf(goodsId: number) {
  return sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)));
}

function outboxRows(goodsId: number) {
  return runInDurableObject(stockObject(goodsId), (_i, state) => state.storage.sql.exec('SELECT seq FROM outbox').toArray().length);
}

/** Fires the cron as if the clock read `at`. */
async function runCron(at = Date.now()): Promise<void> {
  const ctx = createExecutionContext();
  worker.scheduled(createScheduledController({ cron: '* * * * *', scheduledTime: at }), env, ctx);
  await waitOnExecutionContext(ctx);
}

describe('an accepted reservation outlives its lost messages', () => {
  beforeAll(spreadGoodsIds);

  it('is never dropped by the dead-letter consumer while Postgres is down: it waits longer each time, up to the cap', async () => {
    const body = { v: 1, kind: 'reserve', requestId: 'x' };
    const waits: (number | undefined)[] = [];
    for (const attempts of [1, 2, 3, 4, 5, 99]) {
      const r = await deliverDeadLetters([body], attempts, postgresDown);
      expect(r.retryBatch.retry).toBe(true);
      waits.push(r.retryDelay);
    }
    expect(waits).toEqual([30, 60, 120, 240, 300, 300]);
  });

  it('becomes an order once Postgres is back, after its retries ran out and its dead letter was dropped', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const stub = stockObject(goodsId);
    const lost = lossyQueue();
    await rebind(goodsId, { ORDER_QUEUE: lost.queue, ...SHORT });
    const outcomes = await stub.reserveMany(
      goodsId,
      ['lost-a', 'lost-b', 'lost-c'].map((u) => item(goodsId, u)),
    );
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const messages = await eventually(async () => (lost.sent.length >= 3 ? lost.sent.slice(0, 3).map((s) => s.body) : undefined));

    // Postgres is down: the order queue's last retry fails, then the dead-letter consumer's,
    // after which the queue drops the messages.
    // The object sent them as packs (one, as they were accepted in one call).
    const packs = lost.packs.slice();
    expect(packs.map((p) => p.orders.length)).toEqual([3]);
    const last = await deliverOrders(packs, 9, postgresDown);
    expect(last.retryMessages).toHaveLength(1);
    const dead = await deliverDeadLetters(packs, 100, postgresDown);
    expect(dead.retryBatch.retry).toBe(true);
    expect(await ordersOf(goodsId)).toHaveLength(0);
    expect(await stub.snapshot()).toMatchObject({ queued: 3, outboxPending: 0 });

    // Postgres is back and the queue delivers again: the object's next resend lands.
    await rebind(goodsId, { ORDER_QUEUE: env.ORDER_QUEUE, ...SHORT });
    const s = await settled(goodsId, 20_000);
    expect(s).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 3 }, queued: 0 });
    const results = await Promise.all(messages.map((m) => stub.result(m.requestId)));
    expect(results.map((r) => r?.status)).toEqual(['SUCCESS', 'SUCCESS', 'SUCCESS']);
    // Settled: nothing is left to send again.
    expect(await outboxRows(goodsId)).toBe(0);
  });

  it('sends an unsettled reservation again after OUTBOX_RESEND_SECONDS, doubling up to the cap, and stops once it settles', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const stub = stockObject(goodsId);
    const lost = lossyQueue();
    await rebind(goodsId, { ORDER_QUEUE: lost.queue, ...SHORT });
    const [o] = await stub.reserveMany(goodsId, [item(goodsId, 'again')]);
    expect(o?.ok).toBe(true);
    const sends = await eventually(async () => (lost.sent.length >= 4 ? lost.sent.slice(0, 4) : undefined), 15_000);
    const gaps = sends.slice(1).map((s, i) => s.at - (sends[i]?.at ?? 0));
    // 1 s, then 2 s (the cap), then 2 s; an alarm may run a little late, never early.
    expect(gaps[0]).toBeGreaterThanOrEqual(900);
    expect(gaps[0]).toBeLessThan(1900);
    expect(gaps[1]).toBeGreaterThanOrEqual(1900);
    expect(gaps[2]).toBeGreaterThanOrEqual(1900);
    expect(new Set(sends.map((s) => s.body.orderId)).size).toBe(1);
    await eventually(async () => (await scrapeResends(goodsId)) >= 3);

    if (!o?.ok) {
      throw new Error('not accepted');
    }
    expect(await stub.settle([{ requestId: o.requestId, ok: true, orderId: o.orderId }])).toMatchObject({ confirmed: 1 });
    const after = lost.sent.length;
    await new Promise((r) => setTimeout(r, 2_500));
    expect(lost.sent.length).toBe(after);
    expect(await outboxRows(goodsId)).toBe(0);
  });

  it('is sent again by the reconciliation cron once it is older than the first resend, and the dead letter it left is closed', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    const stub = stockObject(goodsId);
    const lost = lossyQueue();
    // The production schedule: the object would wait minutes before its next resend.
    await rebind(goodsId, { ORDER_QUEUE: lost.queue });
    const outcomes = await stub.reserveMany(goodsId, [item(goodsId, 'cron-a'), item(goodsId, 'cron-b')]);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const messages = await eventually(async () => (lost.sent.length >= 2 ? lost.sent.map((s) => s.body) : undefined));
    // One of them died in the queue and its dead letter was stored once Postgres answered.
    const [first] = messages;
    expect((await deliverDeadLetters([first], 9, env)).ackAll).toBe(true);
    expect((await stats(goodsId)).deadLetters).toBe(1);
    // The queue delivers again. The cron runs ten minutes on, the object's next resend not due yet.
    await rebind(goodsId, {});
    await runCron(Date.now() + 10 * 60_000);
    const [report] = await sql((db) =>
      db
        .select()
        .from(reconciliationReport)
        .where(eq(reconciliationReport.goodsId, goodsId))
        .orderBy(desc(reconciliationReport.id))
        .limit(1),
    );
    const found = (report?.discrepancies ?? []) as ({ kind: string } & Record<string, number>)[];
    const unsettled = found.find((d) => d.kind === 'reservations_unsettled');
    expect(unsettled).toMatchObject({ count: 2 });
    expect(unsettled?.oldestAgeMs).toBeGreaterThanOrEqual(10 * 60_000);
    expect(report?.actions).toContainEqual({ action: 'reservations_redriven', rows: 2, stillQueued: 2 });

    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 2 } });
    // The dead letter's reservation is an order now: the next run closes it.
    const [g] = (await reconcileNow(goodsId)).goods;
    expect(g?.actions).toContainEqual({ action: 'dead_letters_closed', messages: 1 });
    expect(g?.discrepancies).toEqual([]);
    expect((await stats(goodsId)).deadLetters).toBe(0);
  });
});

/** seckill_outbox_resends_total of a goods, as the metrics endpoint shows it. */
async function scrapeResends(goodsId: number): Promise<number> {
  return metric(await scrape(), 'seckill_outbox_resends_total', { goods_id: String(goodsId) });
}
