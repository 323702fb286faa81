import { Hono } from 'hono';
import { z } from 'zod';
import { dbOptions, httpDb } from '../../../db/client';
import { findOrder } from '../../../db/lifecycle';
import { findPayment } from '../../../db/payments';
import { AppError, unavailable } from '../../kernel/errors';
import { PaymentId, SandboxCompleteBody } from '../../kernel/http-bodies';
import { deliverWebhook, SANDBOX, sandboxEvent } from '../../payments/sandbox';
import type { AppEnv } from '../context';
import { saleLimits } from '../middleware/sale-limits';
import { shopperAuth } from '../middleware/shopper-auth';
import { shopperFront } from '../middleware/shopper-front';
import { valid } from '../middleware/validate';

const PaymentParam = z.object({ paymentId: PaymentId });

/**
 * The sandbox provider's "checkout page": a shopper finishes a held payment (succeed or fail)
 * whenever they like, even after the order closed, which is how a late payment happens.
 * The webhook is delivered before this answers, and its answer is passed through. A shopper
 * route: shield, limits and bans as on the order routes; its reads go over SQL over HTTP.
 */
export const sandboxRoutes = new Hono<AppEnv>()
  .use(async function sandboxOnly(c, next) {
    if (!c.get('config').sandboxPayments) {
      throw new AppError('NOT_FOUND', 'not found');
    }
    await next();
  })
  .use(shopperFront)
  .post(
    '/:paymentId/complete',
    shopperAuth,
    saleLimits('sandbox'),
    valid('param', PaymentParam),
    valid('json', SandboxCompleteBody),
    async (c) => {
      const { paymentId } = c.req.valid('param');
      const { outcome } = c.req.valid('json');
      const db = httpDb(dbOptions(c.get('config')));
      const payment = await findPayment(db, paymentId);
      const order = payment ? await findOrder(db, payment.orderId) : undefined;
      const found = payment && order ? { payment, order } : undefined;
      if (!found || found.order.userId !== c.get('userId') || found.payment.provider !== SANDBOX) {
        throw new AppError('NOT_FOUND', 'no such payment');
      }
      if (found.payment.status !== 'PENDING') {
        throw new AppError('CONFLICT', `the payment is already ${found.payment.status}`);
      }
      const event = sandboxEvent({ paymentId, orderId: found.order.id, amountCents: found.payment.amountCents }, outcome);
      const res = await deliverWebhook(c.get('config').paymentWebhookSecret, event);
      const answer: unknown = await res.json().catch(() => null);
      if (res.status >= 500) {
        throw unavailable(`the payment callback answered ${res.status}, please retry`);
      }
      return c.json({ paymentId, eventId: event.eventId, callbackStatus: res.status, callback: answer });
    },
  );
