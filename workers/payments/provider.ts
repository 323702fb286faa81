import type { Config } from '../kernel/config';
import type { PayBody } from '../kernel/http-bodies';

/** What the shop asks a provider to collect: one order's price. */
export type PaymentIntent = {
  paymentId: string;
  orderId: string;
  userId: string;
  amountCents: number;
};

/** A started payment: its result arrives later through the signed webhook. */
export type StartedPayment = { ok: true; status: 'PENDING'; nextAction?: { kind: 'redirect'; url: string } } | { ok: false; error: string };

export type RefundInstruction = {
  refundId: string;
  paymentId: string;
  amountCents: number;
  reason: string;
};

export type RefundAnswer = { ok: true } | { ok: false; retryable: boolean; error: string };

/**
 * A payment provider. The shop starts payments and orders refunds through it; the provider
 * reports each payment's result to POST /api/payments/callback, signed with
 * PAYMENT_WEBHOOK_SECRET. Methods return unions instead of throwing domain errors.
 */
export interface PaymentProvider {
  /** Stored on each payment row, so a refund goes back to the provider that took the money. */
  readonly name: string;
  start(intent: PaymentIntent, options: PayBody): Promise<StartedPayment>;
  /** Must be idempotent by `refundId`: the shop repeats a refund it could not confirm. */
  refund(instruction: RefundInstruction): Promise<RefundAnswer>;
}

/** What a provider may use from the invocation that needs it. */
export type ProviderContext = {
  config: Config;
  /** Work that outlives the response (a webhook delivery, a refund). */
  waitUntil(promise: Promise<unknown>): void;
};
