import { Hono } from 'hono';
import { withDbFor } from '../../../db/client';
import { closePendingOrder, findOrder, type OrderRow } from '../../../db/lifecycle';
import { createPayment, markPaymentFailed } from '../../../db/payments';
import { placementOf } from '../../edge/placements';
import { releaseOrRepair } from '../../edge/release';
import { OrderParam, PayBody } from '../../kernel/contract';
import { randomId } from '../../kernel/crypto';
import { AppError } from '../../kernel/errors';
import { log } from '../../kernel/log';
import { ORDER_STATUS, orderStatusName } from '../../kernel/order-status';
import { activeProvider } from '../../payments';
import type { StartedPayment } from '../../payments/provider';
import type { AppEnv } from '../context';
import { shopperAuth } from '../middleware/shopper-auth';
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

/** A shopper's orders: look, pay, cancel. Every route is the owner's only. */
export const orders = new Hono<AppEnv>()
  .use(shopperAuth)

  .get('/:orderId', valid('param', OrderParam), async (c) => {
    const order = await withDbFor(c.var.config, (d) => findOrder(d, c.req.valid('param').orderId));
    if (!order || order.userId !== c.var.userId) {
      throw notFound();
    }
    return c.json(orderView(order));
  })

  .post('/:orderId/pay', valid('param', OrderParam), valid('json', PayBody), async (c) => {
    const { orderId } = c.req.valid('param');
    const { config, userId } = c.var;
    const provider = activeProvider({ config, waitUntil: (p) => c.executionCtx.waitUntil(p) });
    if (!provider) {
      throw new AppError('UNAVAILABLE', 'no payment provider is configured');
    }
    const paymentId = `pay_${randomId()}`;
    const created = await withDbFor(config, (d) => createPayment(d, { orderId, userId, paymentId, provider: provider.name }));
    if (created.kind === 'missing') {
      throw notFound();
    }
    if (created.kind === 'not-payable') {
      const why = {
        status: `the order is ${orderStatusName(created.order.status)}; only an unpaid order can be paid`,
        deadline: 'the payment window of this order has closed',
        attempts: 'too many payment attempts for this order',
      }[created.why];
      throw new AppError('CONFLICT', why);
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
      await withDbFor(config, (d) => markPaymentFailed(d, paymentId));
      throw new AppError('UNAVAILABLE', 'the payment provider is unavailable, please retry');
    }
    return c.json({
      paymentId,
      status: started.status,
      provider: provider.name,
      amountCents: intent.amountCents,
      ...(started.nextAction ? { nextAction: started.nextAction } : {}),
    });
  })

  .post('/:orderId/cancel', valid('param', OrderParam), async (c) => {
    const { orderId } = c.req.valid('param');
    const { config, userId } = c.var;
    const result = await withDbFor(config, async (d) => {
      const order = await findOrder(d, orderId);
      if (!order || order.userId !== userId) {
        return undefined;
      }
      const closed = await closePendingOrder(d, orderId, ORDER_STATUS.CANCELLED);
      return closed.kind === 'closed' ? { ...closed, goods: await placementOf(d, order.goodsId) } : closed;
    });
    if (!result || result.kind === 'missing') {
      throw notFound();
    }
    if (result.kind !== 'closed') {
      throw new AppError('CONFLICT', `the order is ${orderStatusName(result.order.status)}; only an unpaid order can be cancelled`);
    }
    // Postgres has the unit back already; the goods' object gets it now, or from the queue later.
    await releaseOrRepair(c.env, result.goods, result.order);
    return c.json(orderView(result.order));
  });
