import { env } from 'cloudflare:test';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { acquirePermit, enterInFlight } from '../../workers/edge/admission';
import { SOLD_OUT_TRUST_MS } from '../../workers/edge/sold-out';
import { objectCalls, setObjectCalls } from '../../workers/kernel/object-calls';
import { TokenBucket } from '../../workers/kernel/token-bucket';
import {
  ADMIN,
  bearer,
  buyOrder,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  purchase,
  setLimits,
  settled,
  stockSnapshot,
  tokenFor,
} from './helpers';

type Shopper = { userId: string; jwt: string; t: { token: string; path: string } };

/** Shoppers holding a purchase token each, ready to press "buy" together. */
async function shoppersWithTokens(prefix: string, goodsId: number, n: number): Promise<Shopper[]> {
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const userId = `${prefix}-${i}`;
      const jwt = await devToken(userId);
      return { userId, jwt, t: await tokenFor(jwt, goodsId) };
    }),
  );
}

async function codeOf(res: Response): Promise<string> {
  return res.status === 202 ? 'QUEUED' : (await json<{ error: { code: string } }>(res)).error.code;
}

// Several of these tests fire many purchases in the same second from one test process; the
// per-address and per-shopper limits are not what they are about.
beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('admission control', () => {
  it('a lowered admission rate caps what reaches the goods object; the rest get 503 BUSY at once', async () => {
    const { goodsId } = await createGoods({ stock: 100 });
    const shoppers = await shoppersWithTokens('adm', goodsId, 30);
    await setLimits({ admissionByGoods: { [goodsId]: 5 } });
    const before = (await stockSnapshot(goodsId)).reserveRequests;

    const started = Date.now();
    const answers = await Promise.all(shoppers.map((s) => purchase(s.jwt, goodsId, s.t)));
    const elapsedMs = Date.now() - started;
    const reached = (await stockSnapshot(goodsId)).reserveRequests - before;
    const codes = await Promise.all(answers.map(codeOf));

    // 5 per second, at most a tenth of a second's worth at once.
    expect(reached).toBeGreaterThanOrEqual(1);
    expect(reached).toBeLessThanOrEqual(TokenBucket.capacity(5) + Math.ceil((5 * elapsedMs) / 1000));
    expect(codes.filter((c) => c === 'QUEUED')).toHaveLength(reached);
    expect(codes.filter((c) => c === 'BUSY')).toHaveLength(30 - reached);
    const busy = answers.find((r) => r.status === 503);
    expect(Number(busy?.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);

    // Raised again: the shoppers turned away retry with the same token and get in.
    await setLimits({ admissionByGoods: { [goodsId]: null } });
    const turnedAway = shoppers.filter((_, i) => codes[i] === 'BUSY');
    for (const s of turnedAway) {
      const res = await eventually(async () => {
        const r = await purchase(s.jwt, goodsId, s.t);
        return r.status === 503 ? undefined : r;
      }, 5_000);
      expect(res.status).toBe(202);
    }
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 70, dbStock: 70, consistent: true });
  });

  it("an isolate's first purchase of a goods does not wait on the gate; the share comes behind it and serves the rest", async () => {
    // Every object call 400 ms away: a purchase that waited on the gate would wait that long
    // before it even reached its stock object.
    const DELAY = 400;
    setObjectCalls({ watch: true, delayMs: DELAY, reset: true });
    try {
      const goods = { id: 987_020, locationHint: null };
      const background: Promise<unknown>[] = [];
      const waitUntil = (p: Promise<unknown>) => {
        background.push(p);
      };
      const started = Date.now();
      await acquirePermit(env, goods, 1000, waitUntil);
      expect(Date.now() - started).toBeLessThan(DELAY);
      // The one right behind it, before the share is in: it waits for that renewal to bring
      // the share, never admitted on its own, and does not ask the gate a second time.
      const second = Date.now();
      await acquirePermit(env, goods, 1000, waitUntil);
      expect(Date.now() - second).toBeGreaterThanOrEqual(DELAY - 150);
      await Promise.all(background);
      const asked = objectCalls().counts.AdmissionGate?.share?.calls ?? 0;
      expect(asked).toBe(1);
      // With the share in hand the next ones ask nobody.
      const third = Date.now();
      await acquirePermit(env, goods, 1000, waitUntil);
      await acquirePermit(env, goods, 1000, waitUntil);
      expect(Date.now() - third).toBeLessThan(DELAY);
      expect(objectCalls().counts.AdmissionGate?.share?.calls).toBe(asked);
    } finally {
      setObjectCalls({ watch: false, delayMs: 0, reset: true });
    }
  });

  it('rate 0 closes the gate: every purchase is BUSY and nothing reaches the object', async () => {
    const { goodsId } = await createGoods({ stock: 10 });
    const shoppers = await shoppersWithTokens('closed', goodsId, 5);
    await setLimits({ admissionByGoods: { [goodsId]: 0 } });
    try {
      const before = (await stockSnapshot(goodsId)).reserveRequests;
      const codes = await Promise.all(shoppers.map((s) => purchase(s.jwt, goodsId, s.t).then(codeOf)));
      expect(codes).toEqual(Array(5).fill('BUSY'));
      expect((await stockSnapshot(goodsId)).reserveRequests).toBe(before);
    } finally {
      await setLimits({ admissionByGoods: { [goodsId]: null } });
    }
  });

  it('answers BUSY at once when too many purchases of this isolate are already waiting on the object', async () => {
    const { goodsId } = await createGoods({ stock: 10 });
    const [s] = await shoppersWithTokens('inflight', goodsId, 1);
    if (!s) {
      throw new Error('no shopper');
    }
    await setLimits({ inFlightPerGoods: 1 });
    try {
      // One purchase already waiting on the object (held here, as a slow object would).
      const leave = enterInFlight(goodsId, 1);
      const before = (await stockSnapshot(goodsId)).reserveRequests;
      const refused = await purchase(s.jwt, goodsId, s.t);
      expect(await codeOf(refused)).toBe('BUSY');
      expect((await stockSnapshot(goodsId)).reserveRequests).toBe(before);
      leave();
      expect((await purchase(s.jwt, goodsId, s.t)).status).toBe(202);
    } finally {
      await setLimits({ inFlightPerGoods: 200 });
    }
  });
});

describe('answers the edge gives without the object', () => {
  it('a paused goods answers 423 PAUSED; resumed, it sells', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const [s] = await shoppersWithTokens('paused', goodsId, 1);
    if (!s) {
      throw new Error('no shopper');
    }
    expect((await call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN })).status).toBe(200);
    const before = (await stockSnapshot(goodsId)).reserveRequests;
    const paused = await purchase(s.jwt, goodsId, s.t);
    expect(paused.status).toBe(423);
    expect(await codeOf(paused)).toBe('PAUSED');
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(before);
    // A keyed retry may be owed an earlier answer, so it asks the object, which says the same.
    const keyed = await purchase(s.jwt, goodsId, s.t, { 'idempotency-key': 'paused-1' });
    expect(keyed.status).toBe(423);
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(before + 1);

    expect((await call(`/admin/goods/${goodsId}/resume`, { method: 'POST', headers: ADMIN })).status).toBe(200);
    const fresh = await tokenFor(s.jwt, goodsId);
    expect((await purchase(s.jwt, goodsId, fresh)).status).toBe(202);
  });

  it('after sell-out, purchases do not reach the object; a unit that comes back is sold again', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const crowd = await shoppersWithTokens('crowd', goodsId, 21);
    const first = await buyOrder('sold-1', goodsId);
    await buyOrder('sold-2', goodsId);
    const [late, ...rest] = crowd;
    if (!late) {
      throw new Error('no shopper');
    }
    // The object says SOLD_OUT once...
    const r0 = (await stockSnapshot(goodsId)).reserveRequests;
    expect(await codeOf(await purchase(late.jwt, goodsId, late.t))).toBe('SOLD_OUT');
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(r0 + 1);
    // ...and the twenty behind it are answered at the edge.
    const codes = await Promise.all(rest.map((s) => purchase(s.jwt, goodsId, s.t).then(codeOf)));
    expect(codes).toEqual(Array(20).fill('SOLD_OUT'));
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(r0 + 1);
    // No new purchase tokens are issued for it either.
    const ch = await json<{ challengeId: string; prompt: string }>(
      await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(late.jwt) }),
    );
    const [a = 0, b = 0] = ch.prompt.match(/\d+/g)?.map(Number) ?? [];
    const token = await call(`/api/seckill/goods/${goodsId}/token`, {
      method: 'POST',
      headers: bearer(late.jwt),
      json: { challengeId: ch.challengeId, answer: String(a + b) },
    });
    expect(token.status).toBe(410);

    // A shopper cancels: the unit is back in the object...
    expect((await call(`/api/orders/${first.orderId}/cancel`, { method: 'POST', headers: bearer(first.jwt) })).status).toBe(200);
    expect((await stockSnapshot(goodsId)).remaining).toBe(1);
    const [x, y] = rest;
    if (!x || !y) {
      throw new Error('no shoppers');
    }
    // ...and once the isolate's trust in SOLD_OUT runs out, one request re-checks and buys it.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + SOLD_OUT_TRUST_MS });
    expect(await codeOf(await purchase(x.jwt, goodsId, x.t))).toBe('QUEUED');
    expect(await codeOf(await purchase(y.jwt, goodsId, y.t))).toBe('SOLD_OUT');
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(r0 + 3);
    vi.useRealTimers();
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 0, dbStock: 0, consistent: true });
    expect(s.orders).toMatchObject({ PENDING_PAYMENT: 2, CANCELLED: 1 });
  });

  it('before the sale starts, purchases are answered 425 NOT_STARTED without the object', async () => {
    const { goodsId } = await createGoods({ startAt: Date.now() + 3_600_000, endAt: Date.now() + 7_200_000 });
    const jwt = await devToken('early-bird');
    const t = await tokenFor(jwt, goodsId);
    const before = (await stockSnapshot(goodsId)).reserveRequests;
    const res = await purchase(jwt, goodsId, t);
    expect(res.status).toBe(425);
    expect((await stockSnapshot(goodsId)).reserveRequests).toBe(before);
  });
});
