import { and, asc, count, eq, inArray, lte } from 'drizzle-orm';
import type { PaymentCallbackBody } from '../workers/kernel/http-bodies';
import type { AnyDb, Db } from './client';
import type { OrderRow } from './lifecycle';
import { decidePaymentEvent, type EventOutcome, isPaymentStatus, type PaymentStatus } from './payment-decision';
import { ORDER_STATUS, payment, paymentEvent, refund, seckillOrder } from './schema';
import { recordOrderEvents } from './webhooks';

export type PaymentRow = typeof payment.$inferSelect;
export type RefundRow = typeof refund.$inferSelect;
type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

/** Payment attempts one order may start: enough for honest retries, not for a flood of rows. */
export const MAX_PAYMENTS_PER_ORDER = 10;

export type CreatePaymentResult =
  | { kind: 'created'; payment: PaymentRow; order: OrderRow }
  /** No such order, or not this shopper's. */
  | { kind: 'missing' }
  | { kind: 'not-payable'; order: OrderRow; why: 'status' | 'deadline' | 'attempts' };

/**
 * Records a payment for a shopper's pending order, for the order's price. The order row is
 * locked while it is checked, so the attempt cap holds under concurrent clicks (lock order as
 * in applyPaymentEvent: the order first).
 */
export async function createPayment(
  db: Db,
  input: { orderId: string; userId: string; paymentId: string; provider: string },
  now = Date.now(),
): Promise<CreatePaymentResult> {
  return db.transaction(async (tx) => {
    const [order] = await tx.select().from(seckillOrder).where(eq(seckillOrder.id, input.orderId)).for('update');
    if (!order || order.userId !== input.userId) {
      return { kind: 'missing' };
    }
    if (order.status !== ORDER_STATUS.PENDING_PAYMENT) {
      return { kind: 'not-payable', order, why: 'status' };
    }
    if (order.payDeadline.getTime() <= now) {
      return { kind: 'not-payable', order, why: 'deadline' };
    }
    const [attempts] = await tx.select({ n: count() }).from(payment).where(eq(payment.orderId, order.id));
    if ((attempts?.n ?? 0) >= MAX_PAYMENTS_PER_ORDER) {
      return { kind: 'not-payable', order, why: 'attempts' };
    }
    const [row] = await tx
      .insert(payment)
      .values({
        id: input.paymentId,
        orderId: order.id,
        provider: input.provider,
        // The order's amount: its unit price times its units.
        amountCents: order.priceCents * order.quantity,
        createdAt: new Date(now),
        updatedAt: new Date(now),
      })
      .returning();
    if (!row) {
      throw new Error('insert into payment returned no row');
    }
    return { kind: 'created', payment: row, order };
  });
}

/** The provider could not start a payment: it will never succeed. */
export async function markPaymentFailed(db: AnyDb, paymentId: string, now = Date.now()): Promise<void> {
  await db
    .update(payment)
    .set({ status: 'FAILED', updatedAt: new Date(now) })
    .where(and(eq(payment.id, paymentId), eq(payment.status, 'PENDING')));
}

export async function findPayment(db: AnyDb, paymentId: string): Promise<PaymentRow | undefined> {
  const [row] = await db.select().from(payment).where(eq(payment.id, paymentId)).limit(1);
  return row;
}

export type ApplyEventResult =
  | {
      kind: 'applied';
      outcome: EventOutcome;
      order: OrderRow;
      payment: PaymentRow;
      refund: RefundRow | undefined;
      /** The shop's events this change wrote (order.paid or order.refunded), to send after the commit. */
      webhookIds: string[];
    }
  /** The same event again: nothing changes; the first answer is repeated. */
  | { kind: 'duplicate'; outcome: EventOutcome }
  /** An event id seen before with a different body. */
  | { kind: 'conflicting-duplicate' }
  | { kind: 'unknown-payment' }
  | { kind: 'order-mismatch' }
  | { kind: 'amount-mismatch'; expectedCents: number };

/** The refund of a payment has an id derived from it: a payment is refunded at most once. */
export function refundIdFor(paymentId: string): string {
  return `rfd_${paymentId.replace(/^pay_/, '')}`;
}

/**
 * Applies one verified provider event in ONE transaction: the event is recorded (idempotent by
 * eventId) together with what it does. Lock order, the same for every writer that takes both:
 * the order row, then the payment row. The order row lock serialises this against a close or
 * cancel of the same order (their guarded updates wait for it), so a payment and a close end
 * with exactly one winner, and a payment that loses is refunded in this same transaction.
 * A rejected event (unknown payment, wrong order or amount) writes nothing.
 */
export async function applyPaymentEvent(db: Db, event: PaymentCallbackBody, now = Date.now()): Promise<ApplyEventResult> {
  return db.transaction(async (tx) => {
    const seen = await findEvent(tx, event.eventId);
    if (seen) {
      return sameEvent(seen, event) ? { kind: 'duplicate', outcome: seen.outcome as EventOutcome } : { kind: 'conflicting-duplicate' };
    }
    const [order] = await tx.select().from(seckillOrder).where(eq(seckillOrder.id, event.orderId)).for('update');
    const [paid] = await tx.select().from(payment).where(eq(payment.id, event.paymentId)).for('update');
    if (!paid) {
      return { kind: 'unknown-payment' };
    }
    if (!order || paid.orderId !== order.id) {
      return { kind: 'order-mismatch' };
    }
    if (paid.amountCents !== event.amountCents) {
      return { kind: 'amount-mismatch', expectedCents: paid.amountCents };
    }
    if (!isPaymentStatus(paid.status)) {
      throw new Error(`payment ${paid.id} has unknown status ${paid.status}`);
    }
    const decision = decidePaymentEvent(order.status, paid.status, event.status);
    const recorded = await tx
      .insert(paymentEvent)
      .values({ ...event, outcome: decision.outcome, receivedAt: new Date(now) })
      .onConflictDoNothing()
      .returning({ eventId: paymentEvent.eventId });
    if (recorded.length === 0) {
      // The same event id committed by a concurrent delivery while this one waited for the lock.
      const first = await findEvent(tx, event.eventId);
      return first && sameEvent(first, event)
        ? { kind: 'duplicate', outcome: first.outcome as EventOutcome }
        : { kind: 'conflicting-duplicate' };
    }
    const nextOrder = decision.orderTo === undefined ? order : await moveOrder(tx, order, decision.orderTo, now);
    const webhookIds =
      decision.orderTo === undefined
        ? []
        : await recordOrderEvents(tx, decision.orderTo === ORDER_STATUS.PAID ? 'order.paid' : 'order.refunded', [nextOrder]);
    const nextPayment = decision.paymentTo === undefined ? paid : await movePayment(tx, paid, decision.paymentTo, now);
    let refunded: RefundRow | undefined;
    if (decision.refundReason) {
      [refunded] = await tx
        .insert(refund)
        .values({
          id: refundIdFor(paid.id),
          orderId: order.id,
          paymentId: paid.id,
          amountCents: paid.amountCents,
          reason: decision.refundReason,
          createdAt: new Date(now),
        })
        .onConflictDoNothing()
        .returning();
    }
    return { kind: 'applied', outcome: decision.outcome, order: nextOrder, payment: nextPayment, refund: refunded, webhookIds };
  });
}

async function findEvent(tx: Tx, eventId: string) {
  const [row] = await tx.select().from(paymentEvent).where(eq(paymentEvent.eventId, eventId)).limit(1);
  return row;
}

function sameEvent(seen: typeof paymentEvent.$inferSelect, event: PaymentCallbackBody): boolean {
  return (
    seen.paymentId === event.paymentId &&
    seen.orderId === event.orderId &&
    seen.status === event.status &&
    seen.amountCents === event.amountCents
  );
}

async function moveOrder(
  tx: Tx,
  order: OrderRow,
  to: typeof ORDER_STATUS.PAID | typeof ORDER_STATUS.REFUNDED,
  now: number,
): Promise<OrderRow> {
  // Guarded like every order transition, although the row lock already holds the status.
  const from = to === ORDER_STATUS.PAID ? [ORDER_STATUS.PENDING_PAYMENT] : [ORDER_STATUS.CANCELLED, ORDER_STATUS.CLOSED_TIMEOUT];
  const [moved] = await tx
    .update(seckillOrder)
    .set({ status: to, updatedAt: new Date(now), ...(to === ORDER_STATUS.PAID ? { paidAt: new Date(now) } : {}) })
    .where(and(eq(seckillOrder.id, order.id), inArray(seckillOrder.status, from)))
    .returning();
  if (!moved) {
    throw new Error(`order ${order.id} left status ${order.status} while locked`);
  }
  return moved;
}

async function movePayment(tx: Tx, paid: PaymentRow, to: PaymentStatus, now: number): Promise<PaymentRow> {
  const [moved] = await tx
    .update(payment)
    .set({ status: to, updatedAt: new Date(now) })
    .where(eq(payment.id, paid.id))
    .returning();
  return moved ?? paid;
}

/** Refunds still waiting for the provider's confirmation, oldest first, with their provider. */
export async function pendingRefunds(db: Db, createdBefore: number, limit = 100) {
  return db
    .select({ refund, provider: payment.provider })
    .from(refund)
    .innerJoin(payment, eq(payment.id, refund.paymentId))
    .where(and(eq(refund.status, 'PENDING'), lte(refund.createdAt, new Date(createdBefore))))
    .orderBy(asc(refund.createdAt))
    .limit(limit);
}

/** Records the provider's answer to a refund; only a pending refund moves. */
export async function settleRefund(db: Db, refundId: string, status: 'SUCCEEDED' | 'FAILED'): Promise<boolean> {
  const moved = await db
    .update(refund)
    .set({ status })
    .where(and(eq(refund.id, refundId), eq(refund.status, 'PENDING')))
    .returning({ id: refund.id });
  return moved.length > 0;
}
