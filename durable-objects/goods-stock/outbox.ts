import { backoffSeconds } from '../../workers/kernel/backoff';
import type { OrderMessage, OrderPack } from '../../workers/kernel/contract';
import { failQueueSendIfAsked } from '../../workers/kernel/dev-faults';
import { log } from '../../workers/kernel/log';
import type { RetrySchedule } from '../../workers/kernel/retry-schedule';
import { callWithin } from '../../workers/kernel/within';
import { count } from '../../workers/metrics/registry';
import { sendsOf } from './packs';
import type { OutboxRow, StockStorage } from './storage';

// The local message table (本地消息表): an accepted reservation's order message is written in
// the same transaction as the decrement, then sent to the order queue, the rows of one flush in
// order packs (one message for up to PACK_ORDERS_MAX orders). The row stays until the
// order consumer settles the reservation (an order, or a failure with a reason): a send that
// fails is retried with backoff, and a message the queue took but that never settled (its
// retries and its dead letter lost while Postgres was down, say) is sent again after
// OUTBOX_RESEND_SECONDS, doubling up to OUTBOX_RESEND_CAP_SECONDS, for as long as it takes.
// The consumer is idempotent, so a copy that arrives after the order was made is a no-op. The
// object's one alarm drives all of it, reading only the rows that are due (an index on next_at).

const ROWS_PER_FLUSH = 1000;
/**
 * How long the rows of a reservation call wait for the next calls' before they go to the queue
 * together. A send costs the object far more than the rows it carries (in workerd, about as
 * much as the rest of a one-reservation call), so under load one send carries many calls'
 * messages; at rest a message waits this long more. The rows are committed before the wait.
 */
export const SEND_COALESCE_MS = 10;
/**
 * How long a flush waits for the queue to take one sendBatch. A send that never answered held
 * the flush's single flight, and with it every later flush and the reconciler's re-drive, for
 * as long as the object lived: the goods' accepted orders sat in the outbox. Given up, the rows
 * are retried with backoff like a refused send; a send that lands late makes a second copy,
 * which the idempotent consumer drops.
 */
export const QUEUE_SEND_MS = 5_000;
/** A stock shard's wait is at most this many times SEND_COALESCE_MS (100 ms). */
const MAX_COALESCE_FACTOR = 10;

/**
 * How long a flush waits for the next calls' rows in an object that holds one of `shards` stock
 * shards. A shard hears about 1/shards of its goods' purchases, so with one goods' wait each of
 * 8 shards sent a pack of about one order where one object sent a pack of ten: 8 times the queue
 * messages, and consumer batches of 8 times fewer orders. Waiting `shards` times as long (at
 * most 100 ms) keeps a shard's packs as full as one object's. Only the send waits: the rows are
 * committed, and a shopper's order takes about a second to reach Postgres either way.
 */
export function coalesceMs(shards: number): number {
  return SEND_COALESCE_MS * Math.min(MAX_COALESCE_FACTOR, Math.max(1, shards));
}

export type OutboxHost = {
  /** The queue, read at send time (the object's current binding). */
  queue(): Queue;
  goodsId(): number | undefined;
  /** The retry and resend schedule in force (the configuration, read at send time). */
  schedule(): RetrySchedule;
  /** How long a flush waits for the next calls' rows (coalesceMs of the object's shard count). */
  coalesceMs(): number;
  /** Asks for an alarm at `at`, when the next row is due. */
  retryAt(at: number): void;
};

export class Outbox {
  private flushing: Promise<void> | undefined;
  private flushAgain = false;
  /** The coalescing wait under way (flushSoon), if any. */
  private soon: Promise<void> | undefined;

  constructor(
    private readonly store: StockStorage,
    private readonly host: OutboxHost,
  ) {}

  /**
   * Sends due rows within the host's coalescing wait: the first caller of a window starts the
   * wait, the others' rows go with it. The promise (for waitUntil) ends when that send is done.
   */
  flushSoon(): Promise<void> {
    if (!this.soon) {
      this.soon = new Promise<void>((resolve) => setTimeout(resolve, this.host.coalesceMs())).then(() => {
        this.soon = undefined;
        return this.flush();
      });
    }
    return this.soon;
  }

  /** Sends due rows to the order queue. Single-flight: concurrent callers share a run. */
  flush(): Promise<void> {
    if (this.flushing) {
      this.flushAgain = true;
      return this.flushing;
    }
    this.flushing = (async () => {
      try {
        do {
          this.flushAgain = false;
          await this.flushDue();
        } while (this.flushAgain);
      } finally {
        this.flushing = undefined;
        const next = this.store.nextOutboxAt();
        if (next !== null) {
          this.host.retryAt(Math.max(next, Date.now() + 100));
        }
      }
    })();
    return this.flushing;
  }

  /**
   * Sends every row the queue never took now, ignoring the retry backoff (the reconciler's
   * re-drive of a stuck outbox). Returns how many waited before and how many still do.
   */
  async redrive(): Promise<{ before: number; pending: number }> {
    const before = this.store.tally().unsent;
    this.store.unsentDueNow(Date.now());
    await this.flush();
    return { before, pending: this.store.tally().unsent };
  }

  /**
   * Sends again now every reservation accepted and last sent before `before` that has not settled
   * (the reconciler's re-drive once Postgres answers again). Returns how many it sent and how
   * many reservations are still unsettled.
   */
  async redriveUnsettled(before: number): Promise<{ rows: number; queued: number }> {
    const rows = this.store.unsettledDueNow(before, Date.now());
    await this.flush();
    return { rows, queued: this.store.tally().queued };
  }

  private async flushDue(): Promise<void> {
    const rows = this.store.dueOutbox(Date.now(), ROWS_PER_FLUSH);
    if (rows.length === 0) {
      return;
    }
    const goodsId = this.host.goodsId();
    const schedule = this.host.schedule();
    const resend = { baseMs: schedule.resendSeconds * 1000, capMs: schedule.resendCapSeconds * 1000 };
    let done = 0;
    for (const send of sendsOf(rows)) {
      try {
        if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
          failQueueSendIfAsked();
        }
        const batch = send.packs.map((pack) => ({ body: packOf(pack), contentType: 'json' as const }));
        await callWithin(this.host.queue().sendBatch(batch), 'the order queue', QUEUE_SEND_MS);
        this.store.markSent(
          send.rows.map((r) => r.seq),
          Date.now(),
          resend,
        );
        done += send.rows.length;
        const resent = send.rows.filter((r) => r.sends > 0).length;
        if (resent > 0) {
          count('seckill_outbox_resends_total', { goods_id: String(goodsId) }, resent);
        }
      } catch (error) {
        const attempts = Math.max(...send.rows.map((r) => r.attempts)) + 1;
        const retryAt = Date.now() + backoffSeconds(attempts, schedule.outboxRetryCapSeconds) * 1000;
        log.warn('goods_stock.outbox_send_failed', { goodsId, rows: send.rows.length, attempts, error });
        // The rest of this run waits too: the queue that refused one batch would refuse the next.
        this.store.retryOutbox(
          rows.slice(done).map((r) => r.seq),
          retryAt,
        );
        this.host.retryAt(retryAt);
        return;
      }
    }
  }
}

function packOf(rows: readonly OutboxRow[]): OrderPack {
  // The bodies were written by this object from a typed OrderMessage, all of its one goods.
  const orders = rows.map((r) => JSON.parse(r.body) as OrderMessage);
  return { v: 1, kind: 'reserve-pack', goodsId: (orders[0] as OrderMessage).goodsId, orders };
}
