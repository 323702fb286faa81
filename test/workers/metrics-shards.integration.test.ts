import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { METRICS_SHARDS, metricsShard } from '../../durable-objects/routing';
import { mergeDeltas } from '../../workers/metrics/registry';
import { metric, scrape } from './helpers';

// The totals are spread over METRICS_SHARDS objects (each isolate ships to one of them); the
// scrape sums every shard, so what any shard holds shows up once and only once.

const route = { route: '/metrics-shards-test', method: 'GET', outcome: 'ok' };
const path = { route: route.route };
const latency = (counts: number[], sum: number) => ({
  name: 'seckill_http_request_duration_ms',
  labels: path,
  counts,
  sum,
  count: counts.reduce((a, b) => a + b, 0),
});

describe('metrics shards', () => {
  it('the scrape sums the counters and histograms of every shard', async () => {
    const empty = new Array<number>(12).fill(0);
    const one = (i: number) => empty.map((_, j) => (j === i ? 1 : 0));
    await metricsShard(env, 0).add({
      counters: [{ name: 'seckill_http_requests_total', labels: route, value: 2 }],
      histograms: [latency(one(0), 3)],
    });
    await metricsShard(env, 7).add({
      counters: [{ name: 'seckill_http_requests_total', labels: route, value: 5 }],
      histograms: [latency(one(2), 20)],
    });
    await metricsShard(env, METRICS_SHARDS - 1).add({
      counters: [{ name: 'seckill_http_requests_total', labels: route, value: 1 }],
      histograms: [],
    });
    const m = await scrape();
    expect(metric(m, 'seckill_http_requests_total', route)).toBe(8);
    expect(metric(m, 'seckill_http_request_duration_ms_count', path)).toBe(2);
    expect(metric(m, 'seckill_http_request_duration_ms_sum', path)).toBe(23);
    // Cumulative buckets: the 5 ms bucket holds one observation, the 25 ms bucket both.
    expect(metric(m, 'seckill_http_request_duration_ms_bucket', { ...path, le: '5' })).toBe(1);
    expect(metric(m, 'seckill_http_request_duration_ms_bucket', { ...path, le: '25' })).toBe(2);
  });

  it('merging keeps one series per name and labels, whatever order the labels came in', () => {
    const merged = mergeDeltas([
      {
        counters: [{ name: 'c', labels: { a: '1', b: '2' }, value: 1 }],
        histograms: [{ name: 'h', labels: {}, counts: [1, 0], sum: 1, count: 1 }],
      },
      {
        counters: [{ name: 'c', labels: { b: '2', a: '1' }, value: 4 }],
        histograms: [{ name: 'h', labels: {}, counts: [0, 2], sum: 9, count: 2 }],
      },
      // A shard from a build with other buckets does not mix bounds into the sum.
      { counters: [], histograms: [{ name: 'h', labels: {}, counts: [1, 0, 0], sum: 1, count: 1 }] },
    ]);
    expect(merged.counters).toEqual([{ name: 'c', labels: { a: '1', b: '2' }, value: 5 }]);
    expect(merged.histograms).toEqual([{ name: 'h', labels: {}, counts: [1, 2], sum: 10, count: 3 }]);
  });
});
