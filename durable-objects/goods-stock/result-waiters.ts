import { MAX_RESULT_WAIT_SECONDS, type ResultView } from '../../workers/kernel/contract';

// Result reads held until the answer is final (GET /api/seckill/result/:requestId?wait=N).
// Without the mirror every poll of a shopper's result is a call to its stock shard, one a
// second for as long as the order queue takes, so a slow consumer multiplied the calls each
// purchase costs. A held read is one call for the whole wait: it answers as soon as a
// settlement or a release makes the result final, or with QUEUED when the wait is over.
//
// The holders live in the instance's memory only: a reset answers their calls with an error
// (the route's 503, and the shopper's page asks again), and the answer itself is always read
// from storage, so nothing a held read says can differ from an immediate one.

/** The longest a read is held (the route's `wait` bound). */
const MAX_RESULT_WAIT_MS = MAX_RESULT_WAIT_SECONDS * 1000;
/**
 * Held reads one instance keeps at most; past it a read answers at once, as before holding
 * existed, and the shopper's page paces its polls. Bounds the memory a crowd can pin: the
 * bench's held-read phase puts a held read at about 2.4 KB of the object's isolate at most (its
 * holder and the runtime's part of the call), so 10,000 pin under a fifth of the 128 MB an
 * isolate has; they are ten seconds of a shard's whole ~1,000 purchases a second waiting for
 * the consumer.
 */
export const MAX_HELD_READS = 10_000;
/** Held reads of one shopper at most (a page holds one; a few tabs a few): a bot's loop cannot fill the instance. */
export const MAX_HELD_PER_SHOPPER = 4;

/** Who asks to wait, and how long: only the request's owner is held (the route answers anyone else 404). */
export type ResultWait = { ms: number; userId: string };

type Held = { userId: string; resolve: (view: ResultView | undefined) => void; timer: ReturnType<typeof setTimeout> };

export class ResultWaiters {
  private readonly held = new Map<string, Held[]>();
  private readonly perShopper = new Map<string, number>();
  private count = 0;

  constructor(private readonly read: (requestId: string) => ResultView | undefined) {}

  /** Reads held now (gauges and tests). */
  get size(): number {
    return this.count;
  }

  /**
   * The answer for `requestId`: at once when it is final or unknown, when no wait is asked, when
   * the asker is not its owner, or past the bounds above; otherwise when it turns final (wake)
   * or after the wait (at most MAX_RESULT_WAIT_MS), read again then.
   */
  answer(requestId: string, wait?: ResultWait): ResultView | undefined | Promise<ResultView | undefined> {
    const view = this.read(requestId);
    if (
      view?.status !== 'QUEUED' ||
      !wait ||
      !(wait.ms > 0) ||
      wait.userId !== view.userId ||
      this.count >= MAX_HELD_READS ||
      (this.perShopper.get(view.userId) ?? 0) >= MAX_HELD_PER_SHOPPER
    ) {
      return view;
    }
    const userId = view.userId;
    return new Promise((resolve) => {
      const holder: Held = {
        userId,
        resolve,
        timer: setTimeout(
          () => {
            this.drop(requestId, holder);
            resolve(this.read(requestId));
          },
          Math.min(wait.ms, MAX_RESULT_WAIT_MS),
        ),
      };
      const list = this.held.get(requestId);
      if (list) {
        list.push(holder);
      } else {
        this.held.set(requestId, [holder]);
      }
      this.count++;
      this.perShopper.set(userId, (this.perShopper.get(userId) ?? 0) + 1);
    });
  }

  /** Answers the held reads of `requestIds` whose results are final now (after the commit that made them so). */
  wake(requestIds: Iterable<string>): void {
    if (this.count === 0) {
      return;
    }
    for (const requestId of requestIds) {
      const list = this.held.get(requestId);
      if (!list) {
        continue;
      }
      const view = this.read(requestId);
      if (view?.status === 'QUEUED') {
        continue;
      }
      this.held.delete(requestId);
      for (const holder of list) {
        clearTimeout(holder.timer);
        this.release(holder);
        holder.resolve(view);
      }
    }
  }

  private drop(requestId: string, holder: Held): void {
    const list = this.held.get(requestId);
    const at = list ? list.indexOf(holder) : -1;
    if (!list || at < 0) {
      return;
    }
    list.splice(at, 1);
    this.release(holder);
    if (list.length === 0) {
      this.held.delete(requestId);
    }
  }

  private release(holder: Held): void {
    this.count--;
    const left = (this.perShopper.get(holder.userId) ?? 1) - 1;
    if (left > 0) {
      this.perShopper.set(holder.userId, left);
    } else {
      this.perShopper.delete(holder.userId);
    }
  }
}
