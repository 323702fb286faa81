// The webhooks' outbox and admin API inside workerd: every order change writes its event in
// its own transaction (and a change that rolls back writes none), the endpoint's settings are
// validated, the delivery log and stats count the events, a delivery gives up after its window
// and a redelivery keeps its id. Real HTTP deliveries are in test/node/webhooks.e2e.test.ts.
import { createExecutionContext, createMessageBatch, getQueueResult } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq, sql as raw } from 'drizzle-orm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { closePendingOrder } from '../../db/lifecycle';
import { writeOrders } from '../../db/orders';
import { seckillGoods, webhookDelivery } from '../../db/schema';
import { ORDER_STATUS } from '../../workers/kernel/order-status';
import { WEBHOOK_GIVE_UP_MS, webhookEventId } from '../../workers/kernel/webhooks';
import { consumeWebhooks } from '../../workers/queue/webhooks';
import { ADMIN, bearer, buyOrder, call, createGoods, json, paymentCallback, sql, stats } from './helpers';

// Nothing listens there: every attempt fails at once, and the row stays in the outbox.
const DEAD_URL = 'http://127.0.0.1:1/hooks';
const ALL = ['order.created', 'order.paid', 'order.closed', 'order.refunded'];

function putHooks(body: unknown, headers: Record<string, string> = ADMIN) {
  return call('/admin/webhooks', { method: 'PUT', headers, json: body });
}

function deliveriesOf(orderId: string) {
  return sql((db) => db.select().from(webhookDelivery).where(eq(webhookDelivery.orderId, orderId)));
}

async function errorOf(res: Response) {
  return { status: res.status, ...(await json<{ error: { code: string; message: string } }>(res)).error };
}

/** Runs the webhook consumer on one delivery as if the clock read `now`. */
async function attemptAt(deliveryId: string, now: number) {
  const batch = createMessageBatch('seckill-webhooks', [
    { id: `hook-${deliveryId}-${now}`, timestamp: new Date(), attempts: 1, body: { v: 1, kind: 'webhook', deliveryId } },
  ]);
  await consumeWebhooks(batch, env, now);
  return getQueueResult(batch, createExecutionContext());
}

// Every test starts with every event on (a test that changes them puts them back).
beforeEach(async () => {
  expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: ALL })).status).toBe(200);
});

// Other test files share this database: leave webhooks off behind us.
afterAll(async () => {
  expect((await call('/admin/webhooks', { method: 'DELETE', headers: ADMIN })).status).toBe(200);
});

describe('PUT /admin/webhooks', () => {
  it.each([
    ['a relative URL', { url: '/hooks', secret: 'a-test-secret-0123456789', events: ALL }, /absolute URL/],
    ['an ftp URL', { url: 'ftp://shop.test/hooks', secret: 'a-test-secret-0123456789', events: ALL }, /https/],
    ['credentials in the URL', { url: 'https://me:pw@shop.test/hooks', secret: 'a-test-secret-0123456789', events: ALL }, /credentials/],
    ['a short secret', { url: 'https://shop.test/hooks', secret: 'short', events: ALL }, /16 characters/],
    ['an unknown event', { url: 'https://shop.test/hooks', secret: 'a-test-secret-0123456789', events: ['order.shipped'] }, /events/],
    [
      'a repeated event',
      { url: 'https://shop.test/hooks', secret: 'a-test-secret-0123456789', events: ['order.paid', 'order.paid'] },
      /repeat/,
    ],
    ['an unknown field', { url: 'https://shop.test/hooks', secret: 'a-test-secret-0123456789', events: ALL, retries: 3 }, /json/],
    ['no events field', { url: 'https://shop.test/hooks', secret: 'a-test-secret-0123456789' }, /events/],
  ])('refuses %s with 400 INVALID_INPUT', async (_, body, message) => {
    const e = await errorOf(await putHooks(body));
    expect(e).toMatchObject({ status: 400, code: 'INVALID_INPUT' });
    expect(e.message).toMatch(message);
  });

  it('needs the admin token, and JSON', async () => {
    expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: ALL }, {})).status).toBe(401);
    const notJson = await call('/admin/webhooks', { method: 'PUT', headers: ADMIN, body: 'url=x' });
    expect(notJson.status).toBe(415);
    expect((await call('/admin/webhooks')).status).toBe(401);
  });

  it('shows the endpoint without its secret', async () => {
    const res = await call('/admin/webhooks', { headers: ADMIN });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain('a-test-secret');
    expect(JSON.parse(text)).toMatchObject({ url: DEAD_URL, events: ALL, enabled: true, deliveries: { pending: expect.any(Number) } });
  });
});

describe('the outbox', () => {
  it('writes order.created with the order, and order.closed with its cancel; stats count them', async () => {
    const { goodsId } = await createGoods({ stock: 3, priceCents: 1234 });
    const { orderId, jwt } = await buyOrder('hook-cancel', goodsId);
    const [created] = await deliveriesOf(orderId);
    expect(created).toMatchObject({ id: webhookEventId('order.created', orderId), type: 'order.created', goodsId, status: 'PENDING' });
    expect(created?.payload).toMatchObject({
      order: { orderId, goodsId, userId: 'hook-cancel', status: 'PENDING_PAYMENT', priceCents: 1234, paidAt: null, closedAt: null },
    });
    expect((await call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(jwt) })).status).toBe(200);
    const rows = await deliveriesOf(orderId);
    expect(rows.map((r) => r.type).sort()).toEqual(['order.closed', 'order.created']);
    const closed = rows.find((r) => r.type === 'order.closed');
    expect(closed?.payload).toMatchObject({ order: { orderId, status: 'CANCELLED', closedAt: expect.any(String) } });
    const s = await stats(goodsId);
    expect(s.webhooks.pending + s.webhooks.delivered + s.webhooks.failed).toBe(2);
  });

  it('writes order.refunded for a payment that came after the order closed, order.paid for one in time', async () => {
    const { goodsId } = await createGoods({ stock: 3, priceCents: 700 });
    const late = await buyOrder('hook-late', goodsId);
    const onTime = await buyOrder('hook-paid', goodsId);
    const payOf = async (o: { orderId: string; jwt: string }) => {
      const res = await call(`/api/orders/${o.orderId}/pay`, { method: 'POST', headers: bearer(o.jwt), json: { outcome: 'hold' } });
      expect(res.status).toBe(200);
      return (await json<{ paymentId: string }>(res)).paymentId;
    };
    const latePayment = await payOf(late);
    const paidPayment = await payOf(onTime);
    expect((await call(`/api/orders/${late.orderId}/cancel`, { method: 'POST', headers: bearer(late.jwt) })).status).toBe(200);
    for (const [o, paymentId] of [
      [late, latePayment],
      [onTime, paidPayment],
    ] as const) {
      const event = { eventId: `evt_hook_${paymentId}`, paymentId, orderId: o.orderId, status: 'SUCCEEDED', amountCents: 700 };
      expect((await paymentCallback(event)).status).toBe(200);
    }
    expect((await deliveriesOf(late.orderId)).map((r) => r.type).sort()).toEqual(['order.closed', 'order.created', 'order.refunded']);
    expect((await deliveriesOf(onTime.orderId)).map((r) => r.type).sort()).toEqual(['order.created', 'order.paid']);
    const paid = (await deliveriesOf(onTime.orderId)).find((r) => r.type === 'order.paid');
    expect(paid?.payload).toMatchObject({ order: { status: 'PAID', paidAt: expect.any(String) } });
  });

  it('writes nothing for a batch that rolls back', async () => {
    const orderId = '999999999-1';
    const message = {
      v: 1 as const,
      kind: 'reserve' as const,
      requestId: '999999999.AAAAAAAAAAAAAAAAAAAAAA',
      orderId,
      orderNo: 'NO-ROLLBACK-1',
      userId: 'hook-rollback',
      goodsId: 999_999_999,
      activityId: 1,
      priceCents: 1,
      payTimeoutSeconds: 60,
      reservedAt: Date.now(),
    };
    // No such goods: the order insert violates its foreign key and the statement rolls back.
    await expect(sql((db) => writeOrders(db, 999_999_999, [message]))).rejects.toThrow();
    expect(await deliveriesOf(orderId)).toEqual([]);
  });

  it('writes no order.closed when the close rolls back', async () => {
    const { goodsId, totalStock } = await createGoods({ stock: 2 });
    const { orderId } = await buyOrder('hook-close-rollback', goodsId);
    // Postgres' stock already full: returning the unit breaks the stock check, so the close rolls back.
    await sql((db) => db.update(seckillGoods).set({ stock: totalStock }).where(eq(seckillGoods.id, goodsId)));
    await expect(sql((db) => closePendingOrder(db, orderId, ORDER_STATUS.CANCELLED))).rejects.toThrow();
    const rows = await deliveriesOf(orderId);
    expect(rows.map((r) => r.type)).toEqual(['order.created']);
    await sql((db) =>
      db
        .update(seckillGoods)
        .set({ stock: totalStock - 1 })
        .where(eq(seckillGoods.id, goodsId)),
    );
  });

  it('writes no event the shop did not subscribe to, and none at all when turned off', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: ['order.closed'] })).status).toBe(200);
    try {
      const first = await buyOrder('hook-only-closed', goodsId);
      expect(await deliveriesOf(first.orderId)).toEqual([]);
      expect((await call(`/api/orders/${first.orderId}/cancel`, { method: 'POST', headers: bearer(first.jwt) })).status).toBe(200);
      expect((await deliveriesOf(first.orderId)).map((r) => r.type)).toEqual(['order.closed']);
      expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: [] })).status).toBe(200);
      const off = await json(await call('/admin/webhooks', { headers: ADMIN }));
      expect(off).toMatchObject({ enabled: false, events: [] });
      const second = await buyOrder('hook-off', goodsId);
      expect((await call(`/api/orders/${second.orderId}/cancel`, { method: 'POST', headers: bearer(second.jwt) })).status).toBe(200);
      expect(await deliveriesOf(second.orderId)).toEqual([]);
    } finally {
      expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: ALL })).status).toBe(200);
    }
  });
});

describe('deliveries', () => {
  it('give up after their window, are listed as failed, and a redelivery keeps the id', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId } = await buyOrder('hook-give-up', goodsId);
    const id = webhookEventId('order.created', orderId);
    const result = await attemptAt(id, Date.now() + WEBHOOK_GIVE_UP_MS + 60_000);
    expect(result.ackAll).toBe(true);
    const [row] = (await deliveriesOf(orderId)).filter((r) => r.id === id);
    expect(row).toMatchObject({ status: 'FAILED', lastStatusCode: null });
    expect(row?.attempts).toBeGreaterThan(0);
    expect(row?.lastError).toBeTruthy();

    const failed = await json<{ deliveries: { id: string; status: string }[] }>(
      await call(`/admin/webhooks/deliveries?status=FAILED&goodsId=${goodsId}`, { headers: ADMIN }),
    );
    expect(failed.deliveries).toEqual([expect.objectContaining({ id, status: 'FAILED' })]);
    expect(await stats(goodsId)).toMatchObject({ webhooks: { failed: 1, pending: 0 } });

    const again = await call(`/admin/webhooks/deliveries/${id}/redeliver`, { method: 'POST', headers: ADMIN });
    expect(again.status).toBe(200);
    expect(await json(again)).toMatchObject({ id, status: 'PENDING', type: 'order.created', orderId });
    const twice = await errorOf(await call(`/admin/webhooks/deliveries/${id}/redeliver`, { method: 'POST', headers: ADMIN }));
    expect(twice).toMatchObject({ status: 409, code: 'CONFLICT' });
  });

  it('end FAILED without a request when their event was turned off', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId } = await buyOrder('hook-turned-off', goodsId);
    const id = webhookEventId('order.created', orderId);
    expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: ['order.paid'] })).status).toBe(200);
    try {
      await attemptAt(id, Date.now() + 5_000);
      const [row] = await deliveriesOf(orderId);
      expect(row).toMatchObject({ status: 'FAILED', lastError: 'webhooks are off for order.created' });
    } finally {
      expect((await putHooks({ url: DEAD_URL, secret: 'a-test-secret-0123456789', events: ALL })).status).toBe(200);
    }
  });

  it.each([
    ['an unknown delivery', '/admin/webhooks/deliveries/evt_999999999-9_paid/redeliver', 404, 'NOT_FOUND'],
    ['a malformed id', '/admin/webhooks/deliveries/not-an-id/redeliver', 400, 'INVALID_INPUT'],
  ])('redeliver of %s answers %s', async (_, path, status, code) => {
    expect(await errorOf(await call(path, { method: 'POST', headers: ADMIN }))).toMatchObject({ status, code });
  });

  it.each([
    ['status=SENT', 'INVALID_INPUT'],
    ['limit=0', 'INVALID_INPUT'],
    ['limit=501', 'INVALID_INPUT'],
    ['goodsId=abc', 'INVALID_INPUT'],
    ['orderId=1;drop', 'INVALID_INPUT'],
  ])('the log refuses %s', async (query, code) => {
    expect(await errorOf(await call(`/admin/webhooks/deliveries?${query}`, { headers: ADMIN }))).toMatchObject({ status: 400, code });
  });

  it('the log filters by order and is newest first', async () => {
    const rows = await sql((db) => db.execute(raw`SELECT order_id FROM webhook_delivery ORDER BY created_at DESC LIMIT 1`));
    const orderId = String(rows.rows[0]?.order_id);
    const res = await json<{ deliveries: { orderId: string; createdAt: string }[] }>(
      await call(`/admin/webhooks/deliveries?orderId=${orderId}&limit=10`, { headers: ADMIN }),
    );
    expect(res.deliveries.length).toBeGreaterThan(0);
    expect(res.deliveries.every((d) => d.orderId === orderId)).toBe(true);
    const times = res.deliveries.map((d) => d.createdAt);
    expect([...times].sort().reverse()).toEqual(times);
  });
});
