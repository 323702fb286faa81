import { backoffSeconds } from '../../workers/kernel/backoff';
import type { OrderMessage } from '../../workers/kernel/contract';
import { failQueueSendIfAsked } from '../../workers/kernel/dev-faults';
import { log } from '../../workers/kernel/log';
import type { StockStorage } from './storage';

// The local message table (本地消息表): an accepted reservation's order message is written in
// the same transaction as the decrement, then sent to the order queue. A send that fails is
// retried with backoff from the object's alarm, so "stock taken but message lost" cannot happen.

const SEND_BATCH_MAX = 100;
const ROWS_PER_FLUSH = 1000;
/** A failed send is retried after a backoff that stops growing here. */
const RETRY_CAP_SECONDS = 60;

export type OutboxHost = {
  /** The queue, read at send time (the object's current binding). */
  queue(): Queue;
  goodsId(): number | undefined;
  /** Asks for an alarm at `at`, to retry a failed send. */
  retryAt(at: number): void;
};

export class Outbox {
  private flushing: Promise<void> | undefined;
  private flushAgain = false;

  constructor(
    private readonly store: StockStorage,
    private readonly host: OutboxHost,
  ) {}

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
      }
    })();
    return this.flushing;
  }

  /**
   * Sends every waiting row now, ignoring the retry backoff (the reconciler's re-drive of a stuck
   * outbox). Returns how many rows waited before and how many still do.
   */
  async redrive(): Promise<{ before: number; pending: number }> {
    const now = Date.now();
    const before = this.store.outboxStats().n;
    this.store.outboxDueNow(now);
    await this.flush();
    return { before, pending: this.store.outboxStats().n };
  }

  private async flushDue(): Promise<void> {
    const rows = this.store.dueOutbox(Date.now(), ROWS_PER_FLUSH);
    for (let i = 0; i < rows.length; i += SEND_BATCH_MAX) {
      const chunk = rows.slice(i, i + SEND_BATCH_MAX);
      const seqs = chunk.map((r) => r.seq);
      try {
        if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
          failQueueSendIfAsked();
        }
        // The bodies were written by this object from a typed OrderMessage.
        await this.host.queue().sendBatch(chunk.map((r) => ({ body: JSON.parse(r.body) as OrderMessage, contentType: 'json' })));
        this.store.deleteOutbox(seqs);
      } catch (error) {
        const attempts = (chunk[0]?.attempts ?? 0) + 1;
        const retryAt = Date.now() + backoffSeconds(attempts, RETRY_CAP_SECONDS) * 1000;
        log.warn('goods_stock.outbox_send_failed', { goodsId: this.host.goodsId(), rows: chunk.length, attempts, error });
        this.store.retryOutbox(seqs, retryAt);
        this.host.retryAt(retryAt);
        return;
      }
    }
  }
}
