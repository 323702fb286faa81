import { DurableObject } from 'cloudflare:workers';
import type { MetricsDelta } from '../../workers/metrics/registry';
import { MetricsStorage } from './storage';

/** Series not updated for this long are dropped (an old sale's goods id), so the scrape stays small. */
const SERIES_RETENTION_MS = 7 * 24 * 3600_000;
const PRUNE_INTERVAL_MS = 3600_000;

/**
 * One shard of the counter and histogram totals (see metricsShard in ../routing). Each isolate
 * ships its deltas to one shard at most about once a second; the metrics route sums the
 * shards, so each shard hears from a slice of the fleet, not all of it.
 */
export class Metrics extends DurableObject<Env> {
  private readonly store: MetricsStorage;
  private prunedAt = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new MetricsStorage(ctx.storage.sql);
    this.store.migrate();
  }

  /** Adds one isolate's delta to the totals, atomically. */
  async add(delta: MetricsDelta): Promise<void> {
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      for (const c of delta.counters) {
        this.store.addCounter(c, now);
      }
      for (const h of delta.histograms) {
        this.store.addHistogram(h, now);
      }
      if (now - this.prunedAt > PRUNE_INTERVAL_MS) {
        this.prunedAt = now;
        this.store.prune(now - SERIES_RETENTION_MS);
      }
    });
  }

  /** Every series' total. */
  async totals(): Promise<MetricsDelta> {
    return this.store.totals();
  }
}
