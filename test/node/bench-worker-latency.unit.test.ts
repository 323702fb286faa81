// The bench's latency inside the Worker (scripts/lib/bench/worker-latency.ts), read from the
// Worker's own Prometheus text as workers/metrics/prometheus.ts renders it: the phase's part of
// a histogram between two scrapes, the bucket a quantile falls in, the share within a bound.
import { describe, expect, it } from 'vitest';
import { PURCHASE_ROUTE } from '../../scripts/lib/bench/buyers.ts';
import { formatRange, histogramDelta, quantileBucket, readHistogram, workerLatency } from '../../scripts/lib/bench/worker-latency.ts';
import { HISTOGRAMS } from '../../workers/metrics/catalog.ts';
import { renderPrometheus } from '../../workers/metrics/prometheus.ts';

const BOUNDS = HISTOGRAMS.seckill_http_request_duration_ms.buckets;

/** A scrape holding the request histogram of the purchase route and of another route, from latencies in ms. */
function scrape(purchaseMs: number[], otherMs: number[] = []): string {
  const series = (route: string, values: number[]) => {
    const counts = new Array<number>(BOUNDS.length + 1).fill(0);
    for (const v of values) {
      const i = BOUNDS.findIndex((b) => v <= b);
      counts[i < 0 ? BOUNDS.length : i] = (counts[i < 0 ? BOUNDS.length : i] ?? 0) + 1;
    }
    return {
      name: 'seckill_http_request_duration_ms',
      labels: { route },
      counts,
      sum: values.reduce((a, b) => a + b, 0),
      count: values.length,
    };
  };
  return renderPrometheus(
    {
      counters: [{ name: 'seckill_http_requests_total', labels: { route: PURCHASE_ROUTE, method: 'POST', outcome: 'accepted' }, value: 9 }],
      histograms: [series(PURCHASE_ROUTE, purchaseMs), series('/api/health', otherMs)],
    },
    [],
  );
}

describe("a phase's latency in the Worker", () => {
  it("reads one route's histogram, cumulative, with its count and sum", () => {
    const h = readHistogram(scrape([3, 7, 40, 40, 300], [1, 1]), PURCHASE_ROUTE);
    expect(h.bounds).toEqual([...BOUNDS]);
    expect(h.cumulative.slice(0, 7)).toEqual([1, 2, 2, 4, 4, 4, 5]);
    expect(h.count).toBe(5);
    expect(h.sum).toBe(390);
    expect(readHistogram(scrape([3]), '/no/such/route')).toEqual({ bounds: [], cumulative: [], count: 0, sum: 0 });
  });

  it('keeps only what the phase added between the two scrapes', () => {
    const warm = [200, 200, 200];
    const phase = [4, 30, 30, 30, 80];
    const w = workerLatency(PURCHASE_ROUTE, scrape(warm), scrape([...warm, ...phase], [9]));
    expect(w.requests).toBe(5);
    expect(w.meanMs).toBe(34.8);
    expect(w.p50).toEqual({ fromMs: 25, toMs: 50 });
    expect(w.p99).toEqual({ fromMs: 50, toMs: 100 });
    // The warm-up's 200 ms answers are not the phase's: everything it added was within 100 ms.
    expect(w.within.find((x) => x.ms === 100)?.share).toBe(1);
    expect(w.within.find((x) => x.ms === 25)?.share).toBe(0.2);
  });

  it('takes a route first seen in the phase from an empty histogram', () => {
    const before = readHistogram('', PURCHASE_ROUTE);
    const after = readHistogram(scrape([1, 2, 3, 120]), PURCHASE_ROUTE);
    const d = histogramDelta(after, before);
    expect(d.count).toBe(4);
    expect(quantileBucket(d, 0.5)).toEqual({ fromMs: 0, toMs: 5 });
    expect(quantileBucket(d, 0.99)).toEqual({ fromMs: 100, toMs: 250 });
  });

  it('says when the quantile lies above the last bound, and when nothing was observed', () => {
    const h = readHistogram(scrape([20_000, 30_000]), PURCHASE_ROUTE);
    expect(quantileBucket(h, 0.5)).toEqual({ fromMs: 10_000, toMs: null });
    expect(formatRange(quantileBucket(h, 0.5))).toBe('above 10000 ms');
    const none = workerLatency(PURCHASE_ROUTE, scrape([5]), scrape([5]));
    expect(none).toMatchObject({ requests: 0, meanMs: null, p50: null, p99: null });
    expect(formatRange(none.p99)).toBe('-');
    expect(formatRange({ fromMs: 25, toMs: 50 })).toBe('25-50 ms');
  });
});
