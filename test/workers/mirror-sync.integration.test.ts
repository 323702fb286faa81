import { env } from 'cloudflare:workers';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { mirrorRetryAt, readStocks } from '../../workers/mirror/client';
import {
  ADMIN,
  bearer,
  buy,
  buyOrder,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  mirrorRedis,
  reconcileNow,
  settled,
  spreadGoodsIds,
  stats,
} from './helpers';

const redis = mirrorRedis();
if (!redis) {
  console.warn('mirror-sync.integration: skipped, set TEST_REDIS_URL=redis://127.0.0.1:6379 to run the Redis mirror tests');
}

type Hash = Record<string, string>;

async function hash(key: string): Promise<Hash> {
  const flat = (await redis?.hgetall(key)) as unknown;
  const out: Hash = {};
  if (Array.isArray(flat)) {
    for (let i = 0; i + 1 < flat.length; i += 2) {
      out[String(flat[i])] = String(flat[i + 1]);
    }
  }
  return out;
}

async function mirrorOf(goodsId: number) {
  return {
    stock: await redis?.get(`seckill:stock:${goodsId}`),
    users: ((await redis?.smembers(`seckill:users:${goodsId}`)) ?? []).map(String).sort(),
    goods: await hash(`seckill:goods:${goodsId}`),
    start: await redis?.get(`seckill:start:${goodsId}`),
    end: await redis?.get(`seckill:end:${goodsId}`),
  };
}

/** Waits until the object has written its mirror (writes happen after the answer, off the request path). */
function mirrorSettled(goodsId: number) {
  return eventually(async () => {
    const s = await stats(goodsId);
    return s.mirror === 'ok' && s.mirrorStock === s.doRemaining && s.queued === 0 && s.consistent ? s : undefined;
  });
}

describe.skipIf(!redis)('Redis mirror', () => {
  beforeAll(spreadGoodsIds);

  it('after a sale equals the object and Postgres: stock, holders, goods, window and every answer', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    const shoppers = ['m-ann', 'm-ben', 'm-cat', 'm-dan', 'm-eve', 'm-fay'];
    const attempts = await Promise.all(
      shoppers.map(async (userId) => {
        const jwt = await devToken(userId);
        return { userId, jwt, ...(await buy(userId, goodsId, { jwt })) };
      }),
    );
    const accepted = attempts.filter((a) => a.status === 202);
    expect(accepted.length).toBe(4);
    expect(attempts.filter((a) => a.status === 410).length).toBe(2);

    await settled(goodsId);
    // The stats as the mirror has caught up (its writes follow the answers).
    const s = await mirrorSettled(goodsId);
    const m = await mirrorOf(goodsId);
    expect(s).toMatchObject({ doRemaining: 0, dbStock: 0, mirrorStock: 0, mirror: 'ok', consistent: true });
    expect(m.stock).toBe('0');
    expect(m.users).toEqual(accepted.map((a) => a.userId).sort());
    expect(m.goods).toMatchObject({ goodsId: String(goodsId), title: 'Test phone', totalStock: '4', paused: '0', priceCents: '100' });
    expect(Number(m.start)).toBeLessThan(Number(m.end));
    expect(m.goods.startAt).toBe(m.start);

    for (const a of accepted) {
      const requestId = String(a.body.requestId);
      // The seed's layout: a plain string a tool reads with GET (a hash here answers WRONGTYPE).
      const result = await eventually(async () => {
        const value = await redis?.get<string>(`seckill:result:${requestId}`);
        return value?.startsWith('SUCCESS:') ? value : undefined;
      });
      expect(await redis?.type(`seckill:result:${requestId}`)).toBe('string');
      expect(await redis?.get(`seckill:result-owner:${requestId}`)).toBe(a.userId);
      // The result route answers the same as the mirror holds.
      const routed = await json(await call(`/api/seckill/result/${requestId}`, { headers: bearer(a.jwt) }));
      expect(routed).toEqual({ requestId, status: 'SUCCESS', orderId: result.slice('SUCCESS:'.length) });
      // A final answer and its owner are kept for a day, not the short QUEUED lifetime.
      expect(await redis?.ttl(`seckill:result:${requestId}`)).toBeGreaterThan(3600);
      expect(await redis?.ttl(`seckill:result-owner:${requestId}`)).toBeGreaterThan(3600);
    }
  });

  it('follows a cancellation: the unit comes back, the holder leaves, the answer stays SUCCESS', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, requestId, jwt } = await buyOrder('m-gil', goodsId);
    await buyOrder('m-hal', goodsId);
    await mirrorSettled(goodsId);
    expect((await mirrorOf(goodsId)).users).toEqual(['m-gil', 'm-hal']);

    const cancelled = await call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(jwt) });
    expect(cancelled.status).toBe(200);
    const s = await mirrorSettled(goodsId);
    expect(s.doRemaining).toBe(1);
    const m = await mirrorOf(goodsId);
    expect(m.stock).toBe('1');
    expect(m.users).toEqual(['m-hal']);
    expect(await redis?.get(`seckill:result:${requestId}`)).toBe(`SUCCESS:${orderId}`);
  });

  it('follows a pause and a resume in the goods hash', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    await mirrorSettled(goodsId);
    expect((await call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN })).status).toBe(200);
    await eventually(async () => (await hash(`seckill:goods:${goodsId}`)).paused === '1');
    expect((await call(`/admin/goods/${goodsId}/resume`, { method: 'POST', headers: ADMIN })).status).toBe(200);
    await eventually(async () => (await hash(`seckill:goods:${goodsId}`)).paused === '0');
  });

  it('serves results from the mirror first, checking the owner there too, and falls back to the object when it has none', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const owner = await devToken('m-ida');
    const stranger = await devToken('m-jon');
    // A request only the mirror knows: the route can have answered from nowhere else.
    const requestId = `${goodsId}.mirrorOnlyRequest00001`;
    await redis?.set(`seckill:result:${requestId}`, 'FAIL:SOLD_OUT', { ex: 60 });
    await redis?.set(`seckill:result-owner:${requestId}`, 'm-ida', { ex: 60 });
    const mine = await call(`/api/seckill/result/${requestId}`, { headers: bearer(owner) });
    expect(mine.status).toBe(200);
    expect(await json(mine)).toEqual({ requestId, status: 'FAIL', reason: 'SOLD_OUT' });
    expect((await call(`/api/seckill/result/${requestId}`, { headers: bearer(stranger) })).status).toBe(404);

    // An entry the route cannot trust (an unknown reason) sends it to the object, which knows nothing.
    // (Another request: the final answer above is now this isolate's to give, whatever the mirror says.)
    const untrusted = `${goodsId}.mirrorOnlyRequest00002`;
    await redis?.set(`seckill:result:${untrusted}`, 'FAIL:GREMLINS', { ex: 60 });
    await redis?.set(`seckill:result-owner:${untrusted}`, 'm-ida', { ex: 60 });
    expect((await call(`/api/seckill/result/${untrusted}`, { headers: bearer(owner) })).status).toBe(404);

    // A real purchase whose mirror entry is gone is still answered, by the object.
    const { body } = await buy('m-kim', goodsId, { jwt: await devToken('m-kim') });
    await settled(goodsId);
    await redis?.del(`seckill:result:${String(body.requestId)}`);
    const fallback = await call(`/api/seckill/result/${String(body.requestId)}`, { headers: bearer(await devToken('m-kim')) });
    expect(await json(fallback)).toMatchObject({ status: 'SUCCESS' });
  });

  it('reads a hash an older build left under a result key as absent, and the next final answer replaces it', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const jwt = await devToken('m-old');
    const { body } = await buy('m-old', goodsId, { jwt, idempotencyKey: 'old-layout-1' });
    const requestId = String(body.requestId);
    await settled(goodsId);
    await mirrorSettled(goodsId);
    // The layout of the previous version: one hash holding the answer and the owner.
    await redis?.del(`seckill:result:${requestId}`, `seckill:result-owner:${requestId}`);
    await redis?.hset(`seckill:result:${requestId}`, { result: 'FAIL:SOLD_OUT', userId: 'm-old' });
    const read = await call(`/api/seckill/result/${requestId}`, { headers: bearer(jwt) });
    expect(read.status).toBe(200);
    // Not the hash's FAIL: the object's own answer.
    expect(await json(read)).toMatchObject({ requestId, status: 'SUCCESS' });
    // Reconciliation's repair (here after a lost stock key) rewrites the answer as the seed's string.
    await redis?.del(`seckill:stock:${goodsId}`);
    await reconcileNow(goodsId);
    expect(await redis?.type(`seckill:result:${requestId}`)).toBe('string');
    expect(await redis?.get(`seckill:result:${requestId}`)).toMatch(/^SUCCESS:/);
    expect(await redis?.get(`seckill:result-owner:${requestId}`)).toBe('m-old');
  });

  it("shows the goods' remaining stock from the mirror, and from the object when the mirror lacks it, each figure kept a second", async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    await mirrorSettled(goodsId);
    await redis?.set(`seckill:stock:${goodsId}`, '3');
    const fromMirror = await json<{ remaining: number }>(await call(`/api/seckill/goods/${goodsId}`));
    expect(fromMirror.remaining).toBe(3);
    await redis?.del(`seckill:stock:${goodsId}`);
    // Within a second the page answers the figure it read (kept in the isolate and the data center).
    expect((await json<{ remaining: number }>(await call(`/api/seckill/goods/${goodsId}`))).remaining).toBe(3);
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 1_100 });
    let fromObject: { remaining: number };
    try {
      fromObject = await json<{ remaining: number }>(await call(`/api/seckill/goods/${goodsId}`));
    } finally {
      vi.useRealTimers();
    }
    expect(fromObject.remaining).toBe(5);
    // Put it right for whatever runs next.
    await reconcileNow(goodsId);
    expect(await redis?.get(`seckill:stock:${goodsId}`)).toBe('5');
  });

  it("reads the mirror for the stats even while a shopper read's failure holds the mirror off", async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    expect((await buy('m-op', goodsId)).status).toBe(202);
    await mirrorSettled(goodsId);
    // A shopper-facing read that fails (here: a wrong token for the same Redis) opens the
    // isolate's breaker, so shopper reads skip the mirror for a while.
    const url = String(env.UPSTASH_REDIS_REST_URL);
    expect(await readStocks({ url, token: 'not-the-token' }, [goodsId])).toBeUndefined();
    expect(mirrorRetryAt({ url, token: 'not-the-token' })).toBeGreaterThan(0);
    // The operator's stats still ask Redis, and their answer closes the breaker again.
    const s = await stats(goodsId);
    expect(s).toMatchObject({ mirror: 'ok', mirrorStock: 2, doRemaining: 2, consistent: true });
    expect(mirrorRetryAt({ url, token: String(env.UPSTASH_REDIS_REST_TOKEN) })).toBe(0);
  });

  it('keeps user ids as strings (a numeric id is not turned into a number)', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const { requestId } = await buyOrder('12345', goodsId);
    await mirrorSettled(goodsId);
    expect(await redis?.get(`seckill:result-owner:${requestId}`)).toBe('12345');
    expect((await mirrorOf(goodsId)).users).toEqual(['12345']);
    const res = await call(`/api/seckill/result/${requestId}`, { headers: bearer(await devToken('12345')) });
    expect((await json(res)).status).toBe('SUCCESS');
  });
});
