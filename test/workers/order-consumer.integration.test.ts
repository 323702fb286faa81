import { createExecutionContext, createMessageBatch, getQueueResult, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { seckillGoods, seckillOrder } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock';
import worker from '../../workers/index';
import { groupByGoods } from '../../workers/queue/orders';
import { goodsStock } from '../../workers/routing';
import type { OrderMessage, ReserveItem } from '../../workers/schemas';
import { createGoods, sql, stats } from './helpers';

let seq = 0;
function item(goodsId: number, userId: string): ReserveItem {
  seq++;
  return {
    requestId: `${goodsId}.${String(seq).padStart(22, 'c')}`,
    userId,
    tokenId: `ctoken-${seq}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: false,
  };
}

const holdingQueue = { sendBatch: () => Promise.reject(new Error('held for the test')) } as unknown as Queue;

/** Reserves for `users` with the queue held, and returns the order messages the object made. */
async function reserveHeld(goodsId: number, users: string[]): Promise<OrderMessage[]> {
  const stub = goodsStock(env, goodsId);
  await runInDurableObject(stub, (instance: GoodsStock) => {
    (instance as unknown as { env: Env }).env = { ...env, ORDER_QUEUE: holdingQueue };
  });
  const outcomes = await stub.reserveMany(
    goodsId,
    users.map((u) => item(goodsId, u)),
  );
  expect(outcomes.every((o) => o.ok)).toBe(true);
  return runInDurableObject(stub, (_i, state) =>
    state.storage.sql
      .exec<{ body: string }>('SELECT body FROM outbox ORDER BY seq')
      .toArray()
      .map((r) => JSON.parse(r.body) as OrderMessage),
  );
}

async function deliver(bodies: unknown[], attempts = 1) {
  const batch = createMessageBatch(
    'seckill-orders',
    bodies.map((body, i) => ({ id: `m-${Date.now()}-${i}-${Math.random()}`, timestamp: new Date(), attempts, body })),
  );
  const ctx = createExecutionContext();
  await worker.queue(batch, env, ctx);
  return getQueueResult(batch, ctx);
}

function ordersOf(goodsId: number) {
  return sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)));
}

describe('order consumer', () => {
  it('makes one order from a message delivered twice, in one batch or in two', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const [m] = await reserveHeld(goodsId, ['dup']);
    if (!m) {
      throw new Error('no message');
    }
    const first = await deliver([m, m]);
    expect(first.explicitAcks).toHaveLength(2);
    const second = await deliver([m]);
    expect(second.explicitAcks).toHaveLength(1);
    const orders = await ordersOf(goodsId);
    expect(orders).toHaveLength(1);
    expect(orders[0]).toMatchObject({ id: m.orderId, requestId: m.requestId, userId: 'dup', status: 0 });
    const s = await stats(goodsId);
    expect(s).toMatchObject({ dbStock: 2, queued: 0, orders: { PENDING_PAYMENT: 1 } });
    expect((await goodsStock(env, goodsId).result(m.requestId))?.status).toBe('SUCCESS');
  });

  it('falls back to row by row when Postgres has less stock than the batch, and gives the rest back', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const messages = await reserveHeld(goodsId, ['f1', 'f2', 'f3']);
    // Postgres disagrees with the object: only one unit left there.
    await sql((db) => db.update(seckillGoods).set({ stock: 1 }).where(eq(seckillGoods.id, goodsId)));
    const result = await deliver(messages);
    expect(result.explicitAcks).toHaveLength(3);
    expect(await ordersOf(goodsId)).toHaveLength(1);
    const stub = goodsStock(env, goodsId);
    const views = await Promise.all(messages.map((m) => stub.result(m.requestId)));
    expect(views.map((v) => v?.status).sort()).toEqual(['FAIL', 'FAIL', 'SUCCESS']);
    expect(views.filter((v) => v?.status === 'FAIL').every((v) => v?.reason === 'SOLD_OUT')).toBe(true);
    // Two units went back to the object (5 - 3 + 2).
    expect((await stub.snapshot())?.remaining).toBe(4);
  });

  it('refuses a second live order for the same shopper and releases that reservation', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const [a] = await reserveHeld(goodsId, ['twice']);
    if (!a) {
      throw new Error('no message');
    }
    // A different reservation for the same user (as if the object had lost its memory).
    const forged: OrderMessage = { ...a, requestId: `${goodsId}.${'z'.repeat(22)}`, orderId: `${goodsId}-999`, orderNo: 'SK-forged' };
    await deliver([a]);
    await deliver([forged]);
    const orders = await ordersOf(goodsId);
    expect(orders.map((o) => o.id)).toEqual([a.orderId]);
  });

  it('retries a group that Postgres rejects and acks the other groups', async () => {
    const good = await createGoods({ stock: 2 });
    const [ok] = await reserveHeld(good.goodsId, ['fine']);
    const bad: OrderMessage = {
      ...(ok as OrderMessage),
      goodsId: 999_999_999,
      requestId: `999999999.${'q'.repeat(22)}`,
      orderId: '999999999-1',
      orderNo: 'SK-no-such-goods',
    };
    const result = await deliver([ok, bad], 3);
    expect(result.explicitAcks).toHaveLength(1);
    expect(result.retryMessages).toHaveLength(1);
    expect(await ordersOf(good.goodsId)).toHaveLength(1);
  });

  it('sends malformed messages towards the dead-letter queue instead of dropping them', async () => {
    const result = await deliver([{ v: 1, kind: 'reserve', requestId: 'nonsense' }, 'not even an object']);
    expect(result.explicitAcks).toHaveLength(0);
    expect(result.retryMessages).toHaveLength(2);
  });

  it('groups by goods and drops in-batch duplicates (pure)', () => {
    const body = (goodsId: number, r: string) => ({
      v: 1,
      kind: 'reserve',
      requestId: `${goodsId}.${r.padEnd(22, 'x')}`,
      orderId: `${goodsId}-1`,
      orderNo: 'n',
      userId: 'u',
      goodsId,
      activityId: 1,
      priceCents: 1,
      payTimeoutSeconds: 900,
      reservedAt: 1,
    });
    let acked = 0;
    const msg = (b: unknown) =>
      ({ id: 'i', timestamp: new Date(), attempts: 1, body: b, ack: () => acked++, retry: () => {} }) as unknown as Message<unknown>;
    const { groups, malformed } = groupByGoods([msg(body(1, 'a')), msg(body(1, 'a')), msg(body(2, 'b')), msg({})]);
    expect([...groups.keys()]).toEqual([1, 2]);
    expect(groups.get(1)).toHaveLength(1);
    expect(malformed).toHaveLength(1);
    expect(acked).toBe(1);
  });
});
