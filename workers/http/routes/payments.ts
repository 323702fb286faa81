import { Hono } from 'hono';
import { withDbFor } from '../../../db/client';
import { applyPaymentEvent } from '../../../db/payments';
import { enqueueDeliveries } from '../../edge/webhooks';
import { AppError } from '../../kernel/errors';
import { log } from '../../kernel/log';
import { orderStatusName } from '../../kernel/order-status';
import { providerNamed } from '../../payments';
import { executeRefund } from '../../payments/refunds';
import { parseWebhookBody, verifyWebhookSignature } from '../../payments/webhook';
import type { AppEnv } from '../context';
import { sandboxRoutes } from './sandbox';

/** The payment provider's webhook (and, in local builds, the sandbox provider's pages). */
export const payments = new Hono<AppEnv>().post('/callback', async (c) => {
  const config = c.get('config');
  const raw = await c.req.text();
  if (!(await verifyWebhookSignature(config.paymentWebhookSecret, raw, c.req.header('x-signature')))) {
    log.warn('payment.bad_signature', { requestId: c.get('traceId'), bytes: raw.length });
    throw new AppError('INVALID_SIGNATURE');
  }
  const parsed = parseWebhookBody(raw);
  if (!parsed.ok) {
    throw new AppError('INVALID_INPUT', parsed.message);
  }
  const event = parsed.event;
  const result = await withDbFor(config, (d) => applyPaymentEvent(d, event));
  switch (result.kind) {
    case 'duplicate':
      return c.json({ eventId: event.eventId, outcome: result.outcome, duplicate: true });
    case 'conflicting-duplicate':
      throw new AppError('CONFLICT', `eventId ${event.eventId} was already received with a different body`);
    case 'unknown-payment':
      throw new AppError('NOT_FOUND', `no payment ${event.paymentId}`);
    case 'order-mismatch':
      throw new AppError('INVALID_INPUT', `payment ${event.paymentId} does not belong to order ${event.orderId}`);
    case 'amount-mismatch':
      log.warn('payment.amount_mismatch', {
        eventId: event.eventId,
        paymentId: event.paymentId,
        got: event.amountCents,
        expected: result.expectedCents,
      });
      throw new AppError('AMOUNT_MISMATCH', `amountCents ${event.amountCents} does not match the payment's ${result.expectedCents}`);
  }
  log.info('payment.event', { eventId: event.eventId, orderId: event.orderId, paymentId: event.paymentId, outcome: result.outcome });
  // The shop's order.paid / order.refunded event goes out after the answer.
  c.executionCtx.waitUntil(enqueueDeliveries(c.env, result.webhookIds));
  const refund = result.refund;
  if (refund) {
    // The provider waits for this answer; the refund goes out after it (the cron retries it).
    const provider = providerNamed({ config, waitUntil: (p) => c.executionCtx.waitUntil(p) }, result.payment.provider);
    c.executionCtx.waitUntil(
      withDbFor(config, (d) => executeRefund(d, provider, refund)).catch((error: unknown) =>
        log.warn('refund.deferred', { refundId: refund.id, error }),
      ),
    );
  }
  return c.json({
    eventId: event.eventId,
    outcome: result.outcome,
    duplicate: false,
    orderId: result.order.id,
    orderStatus: orderStatusName(result.order.status),
    ...(refund ? { refundId: refund.id } : {}),
  });
});

// Inline form so staging/production bundles drop the sandbox and its module (see workers/kernel/build-flags.ts).
if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
  payments.route('/sandbox', sandboxRoutes);
}
