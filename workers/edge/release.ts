import type { OrderRow } from '../../db/lifecycle';
import { goodsStock } from '../../durable-objects/routing';
import type { GoodsPlacement, TimeoutMessage } from '../kernel/contract';
import { log } from '../kernel/log';
import { ORDER_STATUS } from '../kernel/order-status';
import { shardOfOrderId } from '../kernel/shards';
import { markInStock } from './sold-out';

// A closed order's unit goes back to its goods' object, whoever closed it: the shopper's cancel,
// the payment timeout consumer, or the cron's overdue sweep.

/** A failed release is repeated through the timeout queue after this long. */
const REPAIR_DELAY_SECONDS = 10;

type ClosedOrder = Pick<OrderRow, 'id' | 'goodsId' | 'requestId' | 'status'>;

/**
 * Gives a closed order's unit back to its goods' object, which lets the user buy again.
 * Idempotent (the object ignores a release it already made); throws when the object is unreachable.
 */
export async function releaseUnit(env: Env, goods: GoodsPlacement, order: ClosedOrder): Promise<void> {
  // The order id names the stock shard that made (and holds) the reservation.
  const { remaining } = await goodsStock(env, goods, shardOfOrderId(order.id)).release(
    order.requestId,
    order.status === ORDER_STATUS.CANCELLED ? 'CANCELLED' : 'CLOSED_TIMEOUT',
  );
  if (remaining > 0) {
    // This isolate may still answer SOLD_OUT from its fast path; the unit is for sale again now.
    markInStock(order.goodsId);
  }
}

/**
 * releaseUnit for callers that cannot retry (a shopper's cancel, the cron): if the object is
 * unreachable, a timeout message for the order repeats the release from the queue, with the
 * queue's retries and dead-letter queue behind it. Postgres already counts the unit as free.
 */
export async function releaseOrRepair(env: Env, goods: GoodsPlacement, order: ClosedOrder): Promise<boolean> {
  try {
    await releaseUnit(env, goods, order);
    return true;
  } catch (error) {
    log.warn('lifecycle.release_failed', { orderId: order.id, goodsId: order.goodsId, error });
    const message: TimeoutMessage = { v: 1, kind: 'pay-timeout', orderId: order.id, goodsId: order.goodsId };
    try {
      await env.TIMEOUT_QUEUE.send(message, { contentType: 'json', delaySeconds: REPAIR_DELAY_SECONDS });
    } catch (sendError) {
      log.error('lifecycle.release_repair_failed', { orderId: order.id, goodsId: order.goodsId, error: sendError });
    }
    return false;
  }
}
