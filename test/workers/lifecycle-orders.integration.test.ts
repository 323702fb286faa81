import { createExecutionContext, createMessageBatch, getQueueResult } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { seckillOrder } from '../../db/schema';
import { closeOverdueOrders } from '../../workers/cron/overdue';
import { releaseOrRepair } from '../../workers/edge/release';
import { consumeTimeouts } from '../../workers/queue/timeouts';
import {
  bearer,
  buyOrder,
  call,
  createGoods,
  devToken,
  driveTimeouts,
  eventually,
  json,
  ORDER_POLL_MS,
  orderOf,
  paymentCallback,
  settled,
  sql,
  stockObject,
} from './helpers';

/** Later than any default 900 s payment window opened during the test run. */
const AFTER_DEADLINES = () => Date.now() + 3600_000;

/** Delivers one timeout-queue message as if the clock read `now`, noting each retry's delay (the harness reports none). */
async function deliverTimeout(id: string, body: unknown, now: number) {
  const batch = createMessageBatch('seckill-order-timeouts', [{ id, timestamp: new Date(), attempts: 1, body }]);
  const delays: (number | undefined)[] = [];
  for (const m of batch.messages) {
    const retry = m.retry.bind(m);
    m.retry = (options?: QueueRetryOptions) => {
      delays.push(options?.delaySeconds);
      retry(options);
    };
  }
  const ctx = createExecutionContext();
  await consumeTimeouts(batch, env, now);
  return { ...(await getQueueResult(batch, ctx)), delays };
}

function cancel(jwt: string, orderId: string) {
  return call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(jwt) });
}

async function payNow(orderId: string, jwt: string) {
  const res = await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(jwt), json: { outcome: 'hold' } });
  const started = await json<{ paymentId: string; amountCents: number }>(res);
  const cb = await paymentCallback({
    eventId: `evt_${orderId}_paid`,
    paymentId: started.paymentId,
    orderId,
    status: 'SUCCEEDED',
    amountCents: started.amountCents,
  });
  expect(cb.status).toBe(200);
}

describe('GET /api/orders/:orderId', () => {
  it("shows the owner the contract's order shape, and nobody else anything", async () => {
    const { goodsId } = await createGoods({ stock: 2, priceCents: 1234, payTimeoutSeconds: 600 });
    const { orderId, jwt, requestId } = await buyOrder('view-owner', goodsId);
    const res = await call(`/api/orders/${orderId}`, { headers: bearer(jwt) });
    expect(res.status).toBe(200);
    const body = await json<Record<string, unknown>>(res);
    expect(body).toMatchObject({ orderId, goodsId, userId: 'view-owner', status: 'PENDING_PAYMENT', priceCents: 1234 });
    expect(String(body.orderNo)).toMatch(/^SK\d{8}-/);
    const deadline = Date.parse(String(body.payDeadline)) - Date.parse(String(body.createdAt));
    expect(deadline).toBeGreaterThan(590_000);
    expect(deadline).toBeLessThanOrEqual(601_000);
    expect(body.paidAt).toBeUndefined();
    expect(requestId.startsWith(`${goodsId}.`)).toBe(true);

    const other = await devToken('view-other');
    const foreign = await call(`/api/orders/${orderId}`, { headers: bearer(other) });
    expect(foreign.status).toBe(404);
    expect(await json(foreign)).toMatchObject({ error: { code: 'NOT_FOUND' } });
    expect((await call(`/api/orders/${goodsId}-424242`, { headers: bearer(jwt) })).status).toBe(404);
    expect((await call(`/api/orders/${orderId}`)).status).toBe(401);
    for (const bad of ['abc', '0-1', `${goodsId}-`, "1-1'--", 'x'.repeat(300)]) {
      const r = await call(`/api/orders/${encodeURIComponent(bad)}`, { headers: bearer(jwt) });
      expect(r.status).toBe(400);
      expect(await json(r)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    }
  });
});

describe('cancelling an order', () => {
  it('closes an unpaid order, returns its unit, and lets the shopper buy again', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const { orderId, jwt } = await buyOrder('cancel-me', goodsId);
    expect((await settled(goodsId)).doRemaining).toBe(0);

    const res = await cancel(jwt, orderId);
    expect(res.status).toBe(200);
    const body = await json<{ status: string; closedAt?: string }>(res);
    expect(body.status).toBe('CANCELLED');
    expect(body.closedAt).toBeDefined();
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 1, dbStock: 1, orders: { CANCELLED: 1, PENDING_PAYMENT: 0 } });

    // Cancelling twice, or a timeout after the cancel, gives nothing back twice.
    const again = await cancel(jwt, orderId);
    expect(again.status).toBe(409);
    expect(await json(again)).toMatchObject({ error: { code: 'CONFLICT' } });
    const timeout = await driveTimeouts([{ orderId, goodsId }], AFTER_DEADLINES());
    expect(timeout.explicitAcks).toHaveLength(1);
    expect((await settled(goodsId)).doRemaining).toBe(1);

    // The same shopper may buy the returned unit.
    const second = await buyOrder('cancel-me', goodsId);
    expect(second.orderId).not.toBe(orderId);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 1, CANCELLED: 1 } });
  });

  it("refuses someone else's order, a paid order and a closed one", async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const mine = await buyOrder('cancel-owner', goodsId);
    const thief = await devToken('cancel-thief');
    const foreign = await cancel(thief, mine.orderId);
    expect(foreign.status).toBe(404);
    expect((await orderOf(mine.jwt, mine.orderId)).status).toBe('PENDING_PAYMENT');

    const paid = await buyOrder('cancel-paid', goodsId);
    await payNow(paid.orderId, paid.jwt);
    const refused = await cancel(paid.jwt, paid.orderId);
    expect(refused.status).toBe(409);
    expect((await orderOf(paid.jwt, paid.orderId)).status).toBe('PAID');

    await driveTimeouts([{ orderId: mine.orderId, goodsId }], AFTER_DEADLINES());
    expect((await cancel(mine.jwt, mine.orderId)).status).toBe(409);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, orders: { PAID: 1, CLOSED_TIMEOUT: 1 } });
  });

  it('repeats the release from the timeout queue when the goods object cannot be reached', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('cancel-unreachable', goodsId);
    const order = await sql(async (db) => (await db.select().from(seckillOrder).where(eq(seckillOrder.id, orderId)))[0]);
    if (!order) {
      throw new Error('order missing');
    }
    // Postgres takes the cancel; the object is down at that moment.
    await sql((db) => db.update(seckillOrder).set({ status: 2, closedAt: new Date() }).where(eq(seckillOrder.id, orderId)));
    const sent: { body: unknown; options?: QueueSendOptions }[] = [];
    const downEnv = {
      ...env,
      GOODS_STOCK: {
        idFromName: (name: string) => env.GOODS_STOCK.idFromName(name),
        get: () => ({ release: () => Promise.reject(new Error('object unreachable')) }),
      },
      TIMEOUT_QUEUE: {
        send: async (body: unknown, options?: QueueSendOptions) => {
          sent.push({ body, options });
        },
      },
    } as unknown as Env;
    expect(await releaseOrRepair(downEnv, { id: goodsId, locationHint: null }, { ...order, status: 2 })).toBe(false);
    expect(sent).toEqual([
      { body: { v: 1, kind: 'pay-timeout', orderId, goodsId }, options: expect.objectContaining({ contentType: 'json' }) },
    ]);
    expect((await stockObject(goodsId).snapshot())?.remaining).toBe(1);

    // The repair message reaches the real consumer, which releases the unit (at most once).
    const batch = createMessageBatch('seckill-order-timeouts', [
      { id: 'repair-1', timestamp: new Date(), attempts: 1, body: sent[0]?.body },
      { id: 'repair-2', timestamp: new Date(), attempts: 1, body: sent[0]?.body },
    ]);
    const ctx = createExecutionContext();
    await consumeTimeouts(batch, env);
    expect((await getQueueResult(batch, ctx)).explicitAcks).toEqual(['repair-1', 'repair-2']);
    expect((await stockObject(goodsId).snapshot())?.remaining).toBe(2);
    expect((await orderOf(jwt, orderId)).status).toBe('CANCELLED');
  });
});

describe('payment timeouts', () => {
  it('closes an unpaid order at its deadline, returns the unit, and is idempotent', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('timeout-me', goodsId);
    const deadline = Date.parse((await orderOf(jwt, orderId)).payDeadline);

    // Delivered early (clock skew, a re-driven message): it waits for the rest of the window.
    const early = await deliverTimeout('early-1', { v: 1, kind: 'pay-timeout', orderId, goodsId }, deadline - 30_000);
    expect(early.retryMessages).toHaveLength(1);
    expect(early.delays).toEqual([30]);
    expect((await orderOf(jwt, orderId)).status).toBe('PENDING_PAYMENT');

    const due = await driveTimeouts([{ orderId, goodsId }], deadline);
    expect(due.explicitAcks).toHaveLength(1);
    expect((await orderOf(jwt, orderId)).status).toBe('CLOSED_TIMEOUT');
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { CLOSED_TIMEOUT: 1, PENDING_PAYMENT: 0 } });

    // Redelivered twice in one batch and once more: nothing moves again.
    await driveTimeouts(
      [
        { orderId, goodsId },
        { orderId, goodsId },
      ],
      deadline + 1000,
    );
    await driveTimeouts([{ orderId, goodsId }], deadline + 2000);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { CLOSED_TIMEOUT: 1 } });

    // The user may try again.
    const again = await buyOrder('timeout-me', goodsId);
    expect((await orderOf(again.jwt, again.orderId)).status).toBe('PENDING_PAYMENT');
  });

  it('leaves a paid order alone', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('timeout-paid', goodsId);
    await payNow(orderId, jwt);
    const result = await driveTimeouts([{ orderId, goodsId }], AFTER_DEADLINES());
    expect(result.explicitAcks).toHaveLength(1);
    expect((await orderOf(jwt, orderId)).status).toBe('PAID');
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 1, dbStock: 1, orders: { PAID: 1, CLOSED_TIMEOUT: 0 } });
  });

  it('sends malformed messages toward the dead-letter queue and looks again for an order not written yet', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const batch = createMessageBatch('seckill-order-timeouts', [
      { id: 'bad-1', timestamp: new Date(), attempts: 1, body: { v: 1, kind: 'pay-timeout', orderId: 'nope' } },
      { id: 'bad-2', timestamp: new Date(), attempts: 1, body: 'garbage' },
    ]);
    const ctx = createExecutionContext();
    await consumeTimeouts(batch, env);
    expect((await getQueueResult(batch, ctx)).retryMessages.map((m: { msgId: string }) => m.msgId).sort()).toEqual(['bad-1', 'bad-2']);
    const missing = await driveTimeouts([{ orderId: `${goodsId}-987654`, goodsId }], AFTER_DEADLINES());
    expect(missing.retryMessages).toHaveLength(1);
    expect(missing.explicitAcks).toHaveLength(0);
  });

  it('takes a pack: acks it once every order is done, retries it whole for the first one not due, and leaves a paid one alone', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const unpaid = await buyOrder('timeout-pack-unpaid', goodsId);
    const paid = await buyOrder('timeout-pack-paid', goodsId);
    await payNow(paid.orderId, paid.jwt);
    const deadline = Date.parse((await orderOf(unpaid.jwt, unpaid.orderId)).payDeadline);
    const pack = { v: 1, kind: 'pay-timeout-pack', goodsId, orderIds: [unpaid.orderId, paid.orderId] };
    const deliverPack = (now: number) => deliverTimeout(`pack-${now}`, pack, now);

    const early = await deliverPack(deadline - 20_000);
    expect(early.retryMessages).toHaveLength(1);
    expect(early.delays).toEqual([20]);
    expect((await orderOf(unpaid.jwt, unpaid.orderId)).status).toBe('PENDING_PAYMENT');

    const due = await deliverPack(deadline + 1000);
    expect(due.explicitAcks).toHaveLength(1);
    expect((await orderOf(unpaid.jwt, unpaid.orderId)).status).toBe('CLOSED_TIMEOUT');
    expect((await orderOf(paid.jwt, paid.orderId)).status).toBe('PAID');
    // Delivered again: nothing moves.
    expect((await deliverPack(deadline + 2000)).explicitAcks).toHaveLength(1);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { CLOSED_TIMEOUT: 1, PAID: 1 } });

    // A pack that mixes in an id that is not an order's is malformed as a whole.
    const bad = createMessageBatch('seckill-order-timeouts', [
      { id: 'pack-bad', timestamp: new Date(), attempts: 1, body: { ...pack, orderIds: [unpaid.orderId, 'nope'] } },
    ]);
    const ctx = createExecutionContext();
    await consumeTimeouts(bad, env);
    expect((await getQueueResult(bad, ctx)).retryMessages).toHaveLength(1);
  });

  it('closes an order through the real delayed queue when its window is short', async () => {
    const { goodsId } = await createGoods({ stock: 1, payTimeoutSeconds: 1 });
    const { orderId, jwt } = await buyOrder('timeout-real', goodsId);
    // The timeout message was sent with delaySeconds = 1 when the order was written.
    const closed = await eventually(
      async () => {
        const o = await orderOf(jwt, orderId);
        return o.status === 'CLOSED_TIMEOUT' ? o : undefined;
      },
      20_000,
      ORDER_POLL_MS,
    );
    expect(closed.closedAt).toBeDefined();
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 1, dbStock: 1, orders: { CLOSED_TIMEOUT: 1 } });
  });

  it('is backed by the cron, which closes overdue orders whose message never came', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const a = await buyOrder('cron-a', goodsId);
    const b = await buyOrder('cron-b', goodsId);
    await payNow(b.orderId, b.jwt);
    const now = AFTER_DEADLINES();
    const closed = await sql((db) => closeOverdueOrders(env, db, now, { goodsId }));
    expect(closed).toBe(1);
    expect((await orderOf(a.jwt, a.orderId)).status).toBe('CLOSED_TIMEOUT');
    expect((await orderOf(b.jwt, b.orderId)).status).toBe('PAID');
    expect(await sql((db) => closeOverdueOrders(env, db, now, { goodsId }))).toBe(0);
    // The late timeout message finds the order closed and gives nothing back twice.
    await driveTimeouts([{ orderId: a.orderId, goodsId }], now);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PAID: 1, CLOSED_TIMEOUT: 1 } });
  });

  it('lets the cron wait out the grace period while the timeout message may still come', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const { orderId, jwt } = await buyOrder('cron-grace', goodsId);
    const deadline = Date.parse((await orderOf(jwt, orderId)).payDeadline);
    expect(await sql((db) => closeOverdueOrders(env, db, deadline + 1000, { goodsId }))).toBe(0);
    expect((await orderOf(jwt, orderId)).status).toBe('PENDING_PAYMENT');
    expect(await sql((db) => closeOverdueOrders(env, db, deadline + 61_000, { goodsId }))).toBe(1);
  });
});
