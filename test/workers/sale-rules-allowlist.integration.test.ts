// eligibility "allowlist": PUT /admin/goods/:goodsId/allowlist loads the list into Postgres and
// the goods' object; the token route and the waiting room refuse shoppers off the list (403
// NOT_ELIGIBLE), and the object refuses them again where the unit is taken, even with a token.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, bearer, call, devToken, json, setLimits, settled, stockObject, tokenFor } from './helpers';
import { answerOf, changeAllowlist, createRulesGoods, purchaseUnits } from './rules-helpers';

beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});

/** The token step alone, so its refusal is seen (tokenFor expects a 200). */
async function tokenAnswer(jwt: string, goodsId: number) {
  const ch = await json<{ challengeId: string; prompt: string }>(
    await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) }),
  );
  const [a, b] = ch.prompt.match(/\d+/g)?.map(Number) ?? [];
  return answerOf(
    await call(`/api/seckill/goods/${goodsId}/token`, {
      method: 'POST',
      headers: bearer(jwt),
      json: { challengeId: ch.challengeId, answer: String((a ?? 0) + (b ?? 0)) },
    }),
  );
}

/** The page's eligibility answer; `fresh` as the page asks right after the shopper's own order changed (Postgres', not the edge's copies). */
function eligibility(jwt: string, goodsId: number, fresh = false) {
  return call(`/api/seckill/goods/${goodsId}/eligibility${fresh ? '?fresh=1' : ''}`, { headers: bearer(jwt) });
}

/** The ids the goods' object holds on its list. */
function objectList(goodsId: number): Promise<number> {
  return stockObject(goodsId)
    .changeAllowlist([], [])
    .then((r) => r.count);
}

describe('eligibility allowlist', () => {
  it('refuses outsiders at the token and at the object, and lets listed shoppers buy', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist', perUserLimit: 2 });
    const put = await changeAllowlist(goodsId, { add: ['al-in', 'al-gone', 'al-in'] });
    expect(put.status).toBe(200);
    expect(await json(put)).toEqual({ count: 2 });
    expect(await objectList(goodsId)).toBe(2);

    const insider = await devToken('al-in');
    const outsider = await devToken('al-out');
    expect(await tokenAnswer(outsider, goodsId)).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    expect(await json(await eligibility(outsider, goodsId))).toEqual({ eligible: false, perUserLimit: 2, held: 0 });
    expect(await json(await eligibility(insider, goodsId))).toEqual({ eligible: true, perUserLimit: 2, held: 0 });
    expect((await purchaseUnits(insider, goodsId, await tokenFor(insider, goodsId), 2)).status).toBe(202);

    // A token minted while on the list, used after being taken off it: the object refuses.
    const gone = await devToken('al-gone');
    const goneToken = await tokenFor(gone, goodsId);
    const removed = await changeAllowlist(goodsId, { remove: ['al-gone'] });
    expect(await json(removed)).toEqual({ count: 1 });
    expect(await answerOf(await purchaseUnits(gone, goodsId, goneToken, 1))).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });

    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 3, dbStock: 3, orders: { PENDING_PAYMENT: 2 }, consistent: true });
    expect(await json(await eligibility(insider, goodsId, true))).toEqual({ eligible: true, perUserLimit: 2, held: 2 });
  });

  it('the waiting room admits only listed shoppers', async () => {
    const { goodsId } = await createRulesGoods({ stock: 3, eligibility: 'allowlist', queue: { mode: 'always', admitPerSecond: 5 } });
    await changeAllowlist(goodsId, { add: ['room-in'] });
    const join = (jwt: string) => call(`/api/seckill/goods/${goodsId}/queue`, { method: 'POST', headers: bearer(jwt) });
    expect(await answerOf(await join(await devToken('room-out')))).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    expect((await join(await devToken('room-in'))).status).toBe(200);
  });

  it('an open goods ignores the list; switching it to allowlist takes effect at the object', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'open', perUserLimit: 1 });
    const a = await devToken('sw-a');
    const tokenA = await tokenFor(a, goodsId);
    const put = await call(`/admin/goods/${goodsId}`, { method: 'PUT', headers: ADMIN, json: { eligibility: 'allowlist' } });
    expect(await json(put)).toMatchObject({ eligibility: 'allowlist' });
    // Minted while the goods was open; refused now, where the unit is taken.
    expect(await answerOf(await purchaseUnits(a, goodsId, tokenA, 1))).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    expect((await stockObject(goodsId).snapshot())?.remaining).toBe(5);
  });

  it('loads 100,000 ids in one change', async () => {
    const { goodsId } = await createRulesGoods({ stock: 1, eligibility: 'allowlist' });
    const ids = Array.from({ length: 100_000 }, (_, i) => `bulk-${i}`);
    const started = Date.now();
    const res = await changeAllowlist(goodsId, { add: ids });
    const ms = Date.now() - started;
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ count: 100_000 });
    expect(await objectList(goodsId)).toBe(100_000);
    console.log(`allowlist: 100,000 ids loaded into Postgres and the goods' object in ${ms} ms`);
    // The last of them may buy; someone else may not.
    expect((await tokenAnswer(await devToken('bulk-99999'), goodsId)).status).toBe(200);
    expect(await tokenAnswer(await devToken('bulk-100000'), goodsId)).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
  });

  it('answers bad allowlist changes with 400, and an unknown goods with 404', async () => {
    const { goodsId } = await createRulesGoods({ stock: 1, eligibility: 'allowlist' });
    for (const body of [{ add: 'x' }, { add: [''] }, { add: ['has space'] }, { remove: [1] }, { add: [], extra: true }, []]) {
      const res = await changeAllowlist(goodsId, body as { add?: unknown });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(await json(res)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    }
    expect((await changeAllowlist(999_999_999, { add: ['x'] })).status).toBe(404);
    const anon = await call(`/admin/goods/${goodsId}/allowlist`, { method: 'PUT', json: { add: ['x'] } });
    expect(anon.status).toBe(401);
  });
});
