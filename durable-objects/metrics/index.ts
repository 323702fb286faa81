import { DurableObject } from 'cloudflare:workers';
import { resetEdgeObjectIfAsked } from '../../workers/kernel/dev-faults';
import { log } from '../../workers/kernel/log';
import type { FlushId } from '../../workers/metrics/flush';
import { DeltaSum, type MetricsDelta, mergeDeltas } from '../../workers/metrics/registry';
import { MetricsStorage } from './storage';

/** Series not updated for this long are dropped (an old sale's goods id), so the scrape stays small. */
const SERIES_RETENTION_MS = 7 * 24 * 3600_000;
const PRUNE_INTERVAL_MS = 3600_000;
/**
 * How long the deltas a shard hears are summed in memory before they are written. Every flush
 * written at once cost each series a row or two per isolate per second: at fleet scale the
 * largest share of a sale's SQLite rows. Summed first, a shard writes each series once per
 * interval however many isolates flush to it. The price: a shard reset between writes (a
 * deploy) loses up to this much of the counts it heard.
 */
export const PERSIST_INTERVAL_MS = 10_000;
/**
 * How long a shard remembers the last flush it counted from an isolate, so the same flush sent
 * again (after a call that answered too late) counts once. In memory: a shard reset between a
 * flush's write and its second sending counts it twice, a deploy's price like the lost interval.
 */
const HEARD_MS = 10 * 60_000;

/**
 * One shard of the counter and histogram totals (see metricsShard in ../routing). Each isolate
 * ships its deltas to one shard at most about once a second; the metrics route sums the
 * shards, so each shard hears from a slice of the fleet, not all of it. A shard sums what it
 * hears in memory and writes the sum to SQLite by alarm (PERSIST_INTERVAL_MS); its totals are
 * the stored ones plus that sum, so a scrape sees a delta as soon as the shard has it.
 */
export class Metrics extends DurableObject<Env> {
  private readonly store: MetricsStorage;
  private prunedAt = 0;
  /** Heard and not yet written; while it holds anything, an alarm is set to write it. */
  private pending = new DeltaSum();
  /** Per isolate, the last flush counted (its seq) and when. */
  private readonly heard = new Map<string, { seq: number; at: number }>();
  private heardPrunedAt = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new MetricsStorage(ctx.storage.sql);
    this.store.migrate();
  }

  /**
   * Adds one isolate's delta to the totals: at once to what totals() answers, to storage within
   * PERSIST_INTERVAL_MS. A flush already counted (`from`; an earlier build sends none) adds nothing.
   */
  async add(delta: MetricsDelta, from?: FlushId): Promise<void> {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetEdgeObjectIfAsked(this.ctx);
    }
    if (from && this.counted(from)) {
      return;
    }
    // The alarm first: a call that fails adds nothing, and the isolate sends its delta again.
    if (this.pending.empty) {
      await this.ctx.storage.setAlarm(Date.now() + PERSIST_INTERVAL_MS);
      // The same flush may have come in twice while the alarm was set.
      if (from && this.counted(from)) {
        return;
      }
    }
    this.pending.add(delta);
    if (from) {
      this.noteHeard(from);
    }
  }

  private counted(from: FlushId): boolean {
    return (this.heard.get(from.isolate)?.seq ?? 0) >= from.seq;
  }

  private noteHeard(from: FlushId): void {
    const now = Date.now();
    this.heard.set(from.isolate, { seq: from.seq, at: now });
    if (now - this.heardPrunedAt > HEARD_MS) {
      this.heardPrunedAt = now;
      for (const [isolate, { at }] of this.heard) {
        if (at < now - HEARD_MS) {
          this.heard.delete(isolate);
        }
      }
    }
  }

  /** Every series' total: what is stored and what is waiting to be. */
  async totals(): Promise<MetricsDelta> {
    const stored = this.store.totals();
    return this.pending.empty ? stored : mergeDeltas([stored, this.pending.total()]);
  }

  /** Writes the pending sum in one transaction; if that fails, the sum stays pending for the next alarm. */
  override async alarm(): Promise<void> {
    if (this.pending.empty) {
      return;
    }
    const pending = this.pending.total();
    const now = Date.now();
    try {
      this.ctx.storage.transactionSync(() => {
        for (const c of pending.counters) {
          this.store.addCounter(c, now);
        }
        for (const h of pending.histograms) {
          this.store.addHistogram(h, now);
        }
        if (now - this.prunedAt > PRUNE_INTERVAL_MS) {
          this.prunedAt = now;
          this.store.prune(now - SERIES_RETENTION_MS);
        }
      });
    } catch (error) {
      log.warn('metrics.persist_failed', { series: pending.counters.length + pending.histograms.length, error });
      await this.ctx.storage.setAlarm(Date.now() + PERSIST_INTERVAL_MS);
      return;
    }
    // The write is synchronous: nothing was heard while it ran.
    this.pending = new DeltaSum();
  }
}
