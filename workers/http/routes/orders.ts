import { Hono } from 'hono';
import { dbOptions, httpDb, SHOPPER_STATEMENT_MS, withDbFor } from '../../../db/client';
import { closePendingOrder, findOrder, type OrderRow } from '../../../db/lifecycle';
import { createPayment, markPaymentFailed } from '../../../db/payments';
import { forgetHoldersOf } from '../../edge/holders-copies';
import { placementOf } from '../../edge/placements';
import { releaseOrRepair } from '../../edge/release';
import { enqueueDeliveries } from '../../edge/webhooks';
import { randomId } from '../../kernel/crypto';
import { AppError, unavailable } from '../../kernel/errors';
import { OrderParam, PayBody } from '../../kernel/http-bodies';
import { log } from '../../kernel/log';
import { ORDER_STATUS, orderStatusName } from '../../kernel/order-status';
import { activeProvider } from '../../payments';
import type { StartedPayment } from '../../payments/provider';
import type { AppEnv } from '../context';
import { saleLimits } from '../middleware/sale-limits';
import { shopperAuth } from '../middleware/shopper-auth';
import { shopperFront } from '../middleware/shopper-front';
import { valid } from '../middleware/validate';

/** The contract's order shape. */
export function orderView(o: OrderRow) {
  return {
    orderId: o.id,
    orderNo: o.orderNo,
    goodsId: o.goodsId,
    userId: o.userId,
    status: orderStatusName(o.status),
    priceCents: o.priceCents,
    quantity: o.quantity,
    amountCents: o.priceCents * o.quantity,
    payDeadline: o.payDeadline.toISOString(),
    createdAt: o.createdAt.toISOString(),
    ...(o.paidAt ? { paidAt: o.paidAt.toISOString() } : {}),
    ...(o.closedAt ? { closedAt: o.closedAt.toISOString() } : {}),
  };
}

function notFound(): AppError {
  // Someone else's order answers like a missing one, so order ids cannot be probed.
  return new AppError('NOT_FOUND', 'no such order');
}

/**
 * A shopper's orders: look, pay, cancel. Every route is the owner's only, behind the same
 * shield, limits and bans as the sale routes (counted apart from them, so reading an order
 * never eats the purchase budget). Reads go over SQL over HTTP (no Postgres session to open or
 * close); a pool is opened only for the two interactive transactions: starting a payment
 * (createPayment locks the order row while it counts attempts) and cancelling
 * (closePendingOrder moves the order and the stock together), and only once the owner and the
 * status were checked over HTTP, so a refusal never opens one.
 */
export const orders = new Hono<AppEnv>()
  .use(shopperFront, shopperAuth)

  .get('/:orderId', valid('param', OrderParam), saleLimits('order'), async (c) => {
    const order = await findOrder(httpDb(dbOptions(c.get('config')), SHOPPER_STATEMENT_MS), c.req.valid('param').orderId);
    if (!order || order.userId !== c.get('userId')) {
      throw notFound();
    }
    return c.json(orderView(order));
  })

  .post('/:orderId/pay', valid('param', OrderParam), valid('json', PayBody), saleLimits('pay'), async (c) => {
    const { orderId } = c.req.valid('param');
    const config = c.get('config'),
      userId = c.get('userId');
    const provider = activeProvider({ config, waitUntil: (p) => c.executionCtx.waitUntil(p) });
    if (!provider) {
      throw new AppError('UNAVAILABLE', 'no payment provider is configured');
    }
    const http = httpDb(dbOptions(config));
    const order = await findOrder(http, orderId);
    if (!order || order.userId !== userId) {
      throw notFound();
    }
    if (order.status !== ORDER_STATUS.PENDING_PAYMENT) {
      throw notPayable(order);
    }
    const paymentId = `pay_${randomId()}`;
    const created = await withDbFor(config, (d) => createPayment(d, { orderId, userId, paymentId, provider: provider.name }));
    if (created.kind === 'missing') {
      throw notFound();
    }
    if (created.kind === 'not-payable') {
      if (created.why === 'status') {
        throw notPayable(created.order);
      }
      throw new AppError(
        'CONFLICT',
        created.why === 'deadline' ? 'the payment window of this order has closed' : 'too many payment attempts for this order',
      );
    }
    const intent = { paymentId, orderId, userId, amountCents: created.payment.amountCents };
    let started: StartedPayment;
    try {
      started = await provider.start(intent, c.req.valid('json'));
    } catch (error) {
      started = { ok: false, error: error instanceof Error ? error.message : String(error) };
    }
    if (!started.ok) {
      log.warn('payment.start_failed', { orderId, paymentId, provider: provider.name, error: started.error });
      await markPaymentFailed(http, paymentId);
      throw unavailable('the payment provider is unavailable, please retry');
    }
    return c.json({
      paymentId,
      status: started.status,
      provider: provider.name,
      amountCents: intent.amountCents,
      ...(started.nextAction ? { nextAction: started.nextAction } : {}),
    });
  })

  .post('/:orderId/cancel', valid('param', OrderParam), saleLimits('cancel'), async (c) => {
    const { orderId } = c.req.valid('param');
    const config = c.get('config'),
      userId = c.get('userId');
    const http = httpDb(dbOptions(config));
    const order = await findOrder(http, orderId);
    if (!order || order.userId !== userId) {
      throw notFound();
    }
    if (order.status !== ORDER_STATUS.PENDING_PAYMENT) {
      throw notCancellable(order);
    }
    const result = await withDbFor(config, (d) => closePendingOrder(d, orderId, ORDER_STATUS.CANCELLED));
    if (result.kind === 'missing') {
      throw notFound();
    }
    if (result.kind !== 'closed') {
      throw notCancellable(result.order);
    }
    // The shop hears of it after the answer (a lost send is re-sent by the cron).
    c.executionCtx.waitUntil(enqueueDeliveries(c.env, result.webhookIds));
    // The shopper may buy in the activity or goods again at once, and the page says so, here and
    // in this data center (whatever the release below meets); elsewhere within the copies' renewal.
    await forgetHoldersOf(config, result.order);
    // Postgres has the unit back already; the goods' object gets it now, or from the queue later.
    await releaseOrRepair(c.env, await placementOf(http, order.goodsId), result.order);
    return c.json(orderView(result.order));
  });

function notPayable(order: OrderRow): AppError {
  return new AppError('CONFLICT', `the order is ${orderStatusName(order.status)}; only an unpaid order can be paid`);
}

function notCancellable(order: OrderRow): AppError {
  return new AppError('CONFLICT', `the order is ${orderStatusName(order.status)}; only an unpaid order can be cancelled`);
}
