import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { seckillOrder } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import { QUEUE_SEND_MS } from '../../durable-objects/goods-stock/outbox';
import type { ReserveItem } from '../../workers/kernel/contract';
import { createGoods, eventually, settled, sql, stockObject } from './helpers';

let seq = 0;
function item(goodsId: number, userId: string, overrides: Partial<ReserveItem> = {}): ReserveItem {
  seq++;
  return {
    requestId: `${goodsId}.${String(seq).padStart(22, 'r')}`,
    userId,
    tokenId: `token-${seq}-${userId}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: false,
    ...overrides,
  };
}

/** Replaces the object's queue binding (the object reads this.env at send time). */
function swapQueue(instance: GoodsStock, queue: Queue): void {
  (instance as unknown as { env: Env }).env = { ...env, ORDER_QUEUE: queue };
}

const failingQueue = {
  send: () => Promise.reject(new Error('queue unavailable')),
  sendBatch: () => Promise.reject(new Error('queue unavailable')),
  metrics: () => Promise.reject(new Error('queue unavailable')),
} as unknown as Queue;

describe('GoodsStock', () => {
  it('sells exactly min(N, S) to N concurrent shoppers and nobody twice', async () => {
    const { goodsId } = await createGoods({ stock: 25 });
    const stub = stockObject(goodsId);
    // 60 shoppers, each trying three times at once, in batches and alone, all concurrently.
    const users = Array.from({ length: 60 }, (_, i) => `u${i}`);
    const calls = users.flatMap((u) => [
      stub.reserveMany(goodsId, [item(goodsId, u)]),
      stub.reserveMany(goodsId, [item(goodsId, u), item(goodsId, `${u}-x`)]),
      stub.reserveMany(goodsId, [item(goodsId, u)]),
    ]);
    const outcomes = (await Promise.all(calls)).flat();
    const accepted = outcomes.filter((o) => o.ok);
    expect(accepted).toHaveLength(25);
    const buyers = await Promise.all(accepted.map((o) => stub.result(o.requestId)));
    const userIds = buyers.map((b) => b?.userId);
    expect(new Set(userIds).size).toBe(25);
    const reasons = new Set(outcomes.filter((o) => !o.ok).map((o) => (o.ok ? '' : o.reason)));
    expect([...reasons].sort()).toEqual(['ALREADY_PURCHASED', 'SOLD_OUT']);
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 25 } });
  });

  it('answers a repeated request id with the first answer, taking one unit', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const stub = stockObject(goodsId);
    const first = item(goodsId, 'ann', { keyed: true });
    const [a] = await stub.reserveMany(goodsId, [first]);
    const [b] = await stub.reserveMany(goodsId, [{ ...first, tokenId: 'another-token' }]);
    expect(a).toMatchObject({ ok: true, replay: false });
    expect(b).toMatchObject({ ok: true, replay: true, orderId: a?.ok ? a.orderId : '' });
    // A keyed rejection is remembered too.
    const sold = item(goodsId, 'ann', { keyed: true });
    const [c] = await stub.reserveMany(goodsId, [sold]);
    const [d] = await stub.reserveMany(goodsId, [sold]);
    expect(c).toMatchObject({ ok: false, reason: 'ALREADY_PURCHASED' });
    expect(d).toMatchObject({ ok: false, reason: 'ALREADY_PURCHASED', replay: true });
    expect((await stub.snapshot())?.remaining).toBe(1);
  });

  it('spends a token once, even across requests', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const stub = stockObject(goodsId);
    const [a] = await stub.reserveMany(goodsId, [item(goodsId, 'bo', { tokenId: 'shared-token' })]);
    const [b] = await stub.reserveMany(goodsId, [item(goodsId, 'cy', { tokenId: 'shared-token' })]);
    expect(a?.ok).toBe(true);
    expect(b).toMatchObject({ ok: false, reason: 'TOKEN_INVALID' });
  });

  it('keeps a reservation whose queue send failed in the outbox and delivers it from the alarm', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const stub = stockObject(goodsId);
    await runInDurableObject(stub, (instance: GoodsStock) => swapQueue(instance, failingQueue));
    const [o] = await stub.reserveMany(goodsId, [item(goodsId, 'dee')]);
    expect(o?.ok).toBe(true);
    await eventually(async () => ((await stub.snapshot())?.outboxPending === 1 ? true : undefined));
    expect(await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)))).toHaveLength(0);

    // The queue works again: the next alarm sends what was left.
    await runInDurableObject(stub, (instance: GoodsStock) => swapQueue(instance, env.ORDER_QUEUE));
    await runInDurableObject(stub, async (_instance, state) => {
      // The retry is due now rather than after its backoff.
      state.storage.sql.exec('UPDATE outbox SET next_at = 0');
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 1 }, outboxPending: 0 });
  });

  it('gives up a queue send that never answers: the flush ends, and the row goes out on the re-drive', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const stub = stockObject(goodsId);
    // The queue takes the batch and never answers, until the test lets it land (late).
    const held: { batch: MessageSendRequest[]; land: () => void }[] = [];
    const silentQueue = {
      sendBatch: (batch: Iterable<MessageSendRequest>) => new Promise<void>((resolve) => held.push({ batch: [...batch], land: resolve })),
    } as unknown as Queue;
    await runInDurableObject(stub, (instance: GoodsStock) => swapQueue(instance, silentQueue));
    const [o] = await stub.reserveMany(goodsId, [item(goodsId, 'fay')]);
    expect(o?.ok).toBe(true);
    await eventually(async () => (held.length > 0 ? true : undefined));
    // A flush asked for now joins the one held on the queue: it ends at the deadline, where it
    // had waited for good, and with it the reconciler's re-drive and every later flush.
    const started = Date.now();
    await stub.flushOutbox();
    const tookMs = Date.now() - started;
    expect(tookMs).toBeLessThan(QUEUE_SEND_MS + 2_000);
    expect(await stub.snapshot()).toMatchObject({ outboxPending: 1, queued: 1 });

    await runInDurableObject(stub, (instance: GoodsStock) => swapQueue(instance, env.ORDER_QUEUE));
    // The re-drive sends the row now, or (when the retry's alarm took the silent queue first and
    // the re-drive joined that flush) the retry after it does.
    expect((await stub.redriveOutbox()).before).toBe(1);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 1 } });

    // The given-up send lands after all: a second copy of the order, which the consumer drops.
    for (const send of held) {
      await env.ORDER_QUEUE.sendBatch(send.batch);
      send.land();
    }
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 1 }, consistent: true });
    expect(await sql((db) => db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId)))).toHaveLength(1);
  }, 60_000);

  it('loses nothing when the object is evicted with unsent reservations', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    const stub = stockObject(goodsId);
    await runInDurableObject(stub, (instance: GoodsStock) => swapQueue(instance, failingQueue));
    const outcomes = await stub.reserveMany(goodsId, [item(goodsId, 'e1'), item(goodsId, 'e2'), item(goodsId, 'e3')]);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    // The instance is thrown away (as on eviction or a crash); storage stays. A fresh
    // instance has the real queue binding again.
    await runInDurableObject(stub, (_instance, state) => state.abort('evicted by the test')).catch(() => undefined);
    const fresh = stockObject(goodsId);
    expect((await fresh.snapshot())?.outboxPending).toBe(3);
    await runInDurableObject(fresh, (_i, state) => {
      state.storage.sql.exec('UPDATE outbox SET next_at = 0');
    });
    expect(await runDurableObjectAlarm(fresh)).toBe(true);
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 1, dbStock: 1, orders: { PENDING_PAYMENT: 3 } });
  });

  it('gives a released unit back and lets the shopper buy again, once', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const stub = stockObject(goodsId);
    const first = item(goodsId, 'fay');
    expect((await stub.reserveMany(goodsId, [first]))[0]?.ok).toBe(true);
    await settled(goodsId);
    expect(await stub.release(first.requestId, 'CANCELLED')).toEqual({ released: true, remaining: 1 });
    expect(await stub.release(first.requestId, 'CANCELLED')).toEqual({ released: false, remaining: 1 });
    expect((await stub.reserveMany(goodsId, [item(goodsId, 'fay')]))[0]?.ok).toBe(true);
    expect((await stub.snapshot())?.remaining).toBe(0);
  });

  it('initialises itself from Postgres on first use (no pre-warm)', async () => {
    const { goodsId } = await createGoods({ stock: 7 });
    // A second object for the same goods id in another namespace name is not possible; instead
    // wipe this one's sale and let the next reservation load it again.
    const stub = stockObject(goodsId);
    await runInDurableObject(stub, (instance, state) => {
      state.storage.sql.exec('DELETE FROM sale');
      (instance as unknown as { sale: undefined }).sale = undefined;
    });
    expect(await stub.snapshot()).toBeUndefined();
    const [o] = await stub.reserveMany(goodsId, [item(goodsId, 'gil')]);
    expect(o?.ok).toBe(true);
    expect((await stub.snapshot())?.remaining).toBe(6);
    const [missing] = await stockObject(987654321).reserveMany(987654321, [item(987654321, 'gil')]);
    expect(missing).toMatchObject({ ok: false, reason: 'NOT_FOUND' });
  });
});
