// A mixed sale in units: shoppers buy 1-3 units each up to perUserLimit, one asks for more than
// is left, orders are paid, cancelled, timed out by the queue and by the cron, a late payment is
// refunded, the returned units sell again, and every invariant of DESIGN.md holds in units.
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refund } from '../../db/schema';
import { closeOverdueOrders } from '../../workers/cron/overdue';
import { bearer, call, devToken, driveTimeouts, eventually, json, reconcileNow, setLimits, settled, sql, tokenFor } from './helpers';
import { answerOf, createRulesGoods, finalResult, liveUnitsByUser, purchaseUnits } from './rules-helpers';

const STOCK = 12;
const PRICE = 500;
const LIMIT = 3;

beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});

type Bought = { userId: string; jwt: string; orderId: string; requestId: string; units: number };

async function buyUnits(goodsId: number, userId: string, units: number): Promise<Bought> {
  const jwt = await devToken(userId);
  const answer = await answerOf(await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), units));
  expect(answer.status, `${userId} buying ${units}`).toBe(202);
  const result = await finalResult(jwt, answer.requestId ?? '');
  expect(result.status).toBe('SUCCESS');
  return { userId, jwt, orderId: result.orderId ?? '', requestId: answer.requestId ?? '', units };
}

async function attempt(goodsId: number, userId: string, units: number) {
  const jwt = await devToken(userId);
  return answerOf(await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), units));
}

function startPayment(b: Bought, outcome: 'succeed' | 'hold') {
  return call(`/api/orders/${b.orderId}/pay`, { method: 'POST', headers: bearer(b.jwt), json: { outcome } }).then((r) =>
    json<{ paymentId: string; amountCents: number; nextAction?: { url: string } }>(r),
  );
}

async function orderStatus(b: Bought): Promise<string> {
  return (await json<{ status: string }>(await call(`/api/orders/${b.orderId}`, { headers: bearer(b.jwt) }))).status;
}

describe(`a mixed sale of ${STOCK} units, up to ${LIMIT} per shopper`, () => {
  it('holds every invariant in units through payments, cancels, timeouts and a refund', async () => {
    const { goodsId } = await createRulesGoods({ stock: STOCK, priceCents: PRICE, perUserLimit: LIMIT });
    const [a, b, c, d, e] = await Promise.all([
      buyUnits(goodsId, 'mu-a', 3),
      buyUnits(goodsId, 'mu-b', 2),
      buyUnits(goodsId, 'mu-c', 2),
      buyUnits(goodsId, 'mu-d', 3),
      buyUnits(goodsId, 'mu-e', 1),
    ]);
    // One unit left: two are refused whole, one is sold, then nothing.
    expect(await attempt(goodsId, 'mu-f', 2)).toEqual({ status: 410, code: 'SOLD_OUT', remaining: 1 });
    const f = await buyUnits(goodsId, 'mu-f', 1);
    expect(await attempt(goodsId, 'mu-g', 1)).toEqual({ status: 410, code: 'SOLD_OUT' });
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: STOCK } });
    if (!a || !b || !c || !d || !e) {
      throw new Error('a purchase is missing');
    }

    // a pays for its three units; b cancels its two; c starts paying and does not finish.
    const paid = await startPayment(a, 'succeed');
    expect(paid.amountCents).toBe(3 * PRICE);
    await eventually(async () => (await orderStatus(a)) === 'PAID');
    expect((await call(`/api/orders/${b.orderId}/cancel`, { method: 'POST', headers: bearer(b.jwt) })).status).toBe(200);
    const held = await startPayment(c, 'hold');
    expect(held.amountCents).toBe(2 * PRICE);

    // Past every deadline: c's timeout message arrives, the cron closes the rest (d, e, f).
    const later = Date.now() + 3600_000;
    expect((await driveTimeouts([{ orderId: c.orderId, goodsId }], later)).explicitAcks).toHaveLength(1);
    expect(await sql((db) => closeOverdueOrders(env, db, later, { goodsId }))).toBe(3);
    // c's payment completes after its order closed: refunded in full, both units.
    const done = await call(held.nextAction?.url ?? '', { method: 'POST', headers: bearer(c.jwt), json: {} });
    expect(await json(done)).toMatchObject({ callbackStatus: 200, callback: { outcome: 'REFUNDED', orderStatus: 'REFUNDED' } });
    const refunds = await sql((db) => db.select().from(refund).where(eq(refund.orderId, c.orderId)));
    expect(refunds.map((r) => r.amountCents)).toEqual([2 * PRICE]);

    const returned = 2 + 2 + 3 + 1 + 1;
    const mid = await settled(goodsId);
    expect(mid).toMatchObject({
      doRemaining: returned,
      dbStock: returned,
      orders: { PAID: 3, PENDING_PAYMENT: 0, CANCELLED: 2, CLOSED_TIMEOUT: 5, REFUNDED: 2 },
      consistent: true,
    });

    // The returned units sell again, to b (free again after its cancel) and to new shoppers.
    const again = await Promise.all([
      buyUnits(goodsId, 'mu-b', 3),
      buyUnits(goodsId, 'mu-h', 3),
      buyUnits(goodsId, 'mu-i', 2),
      buyUnits(goodsId, 'mu-j', 1),
    ]);
    expect(again.reduce((n, x) => n + x.units, 0)).toBe(returned);
    expect(await attempt(goodsId, 'mu-k', 1)).toEqual({ status: 410, code: 'SOLD_OUT' });

    const end = await settled(goodsId);
    // doRemaining + units(PENDING_PAYMENT, PAID) == totalStock; dbStock == doRemaining (and the mirror, when on).
    expect(end).toMatchObject({
      totalStock: STOCK,
      doRemaining: 0,
      dbStock: 0,
      orders: { PAID: 3, PENDING_PAYMENT: returned, CANCELLED: 2, CLOSED_TIMEOUT: 5, REFUNDED: 2 },
      consistent: true,
    });
    expect(end.doRemaining + (end.orders.PAID ?? 0) + (end.orders.PENDING_PAYMENT ?? 0)).toBe(end.totalStock);
    if (end.mirrorStock !== null) {
      expect(end.mirrorStock).toBe(end.doRemaining);
    }
    // Nobody holds more than the limit.
    const units = await liveUnitsByUser(goodsId);
    expect([...units.values()].every((n) => n <= LIMIT)).toBe(true);
    expect(units.get('mu-a')).toBe(3);
    expect(units.get('mu-b')).toBe(3);
    // Reconciliation agrees, in units.
    const report = await reconcileNow(goodsId);
    expect(report.goods[0]).toMatchObject({ goodsId, doRemaining: 0, dbStock: 0, liveOrders: STOCK, consistent: true });
    // Every accepted purchase ended SUCCESS with its order.
    for (const x of [a, b, c, d, e, f, ...again]) {
      expect(await finalResult(x.jwt, x.requestId)).toMatchObject({ status: 'SUCCESS', orderId: x.orderId });
    }
  });
});
