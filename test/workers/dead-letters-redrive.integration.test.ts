import { createExecutionContext, createMessageBatch, getQueueResult } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { deadLetter, seckillGoods, seckillOrder } from '../../db/schema';
import type { OrderMessage } from '../../workers/kernel/contract';
import { consumeDeadLetters } from '../../workers/queue/dead-letters';
import { consumeOrders } from '../../workers/queue/orders';
import { consumeTimeouts } from '../../workers/queue/timeouts';
import { ADMIN, buyOrder, call, createGoods, eventually, json, ORDER_POLL_MS, orderOf, settled, sql, stats } from './helpers';

/** The Worker with its Postgres unreachable (a refused port behind the bridge's allow-list). */
const postgresDown = { ...env, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/nowhere' } as Env;

type DeadLetterView = {
  id: number;
  queue: string;
  messageKey: string;
  goodsId: number | null;
  attempts: number;
  redrivenAt: string | null;
};

let seq = 0;
function message(body: unknown, attempts = 1) {
  seq++;
  return { id: `dl-${Date.now()}-${seq}`, timestamp: new Date(), attempts, body };
}

/** What the queue does after the last retry: hands the message to the dead-letter consumer. */
async function deadLetterOf(body: unknown, attempts = 9) {
  const batch = createMessageBatch('seckill-dlq', [message(body, attempts)]);
  const ctx = createExecutionContext();
  await consumeDeadLetters(batch, env);
  return getQueueResult(batch, ctx);
}

async function listed(query: string): Promise<DeadLetterView[]> {
  const res = await call(`/admin/dead-letters${query}`, { headers: ADMIN });
  expect(res.status).toBe(200);
  return json<DeadLetterView[]>(res);
}

/** A goods that exists in Postgres only (its stock object is made later, from the row). */
async function goodsRow(stock: number): Promise<number> {
  const now = Date.now();
  const [row] = await sql((db) =>
    db
      .insert(seckillGoods)
      .values({
        activityId: 3001,
        title: 'Dead letter test',
        priceCents: 500,
        totalStock: stock,
        stock,
        startAt: new Date(now - 1000),
        endAt: new Date(now + 3600_000),
      })
      .returning({ id: seckillGoods.id }),
  );
  if (!row) {
    throw new Error('no goods row');
  }
  return row.id;
}

function orderMessage(goodsId: number, n: number): OrderMessage {
  return {
    v: 1,
    kind: 'reserve',
    requestId: `${goodsId}.${String(n).padStart(22, 'd')}`,
    orderId: `${goodsId}-${n}`,
    orderNo: `SK-DL-${goodsId}-${n}`,
    userId: `dl-user-${n}`,
    goodsId,
    activityId: 3001,
    priceCents: 500,
    payTimeoutSeconds: 900,
    reservedAt: Date.now(),
  };
}

describe('dead letters', () => {
  it('keeps an order message Postgres refused, counts it in the stats, and re-drives it into an order', async () => {
    const goodsId = await goodsRow(1);
    const body = orderMessage(goodsId, 1);

    // Postgres is down for the whole retry budget: the consumer asks for retries each time.
    const batch = createMessageBatch('seckill-orders', [message(body)]);
    const ctx = createExecutionContext();
    await consumeOrders(batch, postgresDown);
    const tried = await getQueueResult(batch, ctx);
    expect(tried.retryMessages).toHaveLength(1);
    expect(tried.explicitAcks).toHaveLength(0);

    // Then the queue gives up and the dead-letter consumer stores it.
    expect((await deadLetterOf(body)).ackAll).toBe(true);
    const [row] = await listed(`?goodsId=${goodsId}`);
    expect(row).toMatchObject({ queue: 'orders', messageKey: `order:${body.requestId}`, goodsId, attempts: 9, redrivenAt: null });
    expect((await stats(goodsId)).deadLetters).toBe(1);

    const res = await call(`/admin/dead-letters/${row?.id}/redrive`, { method: 'POST', headers: ADMIN });
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({ id: row?.id, queue: 'orders', redriven: true });
    const order = await eventually(async () => {
      const [o] = await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.id, body.orderId)));
      return o;
    });
    expect(order).toMatchObject({ userId: 'dl-user-1', status: 0, priceCents: 500 });
    // The goods' stock object is created from Postgres, which now counts the order.
    expect((await call(`/admin/goods/${goodsId}/prewarm`, { method: 'POST', headers: ADMIN })).status).toBe(200);
    expect(await settled(goodsId)).toMatchObject({ deadLetters: 0, doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 1 } });
    expect((await listed(`?goodsId=${goodsId}&state=redriven`)).map((d) => d.id)).toEqual([row?.id]);
    expect(await listed(`?goodsId=${goodsId}`)).toEqual([]);

    // Once only.
    const again = await call(`/admin/dead-letters/${row?.id}/redrive`, { method: 'POST', headers: ADMIN });
    expect(again.status).toBe(409);
    expect(await json(again)).toMatchObject({ error: { code: 'CONFLICT' } });
  });

  it('keeps a dead order pack one row per order, each re-driven on its own into an order', async () => {
    const goodsId = await goodsRow(2);
    const orders = [orderMessage(goodsId, 11), orderMessage(goodsId, 12)];
    const pack = { v: 1, kind: 'reserve-pack', goodsId, orders };
    const batch = createMessageBatch('seckill-orders', [message(pack)]);
    const ctx = createExecutionContext();
    await consumeOrders(batch, postgresDown);
    expect((await getQueueResult(batch, ctx)).retryMessages).toHaveLength(1);

    expect((await deadLetterOf(pack)).ackAll).toBe(true);
    const rows = await listed(`?goodsId=${goodsId}`);
    expect(rows.map((r) => r.messageKey).sort()).toEqual(orders.map((o) => `order:${o.requestId}`).sort());
    expect(rows.every((r) => r.queue === 'orders' && r.attempts === 9)).toBe(true);
    expect((await stats(goodsId)).deadLetters).toBe(2);

    const res = await call('/admin/dead-letters/redrive', { method: 'POST', headers: ADMIN, json: { goodsId } });
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({ goodsId, redriven: 2, skipped: [] });
    const made = await eventually(async () => {
      const found = await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)));
      return found.length === 2 ? found : undefined;
    });
    expect(made.map((o) => o.id).sort()).toEqual(orders.map((o) => o.orderId).sort());
  });

  it('re-drives a dead timeout message, which closes the overdue order and returns its unit', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('dl-timeout', goodsId);
    const body = { v: 1, kind: 'pay-timeout', orderId, goodsId };
    const batch = createMessageBatch('seckill-order-timeouts', [message(body)]);
    const ctx = createExecutionContext();
    await consumeTimeouts(batch, postgresDown, Date.now() + 3600_000);
    expect((await getQueueResult(batch, ctx)).retryMessages).toHaveLength(1);
    await deadLetterOf(body);
    expect((await stats(goodsId)).deadLetters).toBe(1);

    // Meanwhile the payment window really closed.
    await sql((db) =>
      db
        .update(seckillOrder)
        .set({ payDeadline: new Date(Date.now() - 1000) })
        .where(eq(seckillOrder.id, orderId)),
    );
    const res = await call('/admin/dead-letters/redrive', { method: 'POST', headers: ADMIN, json: { goodsId } });
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({ goodsId, redriven: 1, skipped: [] });
    await eventually(async () => (await orderOf(jwt, orderId)).status === 'CLOSED_TIMEOUT', 30_000, ORDER_POLL_MS);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, deadLetters: 0, orders: { CLOSED_TIMEOUT: 1 } });
  });

  it('keeps a dead timeout pack one timeout per order, each re-driven on its own', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const first = await buyOrder('dl-timeout-pack-1', goodsId);
    const second = await buyOrder('dl-timeout-pack-2', goodsId);
    const pack = { v: 1, kind: 'pay-timeout-pack', goodsId, orderIds: [first.orderId, second.orderId] };
    expect((await deadLetterOf(pack)).ackAll).toBe(true);
    const rows = await listed(`?goodsId=${goodsId}`);
    expect(rows.map((r) => r.messageKey).sort()).toEqual([`pay-timeout:${first.orderId}`, `pay-timeout:${second.orderId}`].sort());
    expect(rows.every((r) => r.queue === 'timeouts')).toBe(true);
    const res = await call('/admin/dead-letters/redrive', { method: 'POST', headers: ADMIN, json: { goodsId } });
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({ goodsId, redriven: 2, skipped: [] });
  });

  it('reopens a re-driven message that dies again, and refuses one it cannot route', async () => {
    const goodsId = await goodsRow(1);
    const body = orderMessage(goodsId, 2);
    await deadLetterOf(body, 9);
    const [first] = await listed(`?goodsId=${goodsId}`);
    await sql((db) =>
      db
        .update(deadLetter)
        .set({ redrivenAt: new Date() })
        .where(eq(deadLetter.id, first?.id ?? 0)),
    );
    await deadLetterOf(body, 9);
    const [reopened] = await listed(`?goodsId=${goodsId}`);
    expect(reopened).toMatchObject({ id: first?.id, attempts: 18, redrivenAt: null });

    // A message of no known kind is kept (without a goods) but cannot be sent anywhere.
    const key = `dl-junk-${Date.now()}`;
    await deadLetterOf({ junk: key });
    const junk = (await listed('?limit=500')).find((d) => d.queue === 'unknown' && d.goodsId === null && JSON.stringify(d).includes(key));
    expect(junk).toBeDefined();
    const refused = await call(`/admin/dead-letters/${junk?.id}/redrive`, { method: 'POST', headers: ADMIN });
    expect(refused.status).toBe(409);
    // A stored order message that no longer parses is refused too.
    await deadLetterOf({ ...orderMessage(goodsId, 3), orderId: 'broken' });
    const broken = (await listed(`?goodsId=${goodsId}`)).find((d) => d.messageKey === `order:${orderMessage(goodsId, 3).requestId}`);
    const malformed = await call(`/admin/dead-letters/${broken?.id}/redrive`, { method: 'POST', headers: ADMIN });
    expect(malformed.status).toBe(409);
    expect(await json(malformed)).toMatchObject({ error: { code: 'CONFLICT' } });
  });

  it('answers bad requests with the contract errors', async () => {
    expect((await call('/admin/dead-letters')).status).toBe(401);
    expect((await call('/admin/dead-letters/1/redrive', { method: 'POST' })).status).toBe(401);
    for (const path of ['/admin/dead-letters/abc/redrive', '/admin/dead-letters/-1/redrive', '/admin/dead-letters/0/redrive']) {
      const res = await call(path, { method: 'POST', headers: ADMIN });
      expect(res.status).toBe(400);
      expect(await json(res)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    }
    expect((await call('/admin/dead-letters/987654321/redrive', { method: 'POST', headers: ADMIN })).status).toBe(404);
    expect((await call('/admin/dead-letters?state=weird', { headers: ADMIN })).status).toBe(400);
    expect((await call('/admin/dead-letters?limit=100000', { headers: ADMIN })).status).toBe(400);
    expect((await call('/admin/dead-letters/redrive', { method: 'POST', headers: ADMIN, json: {} })).status).toBe(400);
    expect((await call('/admin/dead-letters/redrive', { method: 'POST', headers: ADMIN, json: { goodsId: 'x' } })).status).toBe(400);
    // Beside /redrive and /:id/redrive there is no other POST route, whatever the body.
    const nowhere = await call('/admin/dead-letters/redrive-all', { method: 'POST', headers: ADMIN, json: { goodsId: 1 } });
    expect(nowhere.status).toBe(404);
    expect(await json(nowhere)).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });
});
