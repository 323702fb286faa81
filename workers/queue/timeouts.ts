import { withDb } from '../../db/client';
import { closePendingOrder } from '../../db/lifecycle';
import { ORDER_STATUS } from '../../db/schema';
import { backoffSeconds } from '../../durable-objects/reservation';
import { getConfig } from '../config';
import { dbOptions } from '../goods';
import { log } from '../log';
import { goodsStock } from '../routing';
import { TimeoutMessage } from '../schemas';

/**
 * Payment timeouts: a delayed message per order. A still-pending order past its deadline is
 * closed and its unit returned to Postgres and to the goods' object (the user may buy again).
 * A paid order is left alone. Safe to deliver twice: the close is guarded and the release
 * is idempotent, so a redelivery only repeats the release.
 */
export async function consumeTimeouts(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const config = getConfig(env);
  await withDb({ ...dbOptions(config), max: 2 }, async (db) => {
    for (const message of batch.messages) {
      const parsed = TimeoutMessage.safeParse(message.body);
      if (!parsed.success) {
        log.error('timeouts.malformed_message', { id: message.id });
        message.retry({ delaySeconds: 0 });
        continue;
      }
      try {
        const result = await closePendingOrder(db, parsed.data.orderId, ORDER_STATUS.CLOSED_TIMEOUT);
        if (result.kind === 'not-yet-due') {
          const wait = Math.ceil((result.order.payDeadline.getTime() - Date.now()) / 1000);
          message.retry({ delaySeconds: Math.min(43_200, Math.max(1, wait)) });
          continue;
        }
        if (result.kind === 'closed' || result.kind === 'already-closed') {
          // Repeated on every delivery: the object ignores a release it already made.
          const reason = result.order.status === ORDER_STATUS.CANCELLED ? 'CANCELLED' : 'CLOSED_TIMEOUT';
          await goodsStock(env, result.order.goodsId).release(result.order.requestId, reason);
        }
        message.ack();
      } catch (error) {
        log.warn('timeouts.failed', { orderId: parsed.data.orderId, error });
        message.retry({ delaySeconds: backoffSeconds(message.attempts) });
      }
    }
  });
}
