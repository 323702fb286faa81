import { DurableObject } from 'cloudflare:workers';
import type { HistogramDelta, MetricsDelta } from '../../workers/metrics/registry';
import { seriesKey } from '../../workers/metrics/registry';

/** Series not updated for this long are dropped (an old sale's goods id), so the scrape stays small. */
const SERIES_RETENTION_MS = 7 * 24 * 3600_000;
const PRUNE_INTERVAL_MS = 3600_000;

/**
 * The totals of every counter and histogram across all isolates. Each isolate ships its
 * deltas here at most about once a second; the metrics route reads the sums. One object is
 * plenty: it takes one small write per isolate per second, not one per request.
 */
export class Metrics extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private prunedAt = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS counter (
        key TEXT PRIMARY KEY, name TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL,
        updated_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS histogram (
        key TEXT PRIMARY KEY, name TEXT NOT NULL, labels TEXT NOT NULL,
        counts TEXT NOT NULL, sum REAL NOT NULL, count INTEGER NOT NULL, updated_at INTEGER NOT NULL);
    `);
  }

  /** Adds one isolate's delta to the totals, atomically. */
  async add(delta: MetricsDelta): Promise<void> {
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      for (const c of delta.counters) {
        this.sql.exec(
          `INSERT INTO counter (key, name, labels, value, updated_at) VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (key) DO UPDATE SET value = value + excluded.value, updated_at = excluded.updated_at`,
          seriesKey(c.name, c.labels),
          c.name,
          JSON.stringify(c.labels),
          c.value,
          now,
        );
      }
      for (const h of delta.histograms) {
        this.addHistogram(h, now);
      }
      if (now - this.prunedAt > PRUNE_INTERVAL_MS) {
        this.prunedAt = now;
        this.sql.exec('DELETE FROM counter WHERE updated_at < ?', now - SERIES_RETENTION_MS);
        this.sql.exec('DELETE FROM histogram WHERE updated_at < ?', now - SERIES_RETENTION_MS);
      }
    });
  }

  private addHistogram(h: HistogramDelta, now: number): void {
    const key = seriesKey(h.name, h.labels);
    const row = this.sql
      .exec<{ counts: string; sum: number; count: number }>('SELECT counts, sum, count FROM histogram WHERE key = ?', key)
      .toArray()[0];
    const stored = row ? (JSON.parse(row.counts) as number[]) : undefined;
    // A deploy that changed a histogram's buckets restarts that series rather than mixing bounds.
    const same = row !== undefined && stored !== undefined && stored.length === h.counts.length;
    this.sql.exec(
      'INSERT OR REPLACE INTO histogram (key, name, labels, counts, sum, count, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
      key,
      h.name,
      JSON.stringify(h.labels),
      JSON.stringify(same ? stored.map((n, i) => n + (h.counts[i] ?? 0)) : h.counts),
      (same ? row.sum : 0) + h.sum,
      (same ? row.count : 0) + h.count,
      now,
    );
  }

  /** Every series' total. */
  async totals(): Promise<MetricsDelta> {
    const counters = this.sql
      .exec<{ name: string; labels: string; value: number }>('SELECT name, labels, value FROM counter ORDER BY key')
      .toArray()
      .map((r) => ({ name: r.name, labels: JSON.parse(r.labels) as Record<string, string>, value: r.value }));
    const histograms = this.sql
      .exec<{ name: string; labels: string; counts: string; sum: number; count: number }>(
        'SELECT name, labels, counts, sum, count FROM histogram ORDER BY key',
      )
      .toArray()
      .map((r) => ({
        name: r.name,
        labels: JSON.parse(r.labels) as Record<string, string>,
        counts: JSON.parse(r.counts) as number[],
        sum: r.sum,
        count: r.count,
      }));
    return { counters, histograms };
  }
}
