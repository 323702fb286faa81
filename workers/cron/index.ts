import { withDb } from '../../db/client';
import { getConfig } from '../config';
import { dbOptions } from '../goods';
import { log } from '../log';
import { closeOverdueOrders } from './overdue';
import { prewarmGoods } from './prewarm';

/** Every minute: pre-warm goods about to start, close overdue unpaid orders. */
export async function runScheduled(env: Env, now = Date.now()) {
  const config = getConfig(env);
  return withDb({ ...dbOptions(config), max: 2 }, async (db) => {
    const prewarmed = await prewarmGoods(env, db, now);
    const closedOverdue = await closeOverdueOrders(env, db, now);
    log.info('cron.run', { prewarmed, closedOverdue });
    return { prewarmed, closedOverdue };
  });
}
