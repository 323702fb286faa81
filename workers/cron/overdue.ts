import type { Db } from '../../db/client';
import { closePendingOrder, listOverdueOrders } from '../../db/lifecycle';
import { placementOf } from '../edge/placements';
import { releaseOrRepair } from '../edge/release';
import { enqueueDeliveries } from '../edge/webhooks';
import { getConfig } from '../kernel/config';
import { log } from '../kernel/log';
import { ORDER_STATUS } from '../kernel/order-status';
import { retryPendingRefunds } from '../payments/refunds';

export type OverdueOptions = {
  /** Only this goods' orders (an operator's targeted sweep); all goods when absent. */
  goodsId?: number;
  limit?: number;
};

/**
 * The lifecycle's safety net, run every minute: closes pending orders past their deadline
 * whose timeout message never came and returns their units, then asks the payment provider
 * again for refunds it has not confirmed. Returns how many orders it closed.
 */
export async function closeOverdueOrders(env: Env, db: Db, now: number, options: OverdueOptions = {}): Promise<number> {
  const overdue = await listOverdueOrders(db, now, { goodsId: options.goodsId, limit: options.limit ?? 500 });
  let closed = 0;
  for (const o of overdue) {
    try {
      const r = await closePendingOrder(db, o.id, ORDER_STATUS.CLOSED_TIMEOUT, now);
      if (r.kind === 'closed') {
        closed++;
        await enqueueDeliveries(env, r.webhookIds);
        // One unreachable object must not stop the sweep; the release is repeated from the queue.
        await releaseOrRepair(env, await placementOf(db, r.order.goodsId), r.order);
      }
    } catch (error) {
      log.warn('cron.overdue_close_failed', { orderId: o.id, error });
    }
  }
  if (options.goodsId === undefined) {
    const refunds = await retryPendingRefunds(getConfig(env), db, now).catch((error: unknown) => {
      log.warn('cron.refund_retry_failed', { error });
      return 0;
    });
    if (refunds > 0) {
      log.info('cron.refunds_settled', { refunds });
    }
  }
  return closed;
}
