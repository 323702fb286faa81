import { migrateSchema } from '../../workers/kernel/schema-gate';
import type { CounterDelta, HistogramDelta, MetricsDelta } from '../../workers/metrics/registry';
import { seriesKey } from '../../workers/metrics/registry';

// The metrics object's tables: counter and histogram totals per series, behind one version
// number. Builds before the gate created them unconditionally; the first step finds them.

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS counter (
     key TEXT PRIMARY KEY, name TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL,
     updated_at INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS histogram (
     key TEXT PRIMARY KEY, name TEXT NOT NULL, labels TEXT NOT NULL,
     counts TEXT NOT NULL, sum REAL NOT NULL, count INTEGER NOT NULL, updated_at INTEGER NOT NULL);`,
];

export const METRICS_SCHEMA_VERSION = MIGRATIONS.length;

// Labels and bucket counts are JSON this object wrote itself from typed deltas.
const labelsOf = (text: string) => JSON.parse(text) as Record<string, string>;
const countsOf = (text: string) => JSON.parse(text) as number[];

export class MetricsStorage {
  constructor(private readonly sql: SqlStorage) {}

  migrate(): void {
    migrateSchema(this.sql, MIGRATIONS);
  }

  addCounter(c: CounterDelta, now: number): void {
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

  addHistogram(h: HistogramDelta, now: number): void {
    const key = seriesKey(h.name, h.labels);
    const row = this.sql
      .exec<{ counts: string; sum: number; count: number }>('SELECT counts, sum, count FROM histogram WHERE key = ?', key)
      .toArray()[0];
    const stored = row ? countsOf(row.counts) : undefined;
    // A deploy that changed a histogram's buckets restarts that series rather than mixing bounds.
    const same = row !== undefined && stored !== undefined && stored.length === h.counts.length;
    // An upsert, not INSERT OR REPLACE: an update of an existing series writes one row, a replace
    // a delete and an insert with their index entries (SQLite rows are what storage is billed by).
    this.sql.exec(
      `INSERT INTO histogram (key, name, labels, counts, sum, count, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (key) DO UPDATE SET counts = excluded.counts, sum = excluded.sum, count = excluded.count, updated_at = excluded.updated_at`,
      key,
      h.name,
      JSON.stringify(h.labels),
      JSON.stringify(same ? stored.map((n, i) => n + (h.counts[i] ?? 0)) : h.counts),
      (same ? row.sum : 0) + h.sum,
      (same ? row.count : 0) + h.count,
      now,
    );
  }

  /** Drops series not updated since `before`. */
  prune(before: number): void {
    this.sql.exec('DELETE FROM counter WHERE updated_at < ?', before);
    this.sql.exec('DELETE FROM histogram WHERE updated_at < ?', before);
  }

  totals(): MetricsDelta {
    const counters = this.sql
      .exec<{ name: string; labels: string; value: number }>('SELECT name, labels, value FROM counter ORDER BY key')
      .toArray()
      .map((r) => ({ name: r.name, labels: labelsOf(r.labels), value: r.value }));
    const histograms = this.sql
      .exec<{ name: string; labels: string; counts: string; sum: number; count: number }>(
        'SELECT name, labels, counts, sum, count FROM histogram ORDER BY key',
      )
      .toArray()
      .map((r) => ({ name: r.name, labels: labelsOf(r.labels), counts: countsOf(r.counts), sum: r.sum, count: r.count }));
    return { counters, histograms };
  }
}
