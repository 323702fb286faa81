import { withDb } from '../../db/client';
import { closePendingOrder, type OrderRow } from '../../db/lifecycle';
import { ORDER_STATUS } from '../../db/schema';
import { markInStock } from '../defences/sold-out';
import { dbOptions } from '../goods';
import { backoffSeconds, queueDelay } from '../kernel/backoff';
import { getConfig } from '../kernel/config';
import { TimeoutMessage } from '../kernel/contract';
import { log } from '../kernel/log';
import { goodsStock } from '../routing';

/** A failed release is repeated through the timeout queue after this long. */
const REPAIR_DELAY_SECONDS = 10;

type ClosedOrder = Pick<OrderRow, 'id' | 'goodsId' | 'requestId' | 'status'>;

/**
 * Gives a closed order's unit back to its goods' object, which lets the user buy again.
 * Idempotent (the object ignores a release it already made); throws when the object is unreachable.
 */
export async function releaseUnit(env: Env, order: ClosedOrder): Promise<void> {
  const { remaining } = await goodsStock(env, order.goodsId).release(
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
export async function releaseOrRepair(env: Env, order: ClosedOrder): Promise<boolean> {
  try {
    await releaseUnit(env, order);
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

/**
 * Payment timeouts: a delayed message per order. A still-pending order past its deadline is
 * closed and its unit returned to Postgres and to the goods' object (the user may buy again).
 * A paid order is left alone. Safe to deliver twice: the close is guarded and the release
 * is idempotent, so a redelivery (or a repair message) only repeats the release.
 * `now` is the clock the deadline is compared with (tests drive it).
 */
export async function consumeTimeouts(batch: MessageBatch<unknown>, env: Env, now?: number): Promise<void> {
  const config = getConfig(env);
  await withDb({ ...dbOptions(config), max: 2 }, async (db) => {
    for (const message of batch.messages) {
      const parsed = TimeoutMessage.safeParse(message.body);
      if (!parsed.success) {
        log.error('timeouts.malformed_message', { id: message.id });
        // Nothing can make it valid; the dead-letter queue keeps it for an operator.
        message.retry({ delaySeconds: 0 });
        continue;
      }
      try {
        const at = now ?? Date.now();
        const result = await closePendingOrder(db, parsed.data.orderId, ORDER_STATUS.CLOSED_TIMEOUT, at);
        if (result.kind === 'not-yet-due') {
          const wait = Math.ceil((result.order.payDeadline.getTime() - at) / 1000);
          message.retry({ delaySeconds: queueDelay(wait, 1) });
          continue;
        }
        if (result.kind === 'closed' || result.kind === 'already-closed') {
          await releaseUnit(env, result.order);
        }
        if (result.kind === 'missing') {
          // The order message may still be on its way (a redriven timeout, say): look again later.
          log.warn('timeouts.order_missing', { orderId: parsed.data.orderId, attempts: message.attempts });
          message.retry({ delaySeconds: backoffSeconds(message.attempts, 600) });
          continue;
        }
        message.ack();
      } catch (error) {
        log.warn('timeouts.failed', { orderId: parsed.data.orderId, error });
        message.retry({ delaySeconds: backoffSeconds(message.attempts) });
      }
    }
  });
}
