import { ORDER_STATUS } from '../workers/kernel/order-status';

// What one provider event does to an order and its payment, as a pure function of their
// current states. The caller holds both rows locked while it decides and applies.

export const PAYMENT_STATUSES = ['PENDING', 'SUCCEEDED', 'FAILED', 'REFUNDED'] as const;
export type PaymentStatus = (typeof PAYMENT_STATUSES)[number];

/** Recorded on payment_event.outcome. */
export type EventOutcome = 'PAID' | 'REFUNDED' | 'FAILED' | 'IGNORED';

export type RefundReason = 'ORDER_CANCELLED' | 'ORDER_CLOSED_TIMEOUT' | 'DUPLICATE_PAYMENT' | 'ORDER_REFUNDED';

export type EventDecision = {
  outcome: EventOutcome;
  /** The order's next status, when it moves. */
  orderTo?: typeof ORDER_STATUS.PAID | typeof ORDER_STATUS.REFUNDED;
  paymentTo?: PaymentStatus;
  /** Money was taken that the shop must give back. */
  refundReason?: RefundReason;
};

const REFUND: EventDecision = { outcome: 'REFUNDED', paymentTo: 'REFUNDED' };

/**
 * Decides a provider event. Money that arrives is never silently kept: it pays a pending
 * order, or it is refunded (the order was closed, cancelled, or already paid by another
 * payment). A repeated or contradicting event for a settled payment changes nothing.
 */
export function decidePaymentEvent(orderStatus: number, paymentStatus: PaymentStatus, eventStatus: 'SUCCEEDED' | 'FAILED'): EventDecision {
  if (eventStatus === 'FAILED') {
    return paymentStatus === 'PENDING' ? { outcome: 'FAILED', paymentTo: 'FAILED' } : { outcome: 'IGNORED' };
  }
  if (paymentStatus === 'SUCCEEDED' || paymentStatus === 'REFUNDED') {
    // This payment's money was already accounted for by an earlier event.
    return { outcome: 'IGNORED' };
  }
  // PENDING, or FAILED and then captured after all: the money is here now.
  switch (orderStatus) {
    case ORDER_STATUS.PENDING_PAYMENT:
      return { outcome: 'PAID', orderTo: ORDER_STATUS.PAID, paymentTo: 'SUCCEEDED' };
    case ORDER_STATUS.CANCELLED:
      return { ...REFUND, orderTo: ORDER_STATUS.REFUNDED, refundReason: 'ORDER_CANCELLED' };
    case ORDER_STATUS.CLOSED_TIMEOUT:
      return { ...REFUND, orderTo: ORDER_STATUS.REFUNDED, refundReason: 'ORDER_CLOSED_TIMEOUT' };
    case ORDER_STATUS.PAID:
      return { ...REFUND, refundReason: 'DUPLICATE_PAYMENT' };
    case ORDER_STATUS.REFUNDED:
      return { ...REFUND, refundReason: 'ORDER_REFUNDED' };
    default:
      throw new Error(`order status ${orderStatus} is unknown`);
  }
}

export function isPaymentStatus(value: string): value is PaymentStatus {
  return (PAYMENT_STATUSES as readonly string[]).includes(value);
}
