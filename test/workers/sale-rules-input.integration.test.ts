// Bad sale-rule input is a 400 INVALID_INPUT in the contract's error shape, never a 5xx: the
// purchase's quantity, and the goods' perUserLimit, limitScope and eligibility.
import { describe, expect, it } from 'vitest';
import { ADMIN, call, devToken, json, stats, tokenFor } from './helpers';
import { createRulesGoods } from './rules-helpers';

type ErrorBody = { error: { code: string; message: string; requestId: string } };

function goodsBody(extra: Record<string, unknown>) {
  const now = Date.now();
  return { activityId: 1, title: 'Bad rules', priceCents: 1, stock: 1, startAt: now, endAt: now + 60_000, ...extra };
}

describe('sale rules input', () => {
  it('refuses a purchase quantity of 0, 101, "x", 1.5, null or above the goods limit with 400, taking nothing', async () => {
    const { goodsId } = await createRulesGoods({ stock: 10, perUserLimit: 2 });
    const jwt = await devToken('bad-qty');
    // A refused body never reaches the object, so one token serves every attempt.
    const t = await tokenFor(jwt, goodsId);
    for (const quantity of [0, 101, 'x', 1.5, null, -1, 3]) {
      const res = await call(`/api/seckill/do/${t.path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${jwt}` },
        json: { goodsId, token: t.token, quantity },
      });
      expect(res.status, JSON.stringify(quantity)).toBe(400);
      const body = await json<ErrorBody>(res);
      expect(body.error.code).toBe('INVALID_INPUT');
      expect(body.error.message).toContain('quantity');
      expect(typeof body.error.requestId).toBe('string');
    }
    expect((await stats(goodsId)).doRemaining).toBe(10);
    // The same token still buys: nothing above spent it.
    const ok = await call(`/api/seckill/do/${t.path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${jwt}` },
      json: { goodsId, token: t.token, quantity: 2 },
    });
    expect(ok.status).toBe(202);
  });

  it('refuses perUserLimit 0, 101, 1.5 or "2", and an unknown limitScope or eligibility, on create and on change', async () => {
    const bad = [
      { perUserLimit: 0 },
      { perUserLimit: 101 },
      { perUserLimit: 1.5 },
      { perUserLimit: '2' },
      { limitScope: 'user' },
      { limitScope: null },
      { eligibility: 'members' },
      { eligibility: true },
    ];
    const { goodsId } = await createRulesGoods({ stock: 1 });
    for (const extra of bad) {
      const created = await call('/admin/goods', { method: 'POST', headers: ADMIN, json: goodsBody(extra) });
      expect(created.status, JSON.stringify(extra)).toBe(400);
      expect((await json<ErrorBody>(created)).error.code).toBe('INVALID_INPUT');
      const changed = await call(`/admin/goods/${goodsId}`, { method: 'PUT', headers: ADMIN, json: extra });
      expect(changed.status, JSON.stringify(extra)).toBe(400);
      expect((await json<ErrorBody>(changed)).error.code).toBe('INVALID_INPUT');
    }
    // The edges of the range are fine.
    for (const perUserLimit of [1, 100]) {
      const ok = await call('/admin/goods', { method: 'POST', headers: ADMIN, json: goodsBody({ perUserLimit, limitScope: 'activity' }) });
      expect(ok.status).toBe(201);
      expect(await json(ok)).toMatchObject({ perUserLimit, limitScope: 'activity', eligibility: 'open' });
    }
  });

  it('asks a shopper for sign-in before telling eligibility, and 404s an unknown goods', async () => {
    const { goodsId } = await createRulesGoods({ stock: 1 });
    expect((await call(`/api/seckill/goods/${goodsId}/eligibility`)).status).toBe(401);
    const jwt = await devToken('elig-404');
    const res = await call('/api/seckill/goods/999999999/eligibility', { headers: { authorization: `Bearer ${jwt}` } });
    expect(res.status).toBe(404);
    expect((await json<ErrorBody>(res)).error.code).toBe('NOT_FOUND');
    const open = await call(`/api/seckill/goods/${goodsId}/eligibility`, { headers: { authorization: `Bearer ${jwt}` } });
    expect(await json(open)).toEqual({ eligible: true, perUserLimit: 1, held: 0 });
  });
});
