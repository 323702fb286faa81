// When the goods' object's one alarm is due next, pure: the earliest of the work waiting for
// it. Storage, the outbox, the leases and the mirror each say what they wait for; the object
// keeps one alarm at the earliest (index.ts ensureAlarm).

/** How often the object prunes spent tokens and old rejections while some are left. */
export const PRUNE_INTERVAL_MS = 5 * 60_000;
/** A due retry no sooner than this after the alarm that found it. */
const RETRY_GAP_MS = 100;
/** A lease ask or give-back the instance before left unanswered is tried again this soon. */
const LEASE_RETRY_MS = 1_000;

export type AlarmWork = {
  /** The outbox's next due row (null: none). */
  outboxAt: number | null;
  /** Spent tokens or rejections are left to prune. */
  pruneLeft: boolean;
  leasesPending: boolean;
  /** The mirror's next retry (null: none). */
  mirrorRetryAt: number | null;
};

/** The next alarm after one at `now`, or null when nothing waits. */
export function nextAlarmAt(now: number, w: AlarmWork): number | null {
  const at: number[] = [];
  if (w.outboxAt !== null) {
    at.push(Math.max(w.outboxAt, now + RETRY_GAP_MS));
  } else if (w.pruneLeft) {
    at.push(now + PRUNE_INTERVAL_MS);
  }
  if (w.leasesPending) {
    at.push(now + LEASE_RETRY_MS);
  }
  if (w.mirrorRetryAt !== null) {
    at.push(Math.max(w.mirrorRetryAt, now + RETRY_GAP_MS));
  }
  return at.length > 0 ? Math.min(...at) : null;
}
