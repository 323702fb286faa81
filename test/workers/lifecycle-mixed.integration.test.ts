import { env } from 'cloudflare:workers';
import { and, eq, inArray, sql as raw } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { ORDER_STATUS, payment, refund, seckillOrder } from '../../db/schema';
import { closeOverdueOrders } from '../../workers/cron/overdue';
import {
  bearer,
  buyOrder,
  call,
  createGoods,
  driveTimeouts,
  eventually,
  json,
  ORDER_POLL_MS,
  orderOf,
  paymentCallback,
  settled,
  sql,
  tryBuy,
} from './helpers';

const STOCK = 10;
const PRICE = 990;

type Shopper = { userId: string; orderId: string; jwt: string; requestId: string };

async function startPayment(s: Shopper, outcome: 'succeed' | 'hold') {
  const res = await call(`/api/orders/${s.orderId}/pay`, { method: 'POST', headers: bearer(s.jwt), json: { outcome } });
  expect(res.status).toBe(200);
  return json<{ paymentId: string; nextAction?: { url: string } }>(res);
}

function cancel(s: Shopper) {
  return call(`/api/orders/${s.orderId}/cancel`, { method: 'POST', headers: bearer(s.jwt) });
}

describe(`a mixed run: ${STOCK} units, ${2 * STOCK} shoppers, every way an order can end`, () => {
  it('keeps the invariants and sells every returned unit again', async () => {
    const { goodsId } = await createGoods({ stock: STOCK, priceCents: PRICE });
    // The first half buys out the stock.
    const first = await Promise.all(
      Array.from({ length: STOCK }, async (_, i) => ({ userId: `mix-a${i}`, ...(await buyOrder(`mix-a${i}`, goodsId)) })),
    );
    expect(await tryBuy('mix-b0', goodsId)).toMatchObject({ status: 410, code: 'SOLD_OUT' });
    const [p0, p1, p2, c0, c1, t0, t1, t2, late0, late1] = first as [
      Shopper,
      Shopper,
      Shopper,
      Shopper,
      Shopper,
      Shopper,
      Shopper,
      Shopper,
      Shopper,
      Shopper,
    ];

    // Three pay at once through the sandbox.
    await Promise.all([p0, p1, p2].map((s) => startPayment(s, 'succeed')));
    await eventually(
      async () => {
        const statuses = await Promise.all([p0, p1, p2].map((s) => orderOf(s.jwt, s.orderId)));
        return statuses.every((o) => o.status === 'PAID');
      },
      30_000,
      ORDER_POLL_MS,
    );

    // Two cancel; two start paying but do not finish yet.
    expect((await Promise.all([cancel(c0), cancel(c1)])).map((r) => r.status)).toEqual([200, 200]);
    const held0 = await startPayment(late0, 'hold');
    const held1 = await startPayment(late1, 'hold');
    expect((await cancel(late1)).status).toBe(200);

    // Time passes beyond every deadline: two timeout messages arrive, the cron catches the rest.
    const later = Date.now() + 3600_000;
    const paidAndTimedOut = [p0, p1, p2, t0, t1].map((s) => ({ orderId: s.orderId, goodsId }));
    expect((await driveTimeouts(paidAndTimedOut, later)).explicitAcks).toHaveLength(5);
    expect(await sql((db) => closeOverdueOrders(env, db, later, { goodsId }))).toBe(2); // t2 and late0
    expect((await orderOf(t2.jwt, t2.orderId)).status).toBe('CLOSED_TIMEOUT');

    // The two held payments complete now, after their orders closed: both are refunded.
    for (const [held, owner] of [
      [held0, late0],
      [held1, late1],
    ] as const) {
      const done = await call(held.nextAction?.url ?? '', { method: 'POST', headers: bearer(owner.jwt), json: {} });
      expect(await json(done)).toMatchObject({ callbackStatus: 200, callback: { outcome: 'REFUNDED', orderStatus: 'REFUNDED' } });
    }
    // A provider retrying a payment it already reported changes nothing.
    const p0Payment = await sql(async (db) => (await db.select().from(payment).where(eq(payment.orderId, p0.orderId)))[0]);
    const replay = await paymentCallback({
      eventId: 'evt_mixed_new_id',
      paymentId: p0Payment?.id,
      orderId: p0.orderId,
      status: 'SUCCEEDED',
      amountCents: PRICE,
    });
    expect(await json(replay)).toMatchObject({ outcome: 'IGNORED' });

    const mid = await settled(goodsId);
    const returned = 2 + 3 + 2;
    expect(mid).toMatchObject({
      doRemaining: returned,
      dbStock: returned,
      orders: { PAID: 3, PENDING_PAYMENT: 0, CANCELLED: 2, CLOSED_TIMEOUT: 3, REFUNDED: 2 },
    });

    // The returned units sell again: one to a shopper whose order was cancelled, the rest to the second half.
    const again = [{ userId: c0.userId, ...(await buyOrder(c0.userId, goodsId)) }];
    for (let i = 1; i < returned; i++) {
      again.push({ userId: `mix-b${i}`, ...(await buyOrder(`mix-b${i}`, goodsId)) });
    }
    expect(await tryBuy(`mix-b${returned}`, goodsId)).toMatchObject({ status: 410, code: 'SOLD_OUT' });

    const end = await settled(goodsId);
    expect(end).toMatchObject({
      totalStock: STOCK,
      doRemaining: 0,
      dbStock: 0,
      orders: { PAID: 3, PENDING_PAYMENT: returned, CANCELLED: 2, CLOSED_TIMEOUT: 3, REFUNDED: 2 },
      consistent: true,
    });

    await sql(async (db) => {
      // Nobody holds two live orders.
      const doubles = await db
        .select({ userId: seckillOrder.userId, n: raw<number>`count(*)::int` })
        .from(seckillOrder)
        .where(and(eq(seckillOrder.goodsId, goodsId), inArray(seckillOrder.status, [ORDER_STATUS.PENDING_PAYMENT, ORDER_STATUS.PAID])))
        .groupBy(seckillOrder.userId)
        .having(raw`count(*) > 1`);
      expect(doubles).toEqual([]);
      // Exactly the late payments were refunded, in full.
      const orderIds = [...first, ...again].map((s) => s.orderId);
      const refunds = await db.select().from(refund).where(inArray(refund.orderId, orderIds));
      expect(refunds.map((r) => [r.paymentId, r.amountCents, r.reason]).sort()).toEqual(
        [
          [held0.paymentId, PRICE, 'ORDER_CLOSED_TIMEOUT'],
          [held1.paymentId, PRICE, 'ORDER_CANCELLED'],
        ].sort(),
      );
      expect(refunds.every((r) => r.status === 'SUCCEEDED' || r.status === 'PENDING')).toBe(true);
      const live = await db
        .select({ n: raw<number>`count(*)::int` })
        .from(seckillOrder)
        .where(and(eq(seckillOrder.goodsId, goodsId), inArray(seckillOrder.status, [ORDER_STATUS.PENDING_PAYMENT, ORDER_STATUS.PAID])));
      expect(live[0]?.n).toBe(STOCK);
    });
    // The provider confirmed both refunds.
    await eventually(async () => {
      const rows = await sql((db) =>
        db
          .select()
          .from(refund)
          .where(inArray(refund.paymentId, [held0.paymentId, held1.paymentId])),
      );
      return rows.length === 2 && rows.every((r) => r.status === 'SUCCEEDED');
    });
    // Every accepted request ended SUCCESS with its order.
    for (const s of [...first, ...again]) {
      const r = await json<{ status: string; orderId?: string }>(
        await call(`/api/seckill/result/${s.requestId}`, { headers: bearer(s.jwt) }),
      );
      expect(r).toMatchObject({ status: 'SUCCESS', orderId: s.orderId });
    }
  });
});
