import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { limitsStore } from '../../durable-objects/routing';
import { SHIELD_LIMIT, SHIELD_PERIOD_SECONDS } from '../../workers/edge/client-guard';
import { currentLimits, LIMITS_TTL_MS } from '../../workers/edge/limits';
import { DEFAULT_LIMITS } from '../../workers/kernel/limits';
import { ADMIN, bearer, call, createGoods, devToken, eventually, json, purchase, restoreLimits, setLimits, tokenFor } from './helpers';

type ErrorBody = { error: { code: string; message: string; requestId: string } };

function challenge(jwt: string, goodsId: number, ip?: string): Promise<Response> {
  return call(`/api/seckill/goods/${goodsId}/challenge`, {
    method: 'POST',
    headers: { ...bearer(jwt), ...(ip ? { 'cf-connecting-ip': ip } : {}) },
  });
}

/**
 * Stops the clock (for the Worker and its objects too, which share this isolate) so a burst
 * of sequential requests falls in one window however slow the machine is.
 */
function freezeClock(): void {
  vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
}

afterEach(restoreLimits);

describe('per-IP limit and bans', () => {
  it('answers one address hammering with 429s, then bans it for 10 minutes, and leaves others alone', async () => {
    const { goodsId } = await createGoods();
    const ip = '203.0.113.7';
    const jwts = await Promise.all(Array.from({ length: 10 }, (_, i) => devToken(`hammer-${i}`)));
    const answers: { status: number; code?: string; retryAfter: string | null }[] = [];
    freezeClock();
    for (let i = 0; i < 150; i++) {
      const res = await challenge(jwts[i % jwts.length] ?? '', goodsId, ip);
      const body = res.status === 200 ? undefined : await json<ErrorBody>(res);
      answers.push({ status: res.status, code: body?.error.code, retryAfter: res.headers.get('retry-after') });
    }
    // The first ten pass (10/s per address), the next ninety are rate limited...
    expect(answers.slice(0, 10).every((a) => a.status === 200)).toBe(true);
    const limited = answers.slice(10, 100);
    expect(limited.every((a) => a.status === 429)).toBe(true);
    expect(limited.every((a) => a.code === 'RATE_LIMITED' && Number(a.retryAfter) >= 1)).toBe(true);
    // ...and the 101st request within 10 s gets the address banned, for every request after it.
    const firstBan = answers.findIndex((a) => a.status === 403);
    expect(firstBan).toBe(100);
    expect(answers.slice(firstBan).every((a) => a.status === 403 && a.code === 'BANNED')).toBe(true);
    expect(answers[firstBan]?.retryAfter).toBe('600');
    vi.useRealTimers();

    // Banned on every shopper route, whoever signs in from there.
    const newcomer = await devToken('hammer-newcomer');
    const onGoods = await call(`/api/seckill/goods/${goodsId}`, { headers: { 'cf-connecting-ip': ip } });
    expect(onGoods.status).toBe(403);
    const onPurchase = await call(`/api/seckill/do/${'A'.repeat(32)}`, {
      method: 'POST',
      headers: { ...bearer(newcomer), 'cf-connecting-ip': ip },
      json: { goodsId, token: 'x' },
    });
    expect(onPurchase.status).toBe(403);
    expect(await json(onPurchase)).toMatchObject({ error: { code: 'BANNED' } });

    // Another address is not affected, and the shoppers who used the banned one are not banned.
    expect((await challenge(newcomer, goodsId, '203.0.113.8')).status).toBe(200);
    const bystander = await challenge(jwts[3] ?? '', goodsId, '2001:db8:1:2::9');
    expect(bystander.status === 403 ? await json(bystander) : bystander.status).not.toMatchObject({ error: { code: 'BANNED' } });

    // An operator sees the ban and can lift it.
    const bans = await json<{ bans: { id: string; until: string }[] }>(await call('/admin/limits/bans', { headers: ADMIN }));
    expect(bans.bans.map((b) => b.id)).toContain(`ip:${ip}`);
    const lift = await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { ip } });
    expect(await json(lift)).toMatchObject({ ids: [`ip:${ip}`], lifted: true });
    expect((await challenge(newcomer, goodsId, ip)).status).toBe(200);
  });

  it('limits one shopper to 3 attempts per second per route, from any address', async () => {
    const { goodsId } = await createGoods();
    const jwt = await devToken('eager-shopper');
    const statuses: number[] = [];
    freezeClock();
    for (let i = 0; i < 5; i++) {
      // A made-up path: the limit is counted before anything else is looked at.
      const res = await call(`/api/seckill/do/${'B'.repeat(32)}`, {
        method: 'POST',
        headers: { ...bearer(jwt), 'cf-connecting-ip': `198.51.100.${10 + i}` },
        json: { goodsId, token: 'x' },
      });
      statuses.push(res.status);
      if (res.status === 429) {
        expect(Number(res.headers.get('retry-after'))).toBe(1);
      }
    }
    expect(statuses).toEqual([403, 403, 403, 429, 429]);
    // Other routes have their own window.
    expect((await challenge(jwt, goodsId, '198.51.100.20')).status).toBe(200);
  });

  it('bans a shopper account that hammers from many addresses', async () => {
    const { goodsId } = await createGoods();
    await setLimits({ banThreshold: 20 });
    const jwt = await devToken('many-addresses');
    const statuses: number[] = [];
    freezeClock();
    for (let i = 0; i < 25; i++) {
      statuses.push((await challenge(jwt, goodsId, `192.0.2.${i + 1}`)).status);
    }
    expect(statuses.indexOf(403)).toBe(20);
    const fromElsewhere = await challenge(jwt, goodsId, '192.0.2.200');
    expect(fromElsewhere.status).toBe(403);
    expect(await json(fromElsewhere)).toMatchObject({ error: { code: 'BANNED' } });
    await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { userId: 'many-addresses' } });
    expect((await challenge(jwt, goodsId, '192.0.2.201')).status).toBe(200);
  });
});

describe('answers that come before the limits', () => {
  /** A purchase at a made-up path: the isolate answers a closed or sold-out sale before looking at it. */
  function hammer(goodsId: number, headers: Record<string, string>): Promise<Response> {
    return call(`/api/seckill/do/${'C'.repeat(32)}`, { method: 'POST', headers, json: { goodsId, token: 'x' } });
  }

  it('count toward a ban: an address hammering a sale before its start is banned like any other', async () => {
    const { goodsId } = await createGoods({ startAt: Date.now() + 3_600_000, endAt: Date.now() + 7_200_000 });
    await setLimits({ banThreshold: 20 });
    const ip = '203.0.113.41';
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) {
      statuses.push((await hammer(goodsId, { 'cf-connecting-ip': ip })).status);
    }
    expect(statuses.filter((s) => s === 425).length).toBeGreaterThanOrEqual(20);
    // The counts reach the address' guard shard in the background, within about a second.
    const banned = await eventually(async () => {
      const res = await hammer(goodsId, { 'cf-connecting-ip': ip });
      return res.status === 403 ? json<ErrorBody>(res) : undefined;
    }, 5_000);
    expect(banned.error.code).toBe('BANNED');
    // Banned on every shopper route, and listed for the operator.
    expect((await call(`/api/seckill/goods/${goodsId}`, { headers: { 'cf-connecting-ip': ip } })).status).toBe(403);
    const bans = await json<{ bans: { id: string }[] }>(await call('/admin/limits/bans', { headers: ADMIN }));
    expect(bans.bans.map((b) => b.id)).toContain(`ip:${ip}`);
    // Another address is not affected.
    expect((await hammer(goodsId, { 'cf-connecting-ip': '203.0.113.42' })).status).toBe(425);
    await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { ip } });
  });

  it('count toward a ban of the shopper: keyed retries at a sold-out sale from many addresses', async () => {
    const { goodsId } = await createGoods({ stock: 0 });
    await setLimits({ banThreshold: 20 });
    const jwt = await devToken('sold-out-hammer');
    // The object says SOLD_OUT once; from then on the isolate answers by itself.
    expect((await purchase(jwt, goodsId, await tokenFor(jwt, goodsId), { 'cf-connecting-ip': '192.0.2.150' })).status).toBe(410);
    const keyed = (i: number) =>
      hammer(goodsId, { ...bearer(jwt), 'idempotency-key': `hammer-${i}`, 'cf-connecting-ip': `192.0.2.${160 + (i % 50)}` });
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) {
      statuses.push((await keyed(i)).status);
    }
    expect(statuses.filter((s) => s === 410).length).toBeGreaterThanOrEqual(19);
    const banned = await eventually(async () => {
      const res = await keyed(100);
      return res.status === 403 ? json<ErrorBody>(res) : undefined;
    }, 5_000);
    expect(banned.error.code).toBe('BANNED');
    // The shopper is banned on the sale's other routes too, whatever the address.
    expect((await challenge(jwt, goodsId, '192.0.2.250')).status).toBe(403);
    await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { userId: 'sold-out-hammer' } });
  });
});

describe('the Rate Limiting shield', () => {
  it('stops a flood from one address on every shopper route before any object is asked, while the per-IP limit is low', async () => {
    await setLimits({ perIpPerSecond: SHIELD_LIMIT / SHIELD_PERIOD_SECONDS, banThreshold: 100_000_000 });
    const ip = '203.0.113.99';
    // Unauthenticated requests to no route: only the shield counts them.
    const flood = async () => {
      const res = await call('/api/seckill/nothing', { headers: { 'cf-connecting-ip': ip } });
      return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await json<ErrorBody>(res) };
    };
    let passed = 0;
    let stopped: Awaited<ReturnType<typeof flood>> | undefined;
    // The binding counts in fixed windows, so the flood may straddle two of them.
    while (!stopped && passed <= 2 * SHIELD_LIMIT) {
      const res = await flood();
      if (res.status === 429) {
        stopped = res;
      } else {
        expect(res.status).toBe(404);
        passed++;
      }
    }
    expect(passed).toBeGreaterThanOrEqual(SHIELD_LIMIT);
    expect(stopped?.body.error.code).toBe('RATE_LIMITED');
    expect(stopped?.retryAfter).toBe(String(SHIELD_PERIOD_SECONDS));
    // Raised above what the shield allows (a load test), the shield steps aside.
    await setLimits({ perIpPerSecond: 1000 });
    expect((await flood()).status).toBe(404);
  });
});

describe('runtime limits (PUT /admin/limits)', () => {
  it('starts from the seeds’ defaults and changes any limit without a redeploy', async () => {
    const before = await json(await call('/admin/limits', { headers: ADMIN }));
    expect(before).toMatchObject(DEFAULT_LIMITS);

    const { goodsId } = await createGoods();
    const jwt = await devToken('load-tester');
    // A load test from one machine: raise the limits, then 40 quick requests all pass.
    const raised = await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
    expect(raised).toMatchObject({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000, updatedAt: expect.any(String) });
    const statuses = await Promise.all(Array.from({ length: 40 }, () => challenge(jwt, goodsId, '203.0.113.50').then((r) => r.status)));
    expect(statuses.filter((s) => s === 200)).toHaveLength(40);

    // Lower them again: the next client is held to the new numbers at once.
    await setLimits({ perIpPerSecond: 2, perUserPerSecond: 2 });
    const next = await devToken('load-tester-2');
    const again = [];
    freezeClock();
    for (let i = 0; i < 4; i++) {
      again.push((await challenge(next, goodsId, '203.0.113.51')).status);
    }
    expect(again).toEqual([200, 200, 429, 429]);
  });

  it('reaches isolates that did not make the change within a couple of seconds', async () => {
    const now = Date.now();
    vi.useFakeTimers({ toFake: ['Date'], now });
    expect((await currentLimits(env)).perIpPerSecond).toBe(DEFAULT_LIMITS.perIpPerSecond);
    // Written to the store directly, as another isolate's PUT would be.
    await limitsStore(env).setLimits({ perIpPerSecond: 77 });
    expect((await currentLimits(env)).perIpPerSecond).toBe(DEFAULT_LIMITS.perIpPerSecond);
    vi.setSystemTime(now + LIMITS_TTL_MS);
    expect((await currentLimits(env)).perIpPerSecond).toBe(77);
  });

  it('refuses bad changes with 400, other media types with 415 and strangers with 401', async () => {
    const put = (body: string, headers: Record<string, string> = { ...ADMIN, 'content-type': 'application/json' }) =>
      call('/admin/limits', { method: 'PUT', headers, body });
    for (const bad of [
      '{}',
      '{"perIpPerSecond":0}',
      '{"perIpPerSecond":"5"}',
      '{"perIpPerSecond":2.5}',
      '{"banSeconds":-1}',
      '{"x":1}',
      '[]',
      '{"admissionByGoods":{"0":5}}',
      '{"powDifficulty":33}',
      '{"perIpPerSecond":1e400}',
      '{"perIpPerSecond":',
    ]) {
      const res = await put(bad);
      expect(res.status, bad).toBe(400);
      expect(await json(res)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    }
    expect((await put('{"perIpPerSecond":5}', { ...ADMIN, 'content-type': 'text/plain' })).status).toBe(415);
    expect((await put('{"perIpPerSecond":5}', { 'content-type': 'application/json' })).status).toBe(401);
    expect((await call('/admin/limits', { headers: bearer('wrong-admin-token') })).status).toBe(401);
    // Nothing of the above changed anything.
    expect(await json(await call('/admin/limits', { headers: ADMIN }))).toMatchObject({ perIpPerSecond: DEFAULT_LIMITS.perIpPerSecond });
  });

  it('sets and drops per-goods admission overrides', async () => {
    const set = await setLimits({ admissionByGoods: { '41': 5, '42': 0 } });
    expect(set.admissionByGoods).toEqual({ '41': 5, '42': 0 });
    const dropped = await setLimits({ admissionByGoods: { '41': null, '42': null } });
    expect(dropped.admissionByGoods).toEqual({});
  });
});
