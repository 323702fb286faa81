import { describe, expect, it } from 'vitest';
import { decidePaymentEvent, PAYMENT_STATUSES, type PaymentStatus } from '../../db/payment-decision';
import { ORDER_STATUS } from '../../db/schema';

const { PENDING_PAYMENT, PAID, CANCELLED, CLOSED_TIMEOUT, REFUNDED } = ORDER_STATUS;
const ORDER_STATUSES = [PENDING_PAYMENT, PAID, CANCELLED, CLOSED_TIMEOUT, REFUNDED];

describe('decidePaymentEvent', () => {
  it('pays a pending order with money that arrives', () => {
    for (const paymentStatus of ['PENDING', 'FAILED'] as const) {
      expect(decidePaymentEvent(PENDING_PAYMENT, paymentStatus, 'SUCCEEDED')).toEqual({
        outcome: 'PAID',
        orderTo: PAID,
        paymentTo: 'SUCCEEDED',
      });
    }
  });

  it('refunds money for an order that was closed, cancelled, paid otherwise or refunded', () => {
    expect(decidePaymentEvent(CANCELLED, 'PENDING', 'SUCCEEDED')).toEqual({
      outcome: 'REFUNDED',
      orderTo: REFUNDED,
      paymentTo: 'REFUNDED',
      refundReason: 'ORDER_CANCELLED',
    });
    expect(decidePaymentEvent(CLOSED_TIMEOUT, 'PENDING', 'SUCCEEDED')).toEqual({
      outcome: 'REFUNDED',
      orderTo: REFUNDED,
      paymentTo: 'REFUNDED',
      refundReason: 'ORDER_CLOSED_TIMEOUT',
    });
    // The order stays as it is; only this payment's money goes back.
    expect(decidePaymentEvent(PAID, 'PENDING', 'SUCCEEDED')).toEqual({
      outcome: 'REFUNDED',
      paymentTo: 'REFUNDED',
      refundReason: 'DUPLICATE_PAYMENT',
    });
    expect(decidePaymentEvent(REFUNDED, 'FAILED', 'SUCCEEDED')).toEqual({
      outcome: 'REFUNDED',
      paymentTo: 'REFUNDED',
      refundReason: 'ORDER_REFUNDED',
    });
  });

  it('never keeps money silently: every success of an open payment pays or refunds', () => {
    for (const order of ORDER_STATUSES) {
      for (const paymentStatus of ['PENDING', 'FAILED'] as const) {
        const d = decidePaymentEvent(order, paymentStatus, 'SUCCEEDED');
        expect(['PAID', 'REFUNDED']).toContain(d.outcome);
        expect(d.outcome === 'REFUNDED').toBe(d.refundReason !== undefined);
        expect(d.orderTo === PAID).toBe(order === PENDING_PAYMENT);
      }
    }
  });

  it('changes nothing for a payment whose money was already counted', () => {
    for (const order of ORDER_STATUSES) {
      for (const paymentStatus of ['SUCCEEDED', 'REFUNDED'] as const) {
        expect(decidePaymentEvent(order, paymentStatus, 'SUCCEEDED')).toEqual({ outcome: 'IGNORED' });
        expect(decidePaymentEvent(order, paymentStatus, 'FAILED')).toEqual({ outcome: 'IGNORED' });
      }
    }
  });

  it('marks only a pending payment failed, and never moves the order on a failure', () => {
    for (const order of ORDER_STATUSES) {
      for (const paymentStatus of PAYMENT_STATUSES) {
        const d = decidePaymentEvent(order, paymentStatus as PaymentStatus, 'FAILED');
        expect(d.orderTo).toBeUndefined();
        expect(d.refundReason).toBeUndefined();
        expect(d).toEqual(paymentStatus === 'PENDING' ? { outcome: 'FAILED', paymentTo: 'FAILED' } : { outcome: 'IGNORED' });
      }
    }
  });

  it('refuses an order status it does not know', () => {
    expect(() => decidePaymentEvent(9, 'PENDING', 'SUCCEEDED')).toThrow(/unknown/);
  });
});
