import { createExecutionContext, createMessageBatch, getQueueResult, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { seckillGoods, seckillOrder } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import worker from '../../workers/index';
import {
  type OrderMessage,
  type OrderPack,
  PACK_ORDERS_MAX,
  type ReserveItem,
  type TimeoutMessage,
  type TimeoutPack,
} from '../../workers/kernel/contract';
import { groupByGoods } from '../../workers/queue/orders';
import { createGoods, sql, stats, stockObject } from './helpers';
import { createQueuedGoods, openLive, shopper } from './room-helpers';

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
  const stub = stockObject(goodsId);
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

async function deliver(bodies: unknown[], attempts = 1, workerEnv: Env = env) {
  const batch = createMessageBatch(
    'seckill-orders',
    bodies.map((body, i) => ({ id: `m-${Date.now()}-${i}-${Math.random()}`, timestamp: new Date(), attempts, body })),
  );
  // The harness records which messages were retried, not their delay: note it on the way.
  const retryDelays: (number | undefined)[] = [];
  for (const m of batch.messages) {
    const retry = m.retry.bind(m);
    m.retry = (options) => {
      retryDelays.push(options?.delaySeconds);
      retry(options);
    };
  }
  const ctx = createExecutionContext();
  await worker.queue(batch, workerEnv, ctx);
  return { ...(await getQueueResult(batch, ctx)), retryDelays };
}

/**
 * A timeout queue that records what the consumer sends, or refuses it: `sent` holds each
 * order's timeout as its pack carried it, `packs` the messages.
 */
function timeoutQueue(refuse = false) {
  const sent: { body: TimeoutMessage; delaySeconds?: number }[] = [];
  const packs: TimeoutPack[] = [];
  const queue = {
    sendBatch: async (messages: Iterable<MessageSendRequest<TimeoutPack>>) => {
      if (refuse) {
        throw new Error('timeout queue unavailable');
      }
      for (const m of messages) {
        packs.push(m.body);
        for (const orderId of m.body.orderIds) {
          sent.push({ body: { v: 1, kind: 'pay-timeout', orderId, goodsId: m.body.goodsId }, delaySeconds: m.delaySeconds });
        }
      }
    },
  };
  return { sent, packs, queue: queue as unknown as Queue };
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
    expect((await stockObject(goodsId).result(m.requestId))?.status).toBe('SUCCESS');
  });

  it('falls back to row by row when Postgres has less stock than the batch, and holds the refused units aside', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const messages = await reserveHeld(goodsId, ['f1', 'f2', 'f3']);
    // Postgres disagrees with the object: only one unit left there.
    await sql((db) => db.update(seckillGoods).set({ stock: 1 }).where(eq(seckillGoods.id, goodsId)));
    const result = await deliver(messages);
    expect(result.explicitAcks).toHaveLength(3);
    expect(await ordersOf(goodsId)).toHaveLength(1);
    const stub = stockObject(goodsId);
    const views = await Promise.all(messages.map((m) => stub.result(m.requestId)));
    expect(views.map((v) => v?.status).sort()).toEqual(['FAIL', 'FAIL', 'SUCCESS']);
    expect(views.filter((v) => v?.status === 'FAIL').every((v) => v?.reason === 'SOLD_OUT')).toBe(true);
    // The two units Postgres refused are not sold again: the object keeps 5 - 3 for sale, 2 aside.
    expect(await stub.snapshot()).toMatchObject({ remaining: 2, refused: 2, queued: 0 });
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

  it('writes a full batch of 100 in one go: every order, the object settled, every payment timeout scheduled', async () => {
    const { goodsId } = await createGoods({ stock: 150, payTimeoutSeconds: 600 });
    const users = Array.from({ length: 100 }, (_, i) => `full-${i}`);
    const messages = await reserveHeld(goodsId, users);
    const timeouts = timeoutQueue();
    const result = await deliver(messages, 1, { ...env, TIMEOUT_QUEUE: timeouts.queue });
    expect(result.explicitAcks).toHaveLength(100);
    expect(result.retryMessages).toHaveLength(0);
    expect(await ordersOf(goodsId)).toHaveLength(100);
    expect(timeouts.sent.map((t) => t.body.orderId).sort()).toEqual(messages.map((m) => m.orderId).sort());
    expect(timeouts.sent.every((t) => t.delaySeconds === 600 && t.body.goodsId === goodsId)).toBe(true);
    // One timeout message for the hundred.
    expect(timeouts.packs.map((p) => p.orderIds.length)).toEqual([100]);
    const s = await stats(goodsId);
    expect(s).toMatchObject({ dbStock: 50, doRemaining: 50, queued: 0, orders: { PENDING_PAYMENT: 100 }, consistent: true });
  });

  it('writes a goods group larger than one statement holds, each order once and the stock taken once', async () => {
    // 25 packs of 100: more orders than one statement writes (2,000), so the group goes in two.
    const { goodsId } = await createGoods({ stock: 2_600 });
    const users = Array.from({ length: 2_500 }, (_, i) => `big-${i}`);
    const messages = await reserveHeld(goodsId, users);
    const packs: OrderPack[] = [];
    for (let i = 0; i < messages.length; i += PACK_ORDERS_MAX) {
      packs.push({ v: 1, kind: 'reserve-pack', goodsId, orders: messages.slice(i, i + PACK_ORDERS_MAX) });
    }
    const timeouts = timeoutQueue();
    const result = await deliver(packs, 1, { ...env, TIMEOUT_QUEUE: timeouts.queue });
    expect(result.explicitAcks).toHaveLength(25);
    expect(result.retryMessages).toHaveLength(0);
    const orders = await ordersOf(goodsId);
    expect(new Set(orders.map((o) => o.requestId)).size).toBe(2_500);
    expect(orders).toHaveLength(2_500);
    expect(timeouts.sent).toHaveLength(2_500);
    const s = await stats(goodsId);
    expect(s).toMatchObject({ dbStock: 100, doRemaining: 100, queued: 0, orders: { PENDING_PAYMENT: 2_500 }, consistent: true });
  });

  it('retries the whole group when the timeouts cannot be scheduled, and the retry makes no second order', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const messages = await reserveHeld(goodsId, ['t1', 't2']);
    const refused = await deliver(messages, 2, { ...env, TIMEOUT_QUEUE: timeoutQueue(true).queue });
    expect(refused.explicitAcks).toHaveLength(0);
    expect(refused.retryMessages).toHaveLength(2);
    expect(refused.retryDelays).toEqual([2, 2]);
    const timeouts = timeoutQueue();
    const again = await deliver(messages, 3, { ...env, TIMEOUT_QUEUE: timeouts.queue });
    expect(again.explicitAcks).toHaveLength(2);
    expect(timeouts.sent).toHaveLength(2);
    expect(await ordersOf(goodsId)).toHaveLength(2);
    expect(await stats(goodsId)).toMatchObject({ dbStock: 3, doRemaining: 3, queued: 0, consistent: true });
  });

  it("tells the shopper's live channel right after the settle, while the timeouts' send still waits", async () => {
    // A goods without a line: the channel still carries the purchase's result.
    const { goodsId } = await createQueuedGoods({ stock: 5, queue: { mode: 'off' } });
    const buyer = await shopper('told-early');
    const live = await openLive(goodsId, { jwt: buyer.jwt, join: true });
    await live.next((e) => e.type === 'joined', 5_000);
    const messages = await reserveHeld(goodsId, [buyer.userId]);
    let release = () => {};
    let timeoutsSent = false;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slowTimeouts = {
      sendBatch: async () => {
        await held;
        timeoutsSent = true;
      },
    } as unknown as Queue;
    const delivered = deliver(messages, 1, { ...env, TIMEOUT_QUEUE: slowTimeouts });
    try {
      const told = await live.next((e) => e.type === 'result', 10_000);
      expect(told).toMatchObject({ status: 'SUCCESS' });
      expect(timeoutsSent).toBe(false);
    } finally {
      release();
    }
    // The batch is acked once the timeouts are sent: the early word cost nothing.
    expect((await delivered).explicitAcks).toHaveLength(1);
    expect(timeoutsSent).toBe(true);
    expect(await ordersOf(goodsId)).toHaveLength(1);
    live.close();
  });

  it('retries every message with backoff and loses none while Postgres cannot be reached', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const messages = await reserveHeld(goodsId, ['down1', 'down2']);
    // Nothing listens on port 1: the SQL-over-HTTP request cannot connect.
    const down = await deliver(messages, 1, { ...env, PG_WS_PROXY: '127.0.0.1:1' });
    expect(down.explicitAcks).toHaveLength(0);
    expect(down.retryMessages).toHaveLength(2);
    expect(down.retryDelays).toEqual([1, 1]);
    expect(await ordersOf(goodsId)).toHaveLength(0);
    const back = await deliver(messages, 2);
    expect(back.explicitAcks).toHaveLength(2);
    expect(await ordersOf(goodsId)).toHaveLength(2);
  });

  it('waits RETRY_BACKOFF_BASE_SECONDS doubling up to RETRY_BACKOFF_CAP_SECONDS between retries', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const [m] = await reserveHeld(goodsId, ['sched']);
    const down = { ...env, PG_WS_PROXY: '127.0.0.1:1' };
    // The production schedule: the 8th retry waits 128 s.
    expect((await deliver([m], 8, down)).retryDelays).toEqual([128]);
    // A drill's: from 2 s, never more than 5 s.
    const short = { ...down, RETRY_BACKOFF_BASE_SECONDS: '2', RETRY_BACKOFF_CAP_SECONDS: '5' };
    expect((await deliver([m], 1, short)).retryDelays).toEqual([2]);
    expect((await deliver([m], 2, short)).retryDelays).toEqual([4]);
    expect((await deliver([m], 8, short)).retryDelays).toEqual([5]);
    expect((await deliver([m], 1)).explicitAcks).toHaveLength(1);
  });

  it('sends malformed messages towards the dead-letter queue instead of dropping them', async () => {
    const result = await deliver([{ v: 1, kind: 'reserve', requestId: 'nonsense' }, 'not even an object']);
    expect(result.explicitAcks).toHaveLength(0);
    expect(result.retryMessages).toHaveLength(2);
  });

  it('groups lone orders and packs by goods, writes a reservation once and leaves every message to its group (pure)', () => {
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
    const pack = (goodsId: number, ...orders: unknown[]) => ({ v: 1, kind: 'reserve-pack', goodsId, orders });
    let acked = 0;
    const msg = (b: unknown) =>
      ({ id: 'i', timestamp: new Date(), attempts: 1, body: b, ack: () => acked++, retry: () => {} }) as unknown as Message<unknown>;
    const { groups, malformed } = groupByGoods([
      msg(body(1, 'a')),
      msg(pack(1, body(1, 'a'), body(1, 'c'))),
      msg(body(2, 'b')),
      msg({}),
      // A pack that mixes goods, an empty one and one with a bad order are malformed as a whole.
      msg(pack(1, body(1, 'd'), body(2, 'e'))),
      msg(pack(1)),
      msg(pack(2, body(2, 'f'), { ...body(2, 'g'), requestId: 'nonsense' })),
    ]);
    expect([...groups.keys()]).toEqual([1, 2]);
    expect(groups.get(1)?.orders.map((o) => o.requestId)).toEqual([body(1, 'a').requestId, body(1, 'c').requestId]);
    expect(groups.get(1)?.messages).toHaveLength(2);
    expect(groups.get(2)?.orders).toHaveLength(1);
    expect(malformed).toHaveLength(4);
    // Nothing is acked before its group's write and settle.
    expect(acked).toBe(0);
  });
});
