// Every counter and histogram the system records, with its help text and labels. Names
// follow Prometheus conventions; label sets are fixed here so cardinality stays bounded
// (routes are patterns, goods ids are the handful of current sales; the Metrics object drops
// series nobody has touched for a week, so old sales' goods ids go away).

/** Latency buckets (milliseconds) shared by the request and queue histograms' lower end. */
const REQUEST_BUCKETS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];
const LAG_BUCKETS_MS = [50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000];

export const COUNTERS = {
  seckill_http_requests_total: {
    help: 'HTTP requests by route pattern, method and outcome (accepted, ok, or the error code: sold_out, rate_limited, banned, token_invalid, ...).',
    labels: ['route', 'method', 'outcome'],
  },
  seckill_reservations_total: {
    help: "Reservation decisions taken by the goods' object, by outcome (accepted, replay, or the refusal reason).",
    labels: ['goods_id', 'outcome'],
  },
  seckill_units_reserved_total: {
    help: "Units the goods' object accepted (a reservation of 2 counts 2); with seckill_orders, every figure is in units.",
    labels: ['goods_id'],
  },
  seckill_queue_messages_total: {
    help: 'Messages handled by a queue consumer, by outcome (acked, retried, malformed).',
    labels: ['queue', 'outcome'],
  },
  seckill_mirror_operations_total: {
    help: 'Redis mirror reads and writes by operation and outcome (ok, miss, error, skipped while Redis is considered down).',
    labels: ['operation', 'outcome'],
  },
  seckill_units_refused_total: {
    help: "Units Postgres refused for want of stock although the goods' object had them (Postgres holds less than the object): held aside until reconciliation finds room. Any is an alarm.",
    labels: ['goods_id'],
  },
  seckill_outbox_resends_total: {
    help: "Order messages a goods' object sent again because their reservation had not settled after OUTBOX_RESEND_SECONDS (and doubling): Postgres or the consumer is behind.",
    labels: ['goods_id'],
  },
  seckill_edge_copy_renewals_total: {
    help: "Renewals of the edge's copies (goods_list, page_stock, allowlist, activity_holders, goods_holders) by where they came from: data_center (the copy another isolate of the data center left), postgres, mirror or objects (the source itself), failed (no source answered). Per data center a source should hear about one renewal a second per copy (the goods list, a goods page's stock, an activity's or a per-goods sale's holders) and one load a version per allowlist, whatever the crowd.",
    labels: ['copy', 'source'],
  },
  seckill_edge_rule_checks_total: {
    help: "A sale's rules checked at the edge (at the waiting room's join, the token and the page's eligibility), by rule (allowlist, activity, allowlist_activity, or units_held: a per-goods sale's units, on the page) and by what answered: edge (the isolate's copies, or a sale not started, where nobody holds a unit) or postgres (a statement: an isolate whose copies are not there yet, or over their bound).",
    labels: ['rule', 'answered_by'],
  },
  seckill_reconcile_runs_total: {
    help: 'Reconciliation runs by trigger (cron, admin).',
    labels: ['trigger'],
  },
  seckill_reconcile_discrepancies_total: {
    help: 'Discrepancies found by reconciliation runs, by goods and kind (a problem still there is found again by every run).',
    labels: ['goods_id', 'kind'],
  },
  seckill_reconcile_actions_total: {
    help: 'Repairs made by reconciliation runs, by goods and action.',
    labels: ['goods_id', 'action'],
  },
} as const;

export const HISTOGRAMS = {
  seckill_http_request_duration_ms: {
    help: 'HTTP request latency in milliseconds, by route pattern.',
    labels: ['route'],
    buckets: REQUEST_BUCKETS_MS,
  },
  seckill_queue_lag_ms: {
    help: 'Time from a message being sent to its consumer starting on it, in milliseconds.',
    labels: ['queue'],
    buckets: LAG_BUCKETS_MS,
  },
} as const;

export type CounterName = keyof typeof COUNTERS;
export type HistogramName = keyof typeof HISTOGRAMS;
export type CounterLabels<N extends CounterName> = Record<(typeof COUNTERS)[N]['labels'][number], string>;
export type HistogramLabels<N extends HistogramName> = Record<(typeof HISTOGRAMS)[N]['labels'][number], string>;
