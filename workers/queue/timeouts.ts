import { dbOptions, withDb } from '../../db/client';
import { closePendingOrder } from '../../db/lifecycle';
import { ORDER_STATUS } from '../../db/schema';
import { placementOf } from '../edge/placements';
import { releaseUnit } from '../edge/release';
import { enqueueDeliveries } from '../edge/webhooks';
import { backoffSeconds, queueDelay } from '../kernel/backoff';
import { getConfig } from '../kernel/config';
import { TimeoutMessage } from '../kernel/contract';
import { log } from '../kernel/log';

/**
 * Payment timeouts: a delayed message per order. A still-pending order past its deadline is
 * closed and its unit returned to Postgres and to the goods' object (the user may buy again).
 * A paid order is left alone. Safe to deliver twice: the close is guarded and the release
 * is idempotent, so a redelivery (or a repair message) only repeats the release.
 * `now` is the clock the deadline is compared with (tests drive it).
 */
export async function consumeTimeouts(batch: MessageBatch<unknown>, env: Env, now?: number): Promise<void> {
  const config = getConfig(env);
  const { backoffCapSeconds, backoffBaseSeconds } = config.retry;
  await withDb(dbOptions(config, 2), async (db) => {
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
        if (result.kind === 'closed') {
          await enqueueDeliveries(env, result.webhookIds);
        }
        if (result.kind === 'closed' || result.kind === 'already-closed') {
          await releaseUnit(env, await placementOf(db, result.order.goodsId), result.order);
        }
        if (result.kind === 'missing') {
          // The order message may still be on its way (a redriven timeout, say): look again later.
          log.warn('timeouts.order_missing', { orderId: parsed.data.orderId, attempts: message.attempts });
          message.retry({ delaySeconds: backoffSeconds(message.attempts, 2 * backoffCapSeconds, backoffBaseSeconds) });
          continue;
        }
        message.ack();
      } catch (error) {
        log.warn('timeouts.failed', { orderId: parsed.data.orderId, error });
        message.retry({ delaySeconds: backoffSeconds(message.attempts, backoffCapSeconds, backoffBaseSeconds) });
      }
    }
  });
}
