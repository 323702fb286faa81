// A result read held for its final answer (GET /api/seckill/result/:requestId?wait=N, the stock
// object's ResultWaiters): one object call for a shopper's whole wait, answered as soon as the
// order is written or the reservation released, QUEUED when the wait runs out first, held only
// for the request's owner and within its bounds, and a bad `wait` a 400. With the Redis mirror
// on, the mirror's QUEUED is answered at once and no object is called.
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it } from 'vitest';
import { askObjectReset, resetName } from '../../workers/kernel/dev-faults';
import type { ObjectCallsView } from '../../workers/kernel/object-calls';
import {
  ADMIN,
  bearer,
  buy,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  metric,
  mirrorRedis,
  scrape,
  setFaults,
  settled,
  stats,
  stockObject,
  stockSnapshot,
} from './helpers';

/** The Worker's env with the mirror off, so reads reach the stock object whether or not this run mirrors to Redis. */
const NO_MIRROR = { ...env, UPSTASH_REDIS_REST_URL: '', UPSTASH_REDIS_REST_TOKEN: '' } as Env;

type Result = { requestId: string; status: string; orderId?: string; reason?: string };

async function objectCalls(body: Record<string, unknown>): Promise<ObjectCallsView> {
  const res = await call('/admin/dev/faults/object-calls', { method: 'PUT', headers: ADMIN, json: body });
  expect(res.status).toBe(200);
  return json<ObjectCallsView>(res);
}

/** GET the result with `query` (by default with the mirror off), and how long the answer took. */
async function readResult(
  requestId: string,
  jwt: string,
  query = '',
  workerEnv = NO_MIRROR,
): Promise<{ status: number; body: Result; ms: number }> {
  const started = Date.now();
  const res = await call(`/api/seckill/result/${requestId}${query}`, { headers: bearer(jwt), env: workerEnv });
  return { status: res.status, body: await json<Result>(res), ms: Date.now() - started };
}

/** A purchase accepted while the order consumer holds its batches: its result stays QUEUED until the pause ends. */
async function queuedPurchase(userId: string, pauseSeconds: number, stock = 3) {
  const { goodsId } = await createGoods({ stock });
  expect((await setFaults({ consumerPaused: pauseSeconds })).status).toBe(200);
  const jwt = await devToken(userId);
  const { status, body } = await buy(userId, goodsId, { jwt });
  expect(status).toBe(202);
  return { goodsId, jwt, requestId: String(body.requestId) };
}

afterEach(async () => {
  expect((await setFaults({ consumerPaused: 0, queueSendFails: 0 })).status).toBe(200);
  await objectCalls({ watch: false, reset: true });
});

describe('result reads held for the final answer', () => {
  it('answers SUCCESS as soon as the order is written, in one object call for the whole wait', async () => {
    const { goodsId, jwt, requestId } = await queuedPurchase('wait-success', 3);
    await objectCalls({ watch: true, reset: true });
    const held = await readResult(requestId, jwt, '?wait=15');
    expect(held.status).toBe(200);
    expect(held.body).toMatchObject({ requestId, status: 'SUCCESS', orderId: expect.stringMatching(new RegExp(`^${goodsId}-\\d+$`)) });
    // Held while the consumer was paused, and answered at the write, well before the wait's end.
    expect(held.ms).toBeGreaterThan(1_000);
    expect(held.ms).toBeLessThan(12_000);
    const { counts } = await objectCalls({});
    expect(counts.GoodsStock?.result?.calls).toBe(1);
    // Its time is counted as a held read's, apart from the route's latency.
    const heldRoute = { route: '/api/seckill/result/:requestId?wait' };
    const scraped = await eventually(async () => {
      const s = await scrape();
      return metric(s, 'seckill_http_request_duration_ms_count', heldRoute) >= 1 ? s : undefined;
    });
    expect(metric(scraped, 'seckill_http_requests_total', { ...heldRoute, method: 'GET', outcome: 'ok' })).toBeGreaterThanOrEqual(1);
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, orders: { PENDING_PAYMENT: 1 } });
  });

  it('answers QUEUED when the wait runs out first, and at once without a wait', async () => {
    const { goodsId, jwt, requestId } = await queuedPurchase('wait-timeout', 60);
    const now = await readResult(requestId, jwt);
    expect(now.body.status).toBe('QUEUED');
    expect(now.ms).toBeLessThan(900);
    const held = await readResult(requestId, jwt, '?wait=1');
    expect(held.status).toBe(200);
    expect(held.body).toMatchObject({ requestId, status: 'QUEUED' });
    expect(held.ms).toBeGreaterThanOrEqual(950);
    await setFaults({ consumerPaused: 0 });
    const final = await eventually(async () => {
      const r = await readResult(requestId, jwt, '?wait=5');
      return r.body.status === 'SUCCESS' ? r.body : undefined;
    });
    expect(final.orderId).toBeDefined();
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, orders: { PENDING_PAYMENT: 1 } });
  });

  it('answers a held read 503 when its stock shard resets under it, and the next read the final answer', async () => {
    const { goodsId, jwt, requestId } = await queuedPurchase('wait-reset', 60);
    const held = readResult(requestId, jwt, '?wait=15');
    await new Promise((resolve) => setTimeout(resolve, 500));
    // The next call into the shard throws its instance away, and with it the held read.
    askObjectReset(resetName(goodsId, { stock: 0 }));
    await stockObject(goodsId)
      .snapshot()
      .catch(() => undefined);
    const answer = await held;
    expect(answer.status).toBe(503);
    expect((answer.body as unknown as { error: { code: string } }).error.code).toBe('UNAVAILABLE');
    expect(answer.ms).toBeLessThan(10_000);
    expect((await stockSnapshot(goodsId)).heldResultReads).toBe(0);
    await setFaults({ consumerPaused: 0 });
    const final = await readResult(requestId, jwt, '?wait=15');
    expect(final.body).toMatchObject({ requestId, status: 'SUCCESS' });
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 2, orders: { PENDING_PAYMENT: 1 } });
  });

  it('answers a released reservation FAIL as the release commits', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    expect((await setFaults({ queueSendFails: 60 })).status).toBe(200);
    const { status, body } = await buy('wait-release', goodsId);
    expect(status).toBe(202);
    const requestId = String(body.requestId);
    const stub = stockObject(goodsId);
    const started = Date.now();
    const held = stub.result(requestId, { ms: 10_000, userId: 'wait-release' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await stub.release(requestId, 'CLOSED_TIMEOUT')).toMatchObject({ released: true, remaining: 2 });
    expect(await held).toMatchObject({ requestId, status: 'FAIL', reason: 'CLOSED_TIMEOUT' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("holds only its owner's read, and at most four reads of one shopper", async () => {
    const { goodsId, requestId } = await queuedPurchase('wait-owner', 60);
    const stub = stockObject(goodsId);
    let started = Date.now();
    expect(await stub.result(requestId, { ms: 5_000, userId: 'someone-else' })).toMatchObject({ status: 'QUEUED', userId: 'wait-owner' });
    expect(Date.now() - started).toBeLessThan(2_000);
    started = Date.now();
    const reads = Array.from({ length: 5 }, () =>
      stub.result(requestId, { ms: 2_500, userId: 'wait-owner' }).then((view) => ({ view, ms: Date.now() - started })),
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await stockSnapshot(goodsId)).heldResultReads).toBe(4);
    // The stats say so too, for an operator (and the bench's held-read phase).
    expect(await stats(goodsId)).toMatchObject({ heldResultReads: 4 });
    const answered = (await Promise.all(reads)).map((r) => r.ms).sort((a, b) => a - b);
    expect((await stockSnapshot(goodsId)).heldResultReads).toBe(0);
    // The fifth is answered at once; the four others at the end of their wait.
    expect(answered[0]).toBeLessThan(1_500);
    expect(answered[1]).toBeGreaterThanOrEqual(2_400);
  });

  it('refuses a wait it cannot honour with 400 INVALID_INPUT', async () => {
    const { jwt, requestId } = await queuedPurchase('wait-invalid', 60);
    for (const query of ['?wait=21', '?wait=-1', '?wait=1.5', '?wait=soon']) {
      const r = await readResult(requestId, jwt, query);
      expect(r.status, query).toBe(400);
      expect((r.body as unknown as { error: { code: string } }).error.code).toBe('INVALID_INPUT');
    }
    // Someone else's request is still unknown to them, waiting or not.
    expect((await readResult(requestId, await devToken('wait-prober'), '?wait=2')).status).toBe(404);
  });

  it.skipIf(!mirrorRedis())("answers the mirror's QUEUED at once, calling no object", async () => {
    const { jwt, requestId } = await queuedPurchase('wait-mirror', 60);
    const redis = mirrorRedis();
    await eventually(async () => (await redis?.get(`seckill:result:${requestId}`)) === 'QUEUED');
    await objectCalls({ watch: true, reset: true });
    const r = await readResult(requestId, jwt, '?wait=10', env);
    expect(r.body).toMatchObject({ requestId, status: 'QUEUED' });
    expect(r.ms).toBeLessThan(2_000);
    expect((await objectCalls({})).counts.GoodsStock?.result).toBeUndefined();
  });
});
