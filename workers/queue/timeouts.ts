import { dbOptions, withDb } from '../../db/client';
import { closePendingOrder } from '../../db/lifecycle';
import { ORDER_STATUS } from '../../db/schema';
import { placementOf } from '../edge/placements';
import { releaseUnit } from '../edge/release';
import { enqueueDeliveries } from '../edge/webhooks';
import { backoffSeconds, queueDelay } from '../kernel/backoff';
import { getConfig } from '../kernel/config';
import { parseTimeoutQueueMessage, type TimeoutMessage } from '../kernel/contract';
import { log } from '../kernel/log';

type Db = Parameters<Parameters<typeof withDb>[1]>[0];

/** What became of one order's timeout: done, not due for `wait` more seconds, its order not written yet, or failed. */
type Outcome = { kind: 'done' } | { kind: 'not-yet-due'; wait: number } | { kind: 'missing' } | { kind: 'failed' };

/**
 * Payment timeouts: delayed messages, one per order or a pack of the orders one consumer batch
 * made. A still-pending order past its deadline is closed and its unit returned to Postgres and
 * to the goods' object (the user may buy again). A paid order is left alone. Safe to deliver
 * twice: the close is guarded and the release is idempotent, so a redelivery (or a repair
 * message) only repeats the release. A message is acked when each of its orders is done, and
 * retried whole otherwise (the done ones change nothing the next time), so the queue's retry
 * count and dead-letter queue cover every order in it.
 * `now` is the clock the deadline is compared with (tests drive it).
 */
export async function consumeTimeouts(batch: MessageBatch<unknown>, env: Env, now?: number): Promise<void> {
  const config = getConfig(env);
  const { backoffCapSeconds, backoffBaseSeconds } = config.retry;
  await withDb(dbOptions(config, 2), async (db) => {
    for (const message of batch.messages) {
      const timeouts = parseTimeoutQueueMessage(message.body);
      if (!timeouts) {
        log.error('timeouts.malformed_message', { id: message.id });
        // Nothing can make it valid; the dead-letter queue keeps it for an operator.
        message.retry({ delaySeconds: 0 });
        continue;
      }
      const outcomes: Outcome[] = [];
      for (const timeout of timeouts) {
        outcomes.push(await closeAtDeadline(env, db, timeout, now ?? Date.now(), message.attempts));
      }
      const waits = outcomes.flatMap((o) => (o.kind === 'not-yet-due' ? [o.wait] : []));
      if (outcomes.some((o) => o.kind === 'failed')) {
        message.retry({ delaySeconds: backoffSeconds(message.attempts, backoffCapSeconds, backoffBaseSeconds) });
      } else if (outcomes.some((o) => o.kind === 'missing')) {
        // An order message may still be on its way (a redriven timeout, say): look again later.
        message.retry({ delaySeconds: backoffSeconds(message.attempts, 2 * backoffCapSeconds, backoffBaseSeconds) });
      } else if (waits.length > 0) {
        message.retry({ delaySeconds: queueDelay(Math.min(...waits), 1) });
      } else {
        message.ack();
      }
    }
  });
}

async function closeAtDeadline(env: Env, db: Db, timeout: TimeoutMessage, at: number, attempts: number): Promise<Outcome> {
  try {
    const result = await closePendingOrder(db, timeout.orderId, ORDER_STATUS.CLOSED_TIMEOUT, at);
    if (result.kind === 'not-yet-due') {
      return { kind: 'not-yet-due', wait: Math.ceil((result.order.payDeadline.getTime() - at) / 1000) };
    }
    if (result.kind === 'missing') {
      log.warn('timeouts.order_missing', { orderId: timeout.orderId, attempts });
      return { kind: 'missing' };
    }
    if (result.kind === 'closed') {
      await enqueueDeliveries(env, result.webhookIds);
    }
    if (result.kind === 'closed' || result.kind === 'already-closed') {
      await releaseUnit(env, await placementOf(db, result.order.goodsId), result.order);
    }
    return { kind: 'done' };
  } catch (error) {
    log.warn('timeouts.failed', { orderId: timeout.orderId, error });
    return { kind: 'failed' };
  }
}
