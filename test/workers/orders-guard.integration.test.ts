import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, bearer, buyOrder, call, createGoods, devToken, json, paymentCallback, restoreLimits, setLimits, settled } from './helpers';
import { createRulesGoods } from './rules-helpers';

// The order routes are shopper routes like the sale's: the shield, the exact limits and the
// bans apply there too (counted on their own, so reading an order never eats the purchase
// budget), and reading an order opens no Postgres session (SQL over HTTP).

type ErrorBody = { error: { code: string } };

/** Postgres sessions the Worker opened through the local bridge's WebSocket door, so far. */
async function sessionsOpened(): Promise<number> {
  const res = await fetch(`http://${env.PG_WS_PROXY}/stats`);
  return (await res.json<{ sessions: number }>()).sessions;
}

function readOrder(jwt: string, orderId: string, ip?: string): Promise<Response> {
  return call(`/api/orders/${orderId}`, { headers: { ...bearer(jwt), ...(ip ? { 'cf-connecting-ip': ip } : {}) } });
}

afterEach(restoreLimits);

describe('order routes behind the shield, limits and bans', () => {
  it('reads orders without opening a Postgres session; a refused cancel or payment opens none either', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('og-reader', goodsId);
    await settled(goodsId);
    await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000 });
    const before = await sessionsOpened();
    for (let i = 0; i < 20; i++) {
      expect((await readOrder(jwt, orderId)).status).toBe(200);
    }
    const stranger = await devToken('og-stranger');
    expect((await call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(stranger) })).status).toBe(404);
    expect((await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(stranger), json: {} })).status).toBe(404);
    expect(await sessionsOpened()).toBe(before);
    // The cancel itself is an interactive transaction: one session, closed again.
    expect((await call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(jwt) })).status).toBe(200);
    expect(await sessionsOpened()).toBe(before + 1);
  });

  it('answers order reads over the per-shopper limit with 429, without touching the sale budget', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('og-eager', goodsId);
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 2_000 });
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await readOrder(jwt, orderId, '198.51.100.70');
      statuses.push(res.status);
      if (res.status === 429) {
        expect((await json<ErrorBody>(res)).error.code).toBe('RATE_LIMITED');
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      }
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    // The same shopper, from the same address, still has its whole budget on the sale routes.
    const challenge = await call(`/api/seckill/goods/${goodsId}/challenge`, {
      method: 'POST',
      headers: { ...bearer(jwt), 'cf-connecting-ip': '198.51.100.70' },
    });
    expect(challenge.status).toBe(200);
  });

  it("counts the page's fresh eligibility asks as order reads; its plain loads, answered at the edge, not", async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, perUserLimit: 3 });
    const jwt = await devToken('og-fresh');
    const eligibility = (query: string) =>
      call(`/api/seckill/goods/${goodsId}/eligibility${query}`, { headers: { ...bearer(jwt), 'cf-connecting-ip': '198.51.100.71' } });
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 2_000 });
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      statuses.push((await eligibility('?fresh=1')).status);
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    for (let i = 0; i < 5; i++) {
      expect((await eligibility('')).status).toBe(200);
    }
  });

  it('refuses a banned address and a banned shopper on every order route, and bans one that hammers them', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const owner = await buyOrder('og-owner', goodsId);
    const hammer = await buyOrder('og-hammer', goodsId);
    await setLimits({ banThreshold: 5 });
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 2_000 });
    // An address banned on the sale routes...
    const ip = '203.0.113.77';
    const bot = await devToken('og-bot');
    for (let i = 0; i < 8; i++) {
      await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: { ...bearer(bot), 'cf-connecting-ip': ip } });
    }
    // ...is refused on the order routes, whoever signs in from it.
    const routes = [
      () => readOrder(owner.jwt, owner.orderId, ip),
      () =>
        call(`/api/orders/${owner.orderId}/pay`, { method: 'POST', headers: { ...bearer(owner.jwt), 'cf-connecting-ip': ip }, json: {} }),
      () => call(`/api/orders/${owner.orderId}/cancel`, { method: 'POST', headers: { ...bearer(owner.jwt), 'cf-connecting-ip': ip } }),
    ];
    for (const route of routes) {
      const res = await route();
      expect(res.status).toBe(403);
      expect((await json<ErrorBody>(res)).error.code).toBe('BANNED');
    }
    // A shopper hammering its own order is banned too (every request counts, refused ones included).
    const answers: number[] = [];
    for (let i = 0; i < 8; i++) {
      answers.push((await readOrder(hammer.jwt, hammer.orderId, `198.51.100.${80 + i}`)).status);
    }
    expect(answers.slice(-2)).toEqual([403, 403]);
    const fromElsewhere = await readOrder(hammer.jwt, hammer.orderId, '198.51.100.99');
    expect((await json<ErrorBody>(fromElsewhere)).error.code).toBe('BANNED');
    // The payment provider's webhook is not a shopper route: it answers on its signature alone.
    const webhook = await paymentCallback({}, { signature: 'bad' });
    expect((await json<ErrorBody>(webhook)).error.code).not.toBe('BANNED');
    vi.useRealTimers();
    await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { ip } });
    await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { userId: 'og-hammer' } });
    expect((await readOrder(owner.jwt, owner.orderId, ip)).status).toBe(200);
  });
});
