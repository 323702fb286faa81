import { Hono } from 'hono';
import { z } from 'zod';
import { withDbFor } from '../../../db/client';
import { findOrder } from '../../../db/lifecycle';
import { findPayment } from '../../../db/payments';
import { PaymentId, SandboxCompleteBody } from '../../kernel/contract';
import { AppError } from '../../kernel/errors';
import { deliverWebhook, SANDBOX, sandboxEvent } from '../../payments/sandbox';
import type { AppEnv } from '../context';
import { shopperAuth } from '../middleware/shopper-auth';
import { valid } from '../middleware/validate';

const PaymentParam = z.object({ paymentId: PaymentId });

/**
 * The sandbox provider's "checkout page": a shopper finishes a held payment (succeed or fail)
 * whenever they like, even after the order closed, which is how a late payment happens.
 * The webhook is delivered before this answers, and its answer is passed through.
 */
export const sandboxRoutes = new Hono<AppEnv>()
  .use(async function sandboxOnly(c, next) {
    if (!c.var.config.sandboxPayments) {
      throw new AppError('NOT_FOUND', 'not found');
    }
    await next();
  })
  .post('/:paymentId/complete', shopperAuth, valid('param', PaymentParam), valid('json', SandboxCompleteBody), async (c) => {
    const { paymentId } = c.req.valid('param');
    const { outcome } = c.req.valid('json');
    const found = await withDbFor(c.var.config, async (d) => {
      const payment = await findPayment(d, paymentId);
      const order = payment ? await findOrder(d, payment.orderId) : undefined;
      return payment && order ? { payment, order } : undefined;
    });
    if (!found || found.order.userId !== c.var.userId || found.payment.provider !== SANDBOX) {
      throw new AppError('NOT_FOUND', 'no such payment');
    }
    if (found.payment.status !== 'PENDING') {
      throw new AppError('CONFLICT', `the payment is already ${found.payment.status}`);
    }
    const event = sandboxEvent({ paymentId, orderId: found.order.id, amountCents: found.payment.amountCents }, outcome);
    const res = await deliverWebhook(c.var.config.paymentWebhookSecret, event);
    const answer: unknown = await res.json().catch(() => null);
    if (res.status >= 500) {
      throw new AppError('UNAVAILABLE', `the payment callback answered ${res.status}`);
    }
    return c.json({ paymentId, eventId: event.eventId, callbackStatus: res.status, callback: answer });
  });
