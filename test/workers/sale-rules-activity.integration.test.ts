// limitScope "activity", the seed's UNIQUE(user_id, activity_id): one live order per shopper
// across the activity's goods. Each goods' object sees only its own sale, so two purchases of
// one shopper on two goods at the same moment are both accepted there; Postgres' partial unique
// index lets one become an order, the other FAILs LIMIT_REACHED and its unit goes back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, call, devToken, eventually, setLimits, settled, tokenFor, tokenResponse } from './helpers';
import { answerOf, createRulesGoods, finalResult, freshActivity, liveUnitsByUser, purchaseUnits } from './rules-helpers';

beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});

async function twoGoods(stock: number, perUserLimit = 1) {
  const activityId = freshActivity();
  const a = await createRulesGoods({ stock, activityId, limitScope: 'activity', perUserLimit });
  const b = await createRulesGoods({ stock, activityId, limitScope: 'activity', perUserLimit });
  return { activityId, a: a.goodsId, b: b.goodsId };
}

describe('limitScope activity', () => {
  it('one shopper buying two goods of one activity at the same moment: one order, the other LIMIT_REACHED and its unit back', async () => {
    const { a, b } = await twoGoods(3, 2);
    const jwt = await devToken('act-race');
    // Both tokens first: neither goods has an order of this shopper yet, so the token route lets both through.
    const [ta, tb] = [await tokenFor(jwt, a), await tokenFor(jwt, b)];
    const answers = await Promise.all([purchaseUnits(jwt, a, ta, 2).then(answerOf), purchaseUnits(jwt, b, tb, 1).then(answerOf)]);
    expect(answers.map((x) => x.status)).toEqual([202, 202]);
    const results = await Promise.all(answers.map((x) => finalResult(jwt, x.requestId ?? '')));
    const wins = results.filter((r) => r.status === 'SUCCESS');
    const losses = results.filter((r) => r.status === 'FAIL');
    expect(wins).toHaveLength(1);
    expect(losses).toEqual([{ requestId: expect.any(String), status: 'FAIL', reason: 'LIMIT_REACHED' }]);

    // Both goods settle consistent: the loser's unit is for sale again, the winner's units are sold.
    const [sa, sb] = await Promise.all([settled(a), settled(b)]);
    const winnerIsA = results[0]?.status === 'SUCCESS';
    expect(sa).toMatchObject({ doRemaining: winnerIsA ? 1 : 3, dbStock: winnerIsA ? 1 : 3, consistent: true });
    expect(sb).toMatchObject({ doRemaining: winnerIsA ? 3 : 2, dbStock: winnerIsA ? 3 : 2, consistent: true });
    const held = [...(await liveUnitsByUser(a)).values(), ...(await liveUnitsByUser(b)).values()];
    expect(held).toHaveLength(1);

    // Now that the order is in Postgres, the token route refuses the other goods as soon as the
    // isolate's copy of the activity's holders is renewed (a second or two).
    const other = winnerIsA ? b : a;
    const tokenAnswer = async () => answerOf(await tokenResponse(jwt, other));
    await eventually(async () => (await tokenAnswer()).status === 409, 4_000, 200);
    expect(await tokenAnswer()).toMatchObject({ status: 409, code: 'LIMIT_REACHED' });

    // Cancelled, the order frees the shopper for the whole activity again.
    const orderId = wins[0]?.orderId ?? '';
    expect((await call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(jwt) })).status).toBe(200);
    await settled(winnerIsA ? a : b);
    expect((await purchaseUnits(jwt, other, await tokenFor(jwt, other), 1)).status).toBe(202);
    const after = await settled(other);
    expect(after.orders).toMatchObject({ PENDING_PAYMENT: 1 });
  });

  it('the same goods twice: the object refuses a second live purchase with LIMIT_REACHED', async () => {
    const { a } = await twoGoods(5, 3);
    const jwt = await devToken('act-same');
    const [t1, t2] = [await tokenFor(jwt, a), await tokenFor(jwt, a)];
    const answers = await Promise.all([purchaseUnits(jwt, a, t1, 1).then(answerOf), purchaseUnits(jwt, a, t2, 1).then(answerOf)]);
    expect(answers.map((x) => x.status).sort()).toEqual([202, 409]);
    expect(answers.find((x) => x.status === 409)?.code).toBe('LIMIT_REACHED');
    expect((await settled(a)).doRemaining).toBe(4);
  });

  it('shoppers racing across the activity: nobody ends with two live orders in it', async () => {
    const { a, b } = await twoGoods(20);
    const shoppers = await Promise.all(
      Array.from({ length: 6 }, async (_, i) => {
        const jwt = await devToken(`act-many-${i}`);
        return { jwt, ta: await tokenFor(jwt, a), tb: await tokenFor(jwt, b) };
      }),
    );
    const answers = await Promise.all(shoppers.flatMap((s) => [purchaseUnits(s.jwt, a, s.ta, 1), purchaseUnits(s.jwt, b, s.tb, 1)]));
    expect(answers.every((r) => r.status === 202)).toBe(true);
    const [sa, sb] = await Promise.all([settled(a), settled(b)]);
    const units = [...(await liveUnitsByUser(a)).entries(), ...(await liveUnitsByUser(b)).entries()];
    const perShopper = new Map<string, number>();
    for (const [user, n] of units) {
      perShopper.set(user, (perShopper.get(user) ?? 0) + n);
    }
    expect(perShopper.size).toBe(6);
    expect([...perShopper.values()].every((n) => n === 1)).toBe(true);
    expect(sa.doRemaining + sb.doRemaining).toBe(40 - 6);
    expect(sa.consistent && sb.consistent).toBe(true);
  });
});
