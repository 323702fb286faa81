// The fault switches of the chaos run (workers/kernel/dev-faults.ts, /admin/dev/faults): who may
// set them, and that each one reaches the code it is meant to break, in the goods' object and in
// the order consumer, which share the Worker's isolate here as under Miniflare.
import { createExecutionContext, createMessageBatch, getQueueResult, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { seckillOrder } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import { openChallenge } from '../../workers/edge/signed';
import worker from '../../workers/index';
import type { OrderMessage } from '../../workers/kernel/contract';
import { askObjectReset, guardResetName, resetName } from '../../workers/kernel/dev-faults';
import {
  ADMIN,
  bearer,
  buy,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  setFaults,
  settled,
  sql,
  stockObject,
  stockSnapshot,
} from './helpers';

const FAULTS = '/admin/dev/faults';

afterEach(async () => {
  const res = await setFaults({ queueSendFails: 0, duplicateDeliveries: 0, consumerFailsAfterWrite: 0, consumerPaused: 0 });
  expect(res.status).toBe(200);
});

const holdingQueue = { sendBatch: () => Promise.reject(new Error('held for the test')) } as unknown as Queue;

/** Order messages exactly as the goods' object writes them: reserved with the queue held, read from its outbox. */
async function orderMessages(goodsId: number, users: string[]): Promise<OrderMessage[]> {
  const stub = stockObject(goodsId);
  await runInDurableObject(stub, (instance: GoodsStock) => {
    (instance as unknown as { env: Env }).env = { ...env, ORDER_QUEUE: holdingQueue };
  });
  const outcomes = await stub.reserveMany(
    goodsId,
    users.map((userId, i) => ({
      requestId: `${goodsId}.${String(i).padStart(22, 'f')}`,
      userId,
      tokenId: `fault-token-${goodsId}-${i}`,
      tokenExpiresAt: Date.now() + 60_000,
      keyed: false,
    })),
  );
  expect(outcomes.every((o) => o.ok)).toBe(true);
  return runInDurableObject(stub, (_i, state) =>
    state.storage.sql
      .exec<{ body: string }>('SELECT body FROM outbox ORDER BY seq')
      .toArray()
      .map((r) => JSON.parse(r.body) as OrderMessage),
  );
}

/** A queue that keeps what is sent to it (the consumer's second deliveries) and delivers nothing. */
function recordingQueue() {
  const sent: unknown[] = [];
  const queue = {
    sendBatch: async (messages: Iterable<MessageSendRequest>) => {
      for (const m of messages) {
        sent.push(m.body);
      }
    },
  } as unknown as Queue;
  return { sent, queue };
}

async function deliver(bodies: unknown[], workerEnv: Env) {
  const batch = createMessageBatch(
    'seckill-orders',
    bodies.map((body, i) => ({ id: `fault-${Date.now()}-${i}`, timestamp: new Date(), attempts: 1, body })),
  );
  const ctx = createExecutionContext();
  await worker.queue(batch, workerEnv, ctx);
  return getQueueResult(batch, ctx);
}

describe('the fault switches', () => {
  it('need the admin token, refuse unknown faults, and say what is on', async () => {
    expect((await call(FAULTS)).status).toBe(401);
    expect((await call(FAULTS, { method: 'PUT', json: { queueSendFails: 5 } })).status).toBe(401);
    const unknown = await setFaults({ postgresDown: 5 });
    expect(unknown.status).toBe(400);
    expect((await json<{ error: { code: string } }>(unknown)).error.code).toBe('INVALID_INPUT');
    expect((await setFaults({ queueSendFails: -1 })).status).toBe(400);
    const on = await json<Record<string, number | null>>(await setFaults({ queueSendFails: 30 }));
    expect(on.queueSendFails).toBeGreaterThan(Date.now());
    expect(on.duplicateDeliveries).toBeNull();
    const read = await json<Record<string, number | null>>(await call(FAULTS, { headers: ADMIN }));
    expect(read.queueSendFails).toBe(on.queueSendFails);
  });

  it('queueSendFails keeps accepted reservations in the outbox until it ends', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    expect((await setFaults({ queueSendFails: 60 })).status).toBe(200);
    expect((await buy('fault-send-1', goodsId)).status).toBe(202);
    await runDurableObjectAlarm(stockObject(goodsId));
    expect(await stockSnapshot(goodsId)).toMatchObject({ queued: 1, outboxPending: 1 });
    await setFaults({ queueSendFails: 0 });
    await stockObject(goodsId).redriveOutbox();
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, orders: { PENDING_PAYMENT: 1 } });
  });

  it('reset gives the goods a new object instance that keeps only what was stored', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    expect((await buy('fault-reset-1', goodsId)).status).toBe(202);
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(1);
    const res = await call(`${FAULTS}/reset`, { method: 'POST', headers: ADMIN, json: { goodsId } });
    expect(await json(res)).toEqual({ goodsId, objects: ['stock'], reset: true });
    const after = await stockSnapshot(goodsId);
    expect(after.reserveRequests).toBe(0);
    expect(after.remaining).toBe(3);
    // The reset was a one-off: the next snapshot meets the same instance.
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(0);
    expect((await buy('fault-reset-1', goodsId)).status).toBe(409);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 3, orders: { PENDING_PAYMENT: 1 } });
    const missing = await call(`${FAULTS}/reset`, { method: 'POST', headers: ADMIN, json: { goodsId: 987654321 } });
    expect(missing.status).toBe(404);
  });

  it("a result read that meets the shopper's stock object restarting is 503 UNAVAILABLE, then the result", async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const jwt = await devToken('fault-result-read');
    const bought = await buy('fault-result-read', goodsId, { jwt });
    expect(bought.status).toBe(202);
    const read = () => call(`/api/seckill/result/${String(bought.body.requestId)}`, { headers: bearer(jwt) });
    // The object goes as the read reaches it (a deploy, an eviction): a retry-later answer, not a 500.
    const taken = askObjectReset(resetName(goodsId, { stock: 0 }));
    const during = await read();
    expect(during.status).toBe(503);
    expect(during.headers.get('retry-after')).toBe('1');
    expect(await json(during)).toMatchObject({ error: { code: 'UNAVAILABLE' } });
    expect(taken()).toBe(true);
    const after = await read();
    expect(after.status).toBe(200);
    expect(await json(after)).toMatchObject({ requestId: bought.body.requestId, status: expect.stringMatching(/^(QUEUED|SUCCESS)$/) });
  });

  it('a challenge whose guard shard restarts as it is spent is 503 UNAVAILABLE, and still good for the next try', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const jwt = await devToken('fault-challenge-spend');
    const challenged = await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) });
    expect(challenged.status).toBe(200);
    const { challengeId, prompt } = await json<{ challengeId: string; prompt: string }>(challenged);
    const [a, b] = prompt.match(/\d+/g)?.map(Number) ?? [];
    const sealed = await openChallenge(env.TOKEN_SECRET, challengeId);
    if (!sealed) {
      throw new Error('the challenge does not open with the test secret');
    }
    const answer = () =>
      call(`/api/seckill/goods/${goodsId}/token`, {
        method: 'POST',
        headers: bearer(jwt),
        json: { challengeId, answer: String((a ?? 0) + (b ?? 0)) },
      });
    const taken = askObjectReset(guardResetName(`challenge:${sealed.n}`));
    const during = await answer();
    expect(during.status).toBe(503);
    expect(during.headers.get('retry-after')).toBe('1');
    expect(await json(during)).toMatchObject({ error: { code: 'UNAVAILABLE' } });
    expect(taken()).toBe(true);
    // The shard went before it marked the challenge used: the same answer buys the token now, once.
    expect((await answer()).status).toBe(200);
    expect((await answer()).status).toBe(403);
  });

  it('consumerFailsAfterWrite writes the order, then retries the message instead of acking it', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    await setFaults({ consumerFailsAfterWrite: 60 });
    const [message] = await orderMessages(goodsId, ['fault-crash-1']);
    if (!message) {
      throw new Error('no order message');
    }
    const result = await deliver([message], env);
    expect(result.explicitAcks).toEqual([]);
    expect(result.retryMessages).toHaveLength(1);
    const rows = await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.requestId, message.requestId)));
    expect(rows).toHaveLength(1);
  });

  it('consumerPaused holds a batch unwritten and unacked until the pause ends, then writes it', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const [message] = await orderMessages(goodsId, ['fault-paused-1']);
    if (!message) {
      throw new Error('no order message');
    }
    await setFaults({ consumerPaused: 60 });
    let done = false;
    const delivered = deliver([message], env).then((result) => {
      done = true;
      return result;
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(done).toBe(false);
    const rows = () => sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.requestId, message.requestId)));
    expect(await rows()).toHaveLength(0);
    await setFaults({ consumerPaused: 0 });
    expect((await delivered).explicitAcks).toHaveLength(1);
    expect(await rows()).toHaveLength(1);
  });

  it('duplicateDeliveries sends each order message to the queue once more, and only once', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const { sent, queue } = recordingQueue();
    await setFaults({ duplicateDeliveries: 60 });
    const messages = await orderMessages(goodsId, ['fault-dup-1', 'fault-dup-2']);
    expect(messages).toHaveLength(2);
    await deliver(messages, { ...env, ORDER_QUEUE: queue });
    expect(sent).toEqual(messages);
    // The second delivery is not doubled again.
    await deliver(messages, { ...env, ORDER_QUEUE: queue });
    expect(sent).toHaveLength(2);
    await eventually(async () => {
      const rows = await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)));
      return rows.length === 2;
    });
  });
  it('duplicateDeliveries doubles a pack as a whole, once, and its orders are made once', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const { sent, queue } = recordingQueue();
    await setFaults({ duplicateDeliveries: 60 });
    const pack = { v: 1, kind: 'reserve-pack', goodsId, orders: await orderMessages(goodsId, ['fault-pack-1', 'fault-pack-2']) };
    expect((await deliver([pack], { ...env, ORDER_QUEUE: queue })).explicitAcks).toHaveLength(1);
    expect(sent).toEqual([pack]);
    // The copy arrives: nothing new is made, and it is not doubled again.
    expect((await deliver(sent, { ...env, ORDER_QUEUE: queue })).explicitAcks).toHaveLength(1);
    expect(sent).toHaveLength(1);
    const rows = await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)));
    expect(rows.map((r) => r.userId).sort()).toEqual(['fault-pack-1', 'fault-pack-2']);
  });
});
