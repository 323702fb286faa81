import { eq, inArray } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { ORDER_STATUS, payment, paymentEvent, refund, seckillOrder } from '../../db/schema';
import { bearer, buyOrder, call, createGoods, driveTimeouts, eventually, json, paymentCallback, settled, sql } from './helpers';

const ORDERS = 30;
/** Orders raced at once; each race is two concurrent writers, so this bounds the connections. */
const WAVE = 10;
const PRICE = 777;
/** Thirty shoppers' purchases, payments and races take a while on a busy machine. */
const RACE_TIMEOUT_MS = 180_000;

type Racer = { orderId: string; jwt: string; paymentId: string };

async function inWaves<T>(items: T[], work: (item: T, i: number) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += WAVE) {
    await Promise.all(items.slice(i, i + WAVE).map((item, j) => work(item, i + j)));
  }
}

/** `ORDERS` shoppers with an order each and a payment started at the provider (not finished). */
async function racers(goodsId: number, prefix: string): Promise<Racer[]> {
  const bought: { orderId: string; jwt: string }[] = [];
  await inWaves(
    Array.from({ length: ORDERS }, (_, i) => i),
    async (i) => {
      bought.push(await buyOrder(`${prefix}-${i}`, goodsId));
    },
  );
  const out: Racer[] = [];
  // One at a time: the setup is not what is raced here.
  for (const { orderId, jwt } of bought) {
    const res = await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(jwt), json: { outcome: 'hold' } });
    expect(res.status).toBe(200);
    out.push({ orderId, jwt, paymentId: (await json<{ paymentId: string }>(res)).paymentId });
  }
  return out;
}

/** Waits until the provider confirmed every refund of the goods (so no refund is left in flight). */
function refundsConfirmed(goodsId: number, expected: number) {
  return eventually(async () => {
    const rows = (await outcomes(goodsId)).flatMap((o) => o.refunds);
    return rows.length === expected && rows.every((r) => r.status === 'SUCCEEDED');
  });
}

function succeeded(r: Racer) {
  return { eventId: `evt_race_${r.paymentId}`, paymentId: r.paymentId, orderId: r.orderId, status: 'SUCCEEDED', amountCents: PRICE };
}

/** Every order of the goods with its payment, refunds and events, straight from Postgres. */
async function outcomes(goodsId: number) {
  return sql(async (db) => {
    const orders = await db.select().from(seckillOrder).where(eq(seckillOrder.goodsId, goodsId));
    const ids = orders.map((o) => o.id);
    const [payments, refunds, events] = await Promise.all([
      db.select().from(payment).where(inArray(payment.orderId, ids)),
      db.select().from(refund).where(inArray(refund.orderId, ids)),
      db.select().from(paymentEvent).where(inArray(paymentEvent.orderId, ids)),
    ]);
    return orders.map((o) => ({
      order: o,
      payments: payments.filter((p) => p.orderId === o.id),
      refunds: refunds.filter((r) => r.orderId === o.id),
      events: events.filter((e) => e.orderId === o.id),
    }));
  });
}

describe('a payment and a close racing for the same order', () => {
  it(
    `ends each of ${ORDERS} orders PAID, or closed on timeout and refunded, never both and never neither`,
    async () => {
      const { goodsId } = await createGoods({ stock: ORDERS, priceCents: PRICE });
      const all = await racers(goodsId, 'race-timeout');
      // Past every deadline of this goods (900 s windows), as the delayed message would arrive.
      const now = Date.now() + 3600_000;
      await inWaves(all, async (r, i) => {
        const callback = () => paymentCallback(succeeded(r));
        const timeout = () => driveTimeouts([{ orderId: r.orderId, goodsId }], now);
        // Alternate which writer starts first, so either can win.
        const [a, b] = i % 2 === 0 ? await Promise.all([callback(), timeout()]) : (await Promise.all([timeout(), callback()])).reverse();
        expect((a as Response).status).toBe(200);
        expect((b as { explicitAcks: string[] }).explicitAcks).toHaveLength(1);
      });

      const rows = await outcomes(goodsId);
      expect(rows).toHaveLength(ORDERS);
      let paid = 0;
      let refunded = 0;
      for (const { order, payments, refunds, events } of rows) {
        expect(payments).toHaveLength(1);
        expect(events).toHaveLength(1);
        if (order.status === ORDER_STATUS.PAID) {
          paid++;
          expect(order.closedAt).toBeNull();
          expect(order.paidAt).not.toBeNull();
          expect(payments[0]?.status).toBe('SUCCEEDED');
          expect(refunds).toHaveLength(0);
          expect(events[0]?.outcome).toBe('PAID');
        } else {
          refunded++;
          expect(order.status).toBe(ORDER_STATUS.REFUNDED);
          expect(order.closedAt).not.toBeNull();
          expect(order.paidAt).toBeNull();
          expect(payments[0]?.status).toBe('REFUNDED');
          expect(refunds.map((x) => [x.paymentId, x.amountCents, x.reason])).toEqual([[payments[0]?.id, PRICE, 'ORDER_CLOSED_TIMEOUT']]);
          expect(events[0]?.outcome).toBe('REFUNDED');
        }
      }
      expect(paid + refunded).toBe(ORDERS);
      console.log(JSON.stringify({ race: 'callback-vs-timeout', paid, refunded }));
      // A unit came back for each order that closed, and only for those.
      const s = await settled(goodsId);
      expect(s).toMatchObject({ doRemaining: refunded, dbStock: refunded, orders: { PAID: paid, REFUNDED: refunded, PENDING_PAYMENT: 0 } });
      await refundsConfirmed(goodsId, refunded);
    },
    RACE_TIMEOUT_MS,
  );

  it(
    `ends each of ${ORDERS} orders PAID (the cancel refused) or cancelled and refunded`,
    async () => {
      const { goodsId } = await createGoods({ stock: ORDERS, priceCents: PRICE });
      const all = await racers(goodsId, 'race-cancel');
      const cancelStatus = new Map<string, number>();
      await inWaves(all, async (r, i) => {
        const callback = () => paymentCallback(succeeded(r));
        const cancel = () => call(`/api/orders/${r.orderId}/cancel`, { method: 'POST', headers: bearer(r.jwt) });
        const [cb, cancelled] =
          i % 2 === 0 ? await Promise.all([callback(), cancel()]) : (await Promise.all([cancel(), callback()])).reverse();
        expect(cb?.status).toBe(200);
        cancelStatus.set(r.orderId, cancelled?.status ?? 0);
      });
      const rows = await outcomes(goodsId);
      let paid = 0;
      for (const { order, refunds } of rows) {
        if (order.status === ORDER_STATUS.PAID) {
          paid++;
          expect(cancelStatus.get(order.id)).toBe(409);
          expect(refunds).toHaveLength(0);
        } else {
          expect(order.status).toBe(ORDER_STATUS.REFUNDED);
          expect(cancelStatus.get(order.id)).toBe(200);
          expect(refunds.map((x) => x.reason)).toEqual(['ORDER_CANCELLED']);
        }
      }
      console.log(JSON.stringify({ race: 'callback-vs-cancel', paid, refunded: ORDERS - paid }));
      const s = await settled(goodsId);
      expect(s).toMatchObject({ doRemaining: ORDERS - paid, orders: { PAID: paid, REFUNDED: ORDERS - paid, PENDING_PAYMENT: 0 } });
      await refundsConfirmed(goodsId, ORDERS - paid);
    },
    RACE_TIMEOUT_MS,
  );
});
