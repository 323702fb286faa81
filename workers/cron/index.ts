import { dbOptions, withDb } from '../../db/client';
import { getConfig } from '../kernel/config';
import { log } from '../kernel/log';
import { flushMetrics } from '../metrics/flush';
import { closeOverdueOrders } from './overdue';
import { prewarmGoods } from './prewarm';
import { reconcile } from './reconcile';
import { resendOverdueDeliveries } from './webhooks';

/**
 * Every minute: pre-warm goods about to start (object and mirror), reconcile every goods on
 * sale or recently ended (object, Postgres, mirror; repairs what is safe), then close the
 * remaining overdue unpaid orders of older sales, and re-send webhook deliveries whose message was lost.
 */
export async function runScheduled(env: Env, now = Date.now()) {
  const config = getConfig(env);
  try {
    return await withDb(dbOptions(config, 2), async (db) => {
      const prewarmed = await prewarmGoods(env, db, now);
      const report = await reconcile(env, db, now, { trigger: 'cron' });
      const closedOverdue = await closeOverdueOrders(env, db, now);
      const webhooksResent = await resendOverdueDeliveries(env, db, now).catch((error: unknown) => {
        log.warn('cron.webhook_resend_failed', { error });
        return 0;
      });
      const summary = {
        prewarmed,
        reconciled: report.goods.length,
        discrepancies: report.discrepancies,
        actions: report.actions,
        closedOverdue,
        webhooksResent,
      };
      log.info('cron.run', summary);
      return summary;
    });
  } finally {
    await flushMetrics(env, 1_000);
  }
}
