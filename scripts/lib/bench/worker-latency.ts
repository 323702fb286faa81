// A phase's latency inside the Worker, from the Worker's own histogram: `GET /admin/metrics`
// scraped before and after the phase, `seckill_http_request_duration_ms` of the phase's route
// (workers/http/middleware/metrics.ts: from the request reaching the Worker's code to its
// answer). Beside the load generator's figures it says how much of a request's wait the
// Worker's code spends and how much the runtime's own line before and after it (on one workerd
// thread under load, the floor route's p99 is that line alone). Pure: bench.ts scrapes.
import { parsePrometheus } from '../../../web/src/admin/prometheus.ts';
import { round } from '../load/metrics.ts';

export const REQUEST_DURATION = 'seckill_http_request_duration_ms';

/** One route's histogram: observations at or below each bound (cumulative), their count and sum. */
export type Histogram = { bounds: number[]; cumulative: number[]; count: number; sum: number };

/** A quantile as the histogram can tell it: the bucket it fell in, (fromMs, toMs]; toMs null above the last bound. */
export type BucketRange = { fromMs: number; toMs: number | null };

export type WorkerLatency = {
  route: string;
  /** Observations in the phase: the requests the Worker answered (the load generator's count is beside it). */
  requests: number;
  meanMs: number | null;
  p50: BucketRange | null;
  p99: BucketRange | null;
  /** The share answered within each bound (exact: a bound is a bucket's edge). */
  within: { ms: number; share: number }[];
};

/** The route's histogram in a Prometheus text scrape; an empty one when the route has no series yet. */
export function readHistogram(text: string, route: string, name = REQUEST_DURATION): Histogram {
  const buckets: { le: number; value: number }[] = [];
  let count = 0;
  let sum = 0;
  for (const s of parsePrometheus(text)) {
    if (s.labels.route !== route) {
      continue;
    }
    if (s.name === `${name}_bucket` && s.labels.le !== undefined) {
      const le = s.labels.le === '+Inf' ? Number.POSITIVE_INFINITY : Number(s.labels.le);
      if (Number.isFinite(le)) {
        buckets.push({ le, value: s.value });
      }
    } else if (s.name === `${name}_count`) {
      count = s.value;
    } else if (s.name === `${name}_sum`) {
      sum = s.value;
    }
  }
  buckets.sort((a, b) => a.le - b.le);
  return { bounds: buckets.map((b) => b.le), cumulative: buckets.map((b) => b.value), count, sum };
}

/** What was observed between two scrapes of the same histogram (`before` may predate the route's first request). */
export function histogramDelta(after: Histogram, before: Histogram): Histogram {
  const at = (h: Histogram, le: number) => {
    const i = h.bounds.indexOf(le);
    return i < 0 ? 0 : (h.cumulative[i] ?? 0);
  };
  return {
    bounds: after.bounds,
    cumulative: after.bounds.map((le, i) => (after.cumulative[i] ?? 0) - at(before, le)),
    count: after.count - before.count,
    sum: after.sum - before.sum,
  };
}

/** The bucket holding the q-quantile's observation, or null for an empty histogram. */
export function quantileBucket(h: Histogram, q: number): BucketRange | null {
  if (h.count <= 0) {
    return null;
  }
  const rank = Math.ceil(q * h.count);
  for (const [i, le] of h.bounds.entries()) {
    if ((h.cumulative[i] ?? 0) >= rank) {
      return { fromMs: i === 0 ? 0 : (h.bounds[i - 1] ?? 0), toMs: le };
    }
  }
  return { fromMs: h.bounds.at(-1) ?? 0, toMs: null };
}

/** The phase's latency in the Worker, from the route's histogram before and after it. */
export function workerLatency(route: string, before: string, after: string): WorkerLatency {
  const h = histogramDelta(readHistogram(after, route), readHistogram(before, route));
  return {
    route,
    requests: h.count,
    meanMs: h.count > 0 ? round(h.sum / h.count, 1) : null,
    p50: quantileBucket(h, 0.5),
    p99: quantileBucket(h, 0.99),
    within: h.bounds.map((ms, i) => ({ ms, share: h.count > 0 ? round((h.cumulative[i] ?? 0) / h.count, 4) : 0 })),
  };
}

/** The share the Worker answered within `ms` (a bucket bound), or undefined with nothing observed or no such bound. */
export function shareWithin(w: WorkerLatency | undefined, ms: number): number | undefined {
  return w && w.requests > 0 ? w.within.find((x) => x.ms === ms)?.share : undefined;
}

/** "25-50 ms", "above 10,000 ms", or "-". */
export function formatRange(r: BucketRange | null): string {
  if (!r) {
    return '-';
  }
  return r.toMs === null ? `above ${r.fromMs} ms` : `${r.fromMs}-${r.toMs} ms`;
}
