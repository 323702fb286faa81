import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { payment, paymentEvent, refund, seckillOrder } from '../../db/schema';
import { hmacHex } from '../../workers/kernel/crypto';
import {
  bearer,
  buyOrder,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  ORDER_POLL_MS,
  orderOf,
  paymentCallback,
  settled,
  sql,
} from './helpers';

type PayAnswer = { paymentId: string; status: string; provider: string; amountCents: number; nextAction?: { kind: string; url: string } };

async function pay(jwt: string, orderId: string, outcome?: 'succeed' | 'fail' | 'hold'): Promise<PayAnswer> {
  const res = await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(jwt), json: outcome ? { outcome } : {} });
  expect(res.status).toBe(200);
  return json<PayAnswer>(res);
}

function paymentRow(paymentId: string) {
  return sql(async (db) => (await db.select().from(payment).where(eq(payment.id, paymentId)))[0]);
}

function eventsOf(orderId: string) {
  return sql((db) => db.select().from(paymentEvent).where(eq(paymentEvent.orderId, orderId)));
}

function refundsOf(orderId: string) {
  return sql((db) => db.select().from(refund).where(eq(refund.orderId, orderId)));
}

function orderRow(orderId: string) {
  return sql(async (db) => (await db.select().from(seckillOrder).where(eq(seckillOrder.id, orderId)))[0]);
}

let eventSeq = 0;
function succeeded(p: { paymentId: string; orderId: string; amountCents: number }, eventId = `evt_test_${Date.now()}_${++eventSeq}`) {
  return { eventId, paymentId: p.paymentId, orderId: p.orderId, status: 'SUCCEEDED', amountCents: p.amountCents };
}

describe('paying an order with the sandbox provider', () => {
  it('starts a payment whose signed webhook marks the order PAID', async () => {
    const { goodsId } = await createGoods({ stock: 3, priceCents: 4999 });
    const { orderId, jwt } = await buyOrder('pay-ok', goodsId);
    const started = await pay(jwt, orderId);
    expect(started).toMatchObject({ status: 'PENDING', provider: 'sandbox', amountCents: 4999 });
    expect(started.paymentId).toMatch(/^pay_/);
    const paid = await eventually(
      async () => {
        const o = await orderOf(jwt, orderId);
        return o.status === 'PAID' ? o : undefined;
      },
      30_000,
      ORDER_POLL_MS,
    );
    expect(paid.paidAt).toBeDefined();
    expect((await paymentRow(started.paymentId))?.status).toBe('SUCCEEDED');
    const events = await eventsOf(orderId);
    expect(events.map((e) => e.outcome)).toEqual(['PAID']);
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PAID: 1, PENDING_PAYMENT: 0 } });
  });

  it('keeps the order unpaid after a failed payment, and a second attempt can pay it', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('pay-fail', goodsId);
    const first = await pay(jwt, orderId, 'fail');
    await eventually(async () => (await paymentRow(first.paymentId))?.status === 'FAILED');
    expect((await orderOf(jwt, orderId)).status).toBe('PENDING_PAYMENT');
    const second = await pay(jwt, orderId, 'succeed');
    await eventually(async () => (await orderOf(jwt, orderId)).status === 'PAID', 30_000, ORDER_POLL_MS);
    expect((await paymentRow(second.paymentId))?.status).toBe('SUCCEEDED');
    expect((await eventsOf(orderId)).map((e) => e.outcome).sort()).toEqual(['FAILED', 'PAID']);
  });

  it('refuses to pay an order that is not yours, not unpaid, or past its deadline', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const { orderId, jwt } = await buyOrder('pay-owner', goodsId);
    const stranger = await devToken('pay-stranger');
    const foreign = await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(stranger), json: {} });
    expect(foreign.status).toBe(404);
    expect(await json(foreign)).toMatchObject({ error: { code: 'NOT_FOUND' } });
    expect((await call(`/api/orders/${orderId}/pay`, { method: 'POST', json: {} })).status).toBe(401);
    const badOutcome = await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(jwt), json: { outcome: 'steal' } });
    expect(badOutcome.status).toBe(400);
    expect(await json(badOutcome)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    const badId = await call('/api/orders/not-an-order/pay', { method: 'POST', headers: bearer(jwt), json: {} });
    expect(badId.status).toBe(400);
    const unknown = await call(`/api/orders/${goodsId}-999999/pay`, { method: 'POST', headers: bearer(jwt), json: {} });
    expect(unknown.status).toBe(404);

    // The payment window closed (the clock moved past the deadline) but no close ran yet.
    const late = await buyOrder('pay-late-window', goodsId);
    await sql((db) =>
      db
        .update(seckillOrder)
        .set({ payDeadline: new Date(Date.now() - 1000) })
        .where(eq(seckillOrder.id, late.orderId)),
    );
    const closedWindow = await call(`/api/orders/${late.orderId}/pay`, { method: 'POST', headers: bearer(late.jwt), json: {} });
    expect(closedWindow.status).toBe(409);

    await pay(jwt, orderId);
    await eventually(async () => (await orderOf(jwt, orderId)).status === 'PAID', 30_000, ORDER_POLL_MS);
    const again = await call(`/api/orders/${orderId}/pay`, { method: 'POST', headers: bearer(jwt), json: {} });
    expect(again.status).toBe(409);
    expect(await json(again)).toMatchObject({ error: { code: 'CONFLICT' } });
  });
});

describe('the payment callback', () => {
  it('answers 401 to a missing, malformed or wrong signature, and changes nothing', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('sig-user', goodsId);
    const started = await pay(jwt, orderId, 'hold');
    const event = succeeded({ paymentId: started.paymentId, orderId, amountCents: started.amountCents });
    const raw = JSON.stringify(event);
    const noHeader = await call('/api/payments/callback', { method: 'POST', headers: { 'content-type': 'application/json' }, body: raw });
    expect(noHeader.status).toBe(401);
    expect(await json(noHeader)).toMatchObject({ error: { code: 'INVALID_SIGNATURE' } });
    const goodSignature = await hmacHex(env.PAYMENT_WEBHOOK_SECRET, raw);
    const attempts = [
      await paymentCallback(event, { signature: 'not-hex' }),
      await paymentCallback(event, { signature: '0'.repeat(64) }),
      await paymentCallback(event, { signature: `${goodSignature}00` }),
      // Signed with some other key.
      await paymentCallback(event, { signature: await hmacHex('another-secret-0123456789abcdef', raw) }),
      // Signed, then the amount was changed in transit.
      await paymentCallback(event, { signature: goodSignature, raw: raw.replace(`"amountCents":${event.amountCents}`, '"amountCents":1') }),
    ];
    for (const res of attempts) {
      expect(res.status).toBe(401);
      expect(await json(res)).toMatchObject({ error: { code: 'INVALID_SIGNATURE' } });
    }
    expect(await eventsOf(orderId)).toHaveLength(0);
    expect((await orderOf(jwt, orderId)).status).toBe('PENDING_PAYMENT');
    expect((await paymentRow(started.paymentId))?.status).toBe('PENDING');
  });

  it('answers 400 AMOUNT_MISMATCH to a wrong amount and changes nothing', async () => {
    const { goodsId } = await createGoods({ stock: 2, priceCents: 1500 });
    const { orderId, jwt } = await buyOrder('amount-user', goodsId);
    const started = await pay(jwt, orderId, 'hold');
    for (const amountCents of [1, 1499, 1501, 0]) {
      const res = await paymentCallback(succeeded({ paymentId: started.paymentId, orderId, amountCents }));
      expect(res.status).toBe(400);
      expect(await json(res)).toMatchObject({ error: { code: 'AMOUNT_MISMATCH' } });
    }
    expect(await eventsOf(orderId)).toHaveLength(0);
    expect((await orderOf(jwt, orderId)).status).toBe('PENDING_PAYMENT');
    expect((await paymentRow(started.paymentId))?.status).toBe('PENDING');
    // The right amount still pays it afterwards.
    const ok = await paymentCallback(succeeded({ paymentId: started.paymentId, orderId, amountCents: 1500 }));
    expect(ok.status).toBe(200);
    expect((await orderOf(jwt, orderId)).status).toBe('PAID');
  });

  it('answers 400 to a signed body that is not a valid event, and 404/400 to a payment it does not know', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const a = await buyOrder('shape-a', goodsId);
    const b = await buyOrder('shape-b', goodsId);
    const payA = await pay(a.jwt, a.orderId, 'hold');
    const notJson = await paymentCallback(undefined, { raw: '{"eventId": ' });
    expect(notJson.status).toBe(400);
    const wrongShape = await paymentCallback({
      eventId: 'e1',
      paymentId: payA.paymentId,
      orderId: a.orderId,
      status: 'MAYBE',
      amountCents: 100,
    });
    expect(wrongShape.status).toBe(400);
    expect(await json(wrongShape)).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    const unknown = await paymentCallback(succeeded({ paymentId: `pay_${'z'.repeat(22)}`, orderId: a.orderId, amountCents: 100 }));
    expect(unknown.status).toBe(404);
    // A's payment presented for B's order.
    const crossed = await paymentCallback(succeeded({ paymentId: payA.paymentId, orderId: b.orderId, amountCents: payA.amountCents }));
    expect(crossed.status).toBe(400);
    expect((await orderOf(a.jwt, a.orderId)).status).toBe('PENDING_PAYMENT');
    expect((await orderOf(b.jwt, b.orderId)).status).toBe('PENDING_PAYMENT');
    expect([...(await eventsOf(a.orderId)), ...(await eventsOf(b.orderId))]).toHaveLength(0);
  });

  it('applies an event once however often it is delivered, even all at once', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const { orderId, jwt } = await buyOrder('dup-user', goodsId);
    const started = await pay(jwt, orderId, 'hold');
    const event = succeeded({ paymentId: started.paymentId, orderId, amountCents: started.amountCents });
    const answers = await Promise.all(Array.from({ length: 6 }, () => paymentCallback(event)));
    const bodies = await Promise.all(answers.map((r) => json<{ outcome: string; duplicate: boolean }>(r)));
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(bodies.every((b) => b.outcome === 'PAID')).toBe(true);
    expect(bodies.filter((b) => !b.duplicate)).toHaveLength(1);
    const paidAt = (await orderRow(orderId))?.paidAt;

    const later = await paymentCallback(event);
    expect(await json(later)).toMatchObject({ outcome: 'PAID', duplicate: true });
    // A new event id for a payment already counted is recorded and ignored.
    const another = await paymentCallback(succeeded({ paymentId: started.paymentId, orderId, amountCents: started.amountCents }));
    expect(await json(another)).toMatchObject({ outcome: 'IGNORED', duplicate: false });
    // A FAILED after the success does not undo it.
    const failedAfter = await paymentCallback({ ...event, eventId: `${event.eventId}-f`, status: 'FAILED' });
    expect(await json(failedAfter)).toMatchObject({ outcome: 'IGNORED' });
    // The same event id with another body is refused.
    const reused = await paymentCallback({ ...event, status: 'FAILED' });
    expect(reused.status).toBe(409);

    const o = await orderRow(orderId);
    expect(o?.status).toBe(1);
    expect(o?.paidAt?.getTime()).toBe(paidAt?.getTime());
    expect((await eventsOf(orderId)).map((e) => e.outcome).sort()).toEqual(['IGNORED', 'IGNORED', 'PAID']);
    expect(await refundsOf(orderId)).toHaveLength(0);
    const s = await settled(goodsId);
    expect(s.orders.PAID).toBe(1);
  });

  it('refunds a payment that arrives after the order was cancelled', async () => {
    const { goodsId } = await createGoods({ stock: 1, priceCents: 2500 });
    const { orderId, jwt } = await buyOrder('late-cancel', goodsId);
    const started = await pay(jwt, orderId, 'hold');
    expect(started.nextAction?.url).toBe(`/api/payments/sandbox/${started.paymentId}/complete`);
    const cancelled = await call(`/api/orders/${orderId}/cancel`, { method: 'POST', headers: bearer(jwt) });
    expect(cancelled.status).toBe(200);
    expect((await settled(goodsId)).doRemaining).toBe(1);

    // The shopper finishes paying at the provider anyway.
    const completed = await call(started.nextAction?.url ?? '', { method: 'POST', headers: bearer(jwt), json: { outcome: 'succeed' } });
    expect(completed.status).toBe(200);
    expect(await json(completed)).toMatchObject({ callbackStatus: 200, callback: { outcome: 'REFUNDED', orderStatus: 'REFUNDED' } });
    expect((await orderOf(jwt, orderId)).status).toBe('REFUNDED');
    const refunds = await refundsOf(orderId);
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ paymentId: started.paymentId, amountCents: 2500, reason: 'ORDER_CANCELLED' });
    expect((await paymentRow(started.paymentId))?.status).toBe('REFUNDED');
    // The sandbox confirms the refund right after the callback answered.
    await eventually(async () => (await refundsOf(orderId))[0]?.status === 'SUCCEEDED');
    // The unit stays back in stock: a refunded order holds nothing.
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 1, dbStock: 1, orders: { REFUNDED: 1, PENDING_PAYMENT: 0, PAID: 0 } });
    // A held payment can be finished once.
    const twice = await call(started.nextAction?.url ?? '', { method: 'POST', headers: bearer(jwt), json: {} });
    expect(twice.status).toBe(409);
  });

  it('refunds a second payment of an order already paid, and keeps the order PAID', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const { orderId, jwt } = await buyOrder('double-pay', goodsId);
    const first = await pay(jwt, orderId, 'hold');
    const second = await pay(jwt, orderId, 'hold');
    expect((await paymentCallback(succeeded({ ...first, orderId }))).status).toBe(200);
    const dup = await paymentCallback(succeeded({ ...second, orderId }));
    expect(await json(dup)).toMatchObject({ outcome: 'REFUNDED', orderStatus: 'PAID' });
    expect((await orderOf(jwt, orderId)).status).toBe('PAID');
    const refunds = await refundsOf(orderId);
    expect(refunds.map((r) => [r.paymentId, r.reason])).toEqual([[second.paymentId, 'DUPLICATE_PAYMENT']]);
    await eventually(async () => (await refundsOf(orderId))[0]?.status === 'SUCCEEDED');
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 0, orders: { PAID: 1 } });
  });

  it('lets only the owner finish a held sandbox payment', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const { orderId, jwt } = await buyOrder('sandbox-owner', goodsId);
    const started = await pay(jwt, orderId, 'hold');
    const other = await devToken('sandbox-other');
    const res = await call(`/api/payments/sandbox/${started.paymentId}/complete`, { method: 'POST', headers: bearer(other), json: {} });
    expect(res.status).toBe(404);
    expect((await orderOf(jwt, orderId)).status).toBe('PENDING_PAYMENT');
    const failed = await call(`/api/payments/sandbox/${started.paymentId}/complete`, {
      method: 'POST',
      headers: bearer(jwt),
      json: { outcome: 'fail' },
    });
    expect(await json(failed)).toMatchObject({ callback: { outcome: 'FAILED', orderStatus: 'PENDING_PAYMENT' } });
  });
});
