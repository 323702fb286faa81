import { Hono } from 'hono';
import { dbOptions, withDb } from '../../../db/client';
import { reconcile } from '../../cron/reconcile';
import { collectGauges, gaugesUp } from '../../edge/gauges';
import { AppError, unavailable } from '../../kernel/errors';
import { ReconcileQuery } from '../../kernel/http-bodies';
import { log } from '../../kernel/log';
import { within } from '../../kernel/within';
import { flushBeforeRead, metricsTotals } from '../../metrics/flush';
import { PROMETHEUS_CONTENT_TYPE, renderPrometheus } from '../../metrics/prometheus';
import type { AppEnv } from '../context';
import { valid } from '../middleware/validate';

/**
 * What a scrape waits for an object's answer (a metrics shard, a goods' stock shards): well
 * under Prometheus' default scrape timeout of 10 s, with the flush and the counters one after
 * the other.
 */
const SCRAPE_OBJECT_MS = 3_000;

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
    // This isolate's own counts first, if its metrics shard takes them in time; otherwise they
    // come with the next scrape (the flush goes on, and puts them back if it fails).
    await within(flushBeforeRead(c.env), SCRAPE_OBJECT_MS, () => new Error('late')).catch(() => undefined);
    const now = Date.now();
    const [totals, gauges] = await Promise.all([
      // The counters whole or not at all: a sum missing a shard would read to Prometheus as
      // counters reset to lower values, and their rates as a burst when the shard came back.
      within(metricsTotals(c.env), SCRAPE_OBJECT_MS, () => unavailable('a metrics shard did not answer in time, please retry')),
      withDb(dbOptions(c.get('config'), 1), (db) => collectGauges(c.env, c.get('config'), db, now, SCRAPE_OBJECT_MS))
        .then((families) => [...families, gaugesUp(true)])
        .catch((error: unknown) => {
          // Counters still answer when Postgres does not; the gauge says the rest is missing.
          log.warn('metrics.gauges_failed', { requestId: c.get('traceId'), error });
          return [gaugesUp(false)];
        }),
    ]);
    return c.body(renderPrometheus(totals, gauges), 200, { 'content-type': PROMETHEUS_CONTENT_TYPE, 'cache-control': 'no-store' });
  });
