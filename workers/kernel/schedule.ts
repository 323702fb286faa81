// Which goods the scheduled jobs and the live gauges look at, by time.

/** Goods starting within this window are pre-warmed (object and mirror made before the sale). */
export const PREWARM_AHEAD_MS = 5 * 60_000;
/** Reconciliation and the gauges leave goods alone that ended longer ago than this. */
export const RECONCILE_ENDED_WITHIN_MS = 3600_000;
/** The timeout message normally closes an order at its deadline; the cron steps in after this. */
export const OVERDUE_GRACE_MS = 60_000;
