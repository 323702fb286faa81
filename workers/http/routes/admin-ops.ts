import { Hono } from 'hono';
import { dbOptions, withDb } from '../../../db/client';
import { reconcile } from '../../cron/reconcile';
import { collectGauges, gaugesUp } from '../../edge/gauges';
import { AppError } from '../../kernel/errors';
import { ReconcileQuery } from '../../kernel/http-bodies';
import { log } from '../../kernel/log';
import { flushBeforeRead, metricsTotals } from '../../metrics/flush';
import { PROMETHEUS_CONTENT_TYPE, renderPrometheus } from '../../metrics/prometheus';
import type { AppEnv } from '../context';
import { valid } from '../middleware/validate';

/** Operations: run reconciliation now, and the Prometheus scrape. Mounted under the admin app (admin token). */
export const adminOps = new Hono<AppEnv>()
  .post('/reconcile', valid('query', ReconcileQuery), async (c) => {
    const { goodsId } = c.req.valid('query');
    const report = await withDb(dbOptions(c.get('config'), 2), (db) =>
      reconcile(c.env, db, Date.now(), { trigger: 'admin', ...(goodsId !== undefined ? { goodsId } : {}) }),
    );
    if (goodsId !== undefined && report.goods.length === 0) {
      throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
    }
    // The counts this run made are part of the next scrape at once.
    await flushBeforeRead(c.env);
    return c.json(report);
  })

  .get('/metrics', async (c) => {
    await flushBeforeRead(c.env);
    const now = Date.now();
    const [totals, gauges] = await Promise.all([
      metricsTotals(c.env),
      withDb(dbOptions(c.get('config'), 1), (db) => collectGauges(c.env, c.get('config'), db, now))
        .then((families) => [...families, gaugesUp(true)])
        .catch((error: unknown) => {
          // Counters still answer when Postgres does not; the gauge says the rest is missing.
          log.warn('metrics.gauges_failed', { requestId: c.get('traceId'), error });
          return [gaugesUp(false)];
        }),
    ]);
    return c.body(renderPrometheus(totals, gauges), 200, { 'content-type': PROMETHEUS_CONTENT_TYPE, 'cache-control': 'no-store' });
  });
