// Quantities and the per-shopper limit: concurrent purchases of one shopper never hold more than
// perUserLimit units, a quantity above the units left is refused whole with the units left, and
// the orders, payments and stock all count units.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, bearer, call, devToken, eventually, json, metric, scrape, setLimits, settled, stats, tokenFor } from './helpers';
import { answerOf, createRulesGoods, finalResult, liveUnitsByUser, purchaseUnits, shopperWithTokens } from './rules-helpers';

// One shopper fires many purchases in one second here; the per-shopper rate is not what these test.
beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});

describe('perUserLimit', () => {
  it('one shopper firing purchases at once never holds more than the limit, in one or several purchases', async () => {
    const { goodsId } = await createRulesGoods({ stock: 50, perUserLimit: 3 });
    const ones = await shopperWithTokens('lim-ones', goodsId, 6);
    const twos = await shopperWithTokens('lim-twos', goodsId, 4);
    const answers = await Promise.all([
      ...ones.tokens.map((t) => purchaseUnits(ones.jwt, goodsId, t, 1).then(answerOf)),
      ...twos.tokens.map((t) => purchaseUnits(twos.jwt, goodsId, t, 2).then(answerOf)),
    ]);
    const onesAnswers = answers.slice(0, 6);
    const twosAnswers = answers.slice(6);
    // Three single units fit; a quantity of 2 fits once (2 + 2 > 3).
    expect(onesAnswers.filter((a) => a.status === 202)).toHaveLength(3);
    expect(twosAnswers.filter((a) => a.status === 202)).toHaveLength(1);
    for (const a of [...onesAnswers, ...twosAnswers].filter((x) => x.status !== 202)) {
      expect(a).toMatchObject({ status: 409, code: 'LIMIT_REACHED' });
    }
    const s = await settled(goodsId);
    expect(s).toMatchObject({ totalStock: 50, doRemaining: 45, dbStock: 45, orders: { PENDING_PAYMENT: 5 }, consistent: true });
    const units = await liveUnitsByUser(goodsId);
    expect(units.get('lim-ones')).toBe(3);
    expect(units.get('lim-twos')).toBe(2);
    // The shopper at the limit is refused again; the one with room takes its last unit.
    expect(await answerOf(await purchaseUnits(ones.jwt, goodsId, await tokenFor(ones.jwt, goodsId), 1))).toMatchObject({
      status: 409,
      code: 'LIMIT_REACHED',
    });
    expect((await purchaseUnits(twos.jwt, goodsId, await tokenFor(twos.jwt, goodsId), 1)).status).toBe(202);
    expect((await settled(goodsId)).doRemaining).toBe(44);
  });

  it('a quantity racing the last units is refused whole with the units left, never part-filled', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, perUserLimit: 3, priceCents: 250 });
    const shoppers = await Promise.all(['race-a', 'race-b', 'race-c'].map((u) => shopperWithTokens(u, goodsId, 1)));
    const answers = await Promise.all(
      shoppers.map((s) => purchaseUnits(s.jwt, goodsId, s.tokens[0] as { token: string; path: string }, 2).then(answerOf)),
    );
    const won = answers.filter((a) => a.status === 202);
    expect(won).toHaveLength(2);
    // The third asked for 2 with 1 left: SOLD_OUT, and it says how many are left.
    expect(answers.find((a) => a.status !== 202)).toEqual({ status: 410, code: 'SOLD_OUT', remaining: 1 });
    // Not sold out: the last unit is still for sale, even at the edge that answered.
    const last = await shopperWithTokens('race-d', goodsId, 2);
    expect((await purchaseUnits(last.jwt, goodsId, last.tokens[0] as { token: string; path: string }, 1)).status).toBe(202);
    const after = await answerOf(await purchaseUnits(last.jwt, goodsId, last.tokens[1] as { token: string; path: string }, 1));
    expect(after).toEqual({ status: 410, code: 'SOLD_OUT' });
    const s = await settled(goodsId);
    expect(s).toMatchObject({ totalStock: 5, doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 5 }, consistent: true });

    // An order of 2 units: the order says so, and its payment is for both.
    const winner = shoppers[answers.findIndex((a) => a.status === 202)];
    const requestId = won[0]?.requestId ?? '';
    if (!winner) {
      throw new Error('no winner');
    }
    const result = await finalResult(winner.jwt, requestId);
    expect(result.status).toBe('SUCCESS');
    const order = await json<{ quantity: number; priceCents: number; amountCents: number }>(
      await call(`/api/orders/${result.orderId}`, { headers: bearer(winner.jwt) }),
    );
    expect(order).toMatchObject({ quantity: 2, priceCents: 250, amountCents: 500 });
    const pay = await call(`/api/orders/${result.orderId}/pay`, { method: 'POST', headers: bearer(winner.jwt), json: { outcome: 'hold' } });
    expect(pay.status).toBe(200);
    expect(await json(pay)).toMatchObject({ amountCents: 500 });
  });

  it('cancelling an order of several units gives all of them back and lets the shopper buy again', async () => {
    const { goodsId } = await createRulesGoods({ stock: 4, perUserLimit: 3 });
    const s = await shopperWithTokens('cancel-3', goodsId, 2);
    const first = await answerOf(await purchaseUnits(s.jwt, goodsId, s.tokens[0] as { token: string; path: string }, 3));
    expect(first.status).toBe(202);
    const result = await finalResult(s.jwt, first.requestId ?? '');
    expect((await settled(goodsId)).doRemaining).toBe(1);
    // The metrics count the purchase once and its units three times.
    const goods_id = String(goodsId);
    const m = await eventually(async () => {
      const scraped = await scrape();
      return metric(scraped, 'seckill_units_reserved_total', { goods_id }) === 3 ? scraped : undefined;
    });
    expect(metric(m, 'seckill_reservations_total', { goods_id, outcome: 'accepted' })).toBe(1);
    expect((await call(`/api/orders/${result.orderId}/cancel`, { method: 'POST', headers: bearer(s.jwt) })).status).toBe(200);
    const back = await settled(goodsId);
    expect(back).toMatchObject({ doRemaining: 4, dbStock: 4, orders: { CANCELLED: 3 }, consistent: true });
    expect((await purchaseUnits(s.jwt, goodsId, s.tokens[1] as { token: string; path: string }, 3)).status).toBe(202);
    expect((await settled(goodsId)).doRemaining).toBe(1);
  });

  it('a goods made without rules keeps one unit per shopper: a second purchase is ALREADY_PURCHASED', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5 });
    const s = await shopperWithTokens('plain-1', goodsId, 2);
    const view = await json<{ perUserLimit: number; limitScope: string; eligibility: string }>(await call(`/api/seckill/goods/${goodsId}`));
    expect(view).toMatchObject({ perUserLimit: 1, limitScope: 'goods', eligibility: 'open' });
    expect((await purchaseUnits(s.jwt, goodsId, s.tokens[0] as { token: string; path: string }, 1)).status).toBe(202);
    expect(await answerOf(await purchaseUnits(s.jwt, goodsId, s.tokens[1] as { token: string; path: string }, 1))).toMatchObject({
      status: 409,
      code: 'ALREADY_PURCHASED',
    });
    expect((await stats(goodsId)).doRemaining).toBe(4);
  });

  it('a changed limit reaches the object at once', async () => {
    const { goodsId } = await createRulesGoods({ stock: 10, perUserLimit: 1, limitScope: 'goods', eligibility: 'open' });
    const jwt = await devToken('raise-1');
    expect((await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), 1)).status).toBe(202);
    const put = await call(`/admin/goods/${goodsId}`, {
      method: 'PUT',
      headers: ADMIN,
      json: { perUserLimit: 2 },
    });
    expect(put.status).toBe(200);
    expect(await json(put)).toMatchObject({ perUserLimit: 2 });
    expect((await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), 1)).status).toBe(202);
    expect(await answerOf(await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), 1))).toMatchObject({
      status: 409,
      code: 'LIMIT_REACHED',
    });
    expect((await settled(goodsId)).orders).toMatchObject({ PENDING_PAYMENT: 2 });
  });
});
