import { describe, expect, it } from 'vitest';
import { COUNTERS, HISTOGRAMS } from '../../workers/metrics/catalog';
import { renderPrometheus } from '../../workers/metrics/prometheus';
import { count, observe, takeDelta } from '../../workers/metrics/registry';
import { metric, parsePrometheus } from './helpers';

describe('metrics registry', () => {
  it('accumulates counters and histograms per label set until taken, then starts from zero', () => {
    takeDelta();
    count('seckill_queue_messages_total', { queue: 'orders', outcome: 'acked' }, 3);
    count('seckill_queue_messages_total', { outcome: 'acked', queue: 'orders' });
    count('seckill_queue_messages_total', { queue: 'orders', outcome: 'retried' });
    observe('seckill_queue_lag_ms', { queue: 'orders' }, 40);
    observe('seckill_queue_lag_ms', { queue: 'orders' }, 120);
    observe('seckill_queue_lag_ms', { queue: 'orders' }, 10_000_000);
    const delta = takeDelta();
    expect(delta?.counters).toEqual([
      { name: 'seckill_queue_messages_total', labels: { queue: 'orders', outcome: 'acked' }, value: 4 },
      { name: 'seckill_queue_messages_total', labels: { queue: 'orders', outcome: 'retried' }, value: 1 },
    ]);
    const [h] = delta?.histograms ?? [];
    expect(h?.count).toBe(3);
    expect(h?.sum).toBe(10_000_160);
    // 40 <= 50, 120 <= 250, 10,000,000 only in +Inf.
    expect(h?.counts[0]).toBe(1);
    expect(h?.counts[2]).toBe(1);
    expect(h?.counts.at(-1)).toBe(1);
    expect(takeDelta()).toBeUndefined();
  });

  it('ignores negative, zero and non-finite amounts', () => {
    takeDelta();
    count('seckill_reconcile_runs_total', { trigger: 'cron' }, 0);
    count('seckill_reconcile_runs_total', { trigger: 'cron' }, -1);
    observe('seckill_queue_lag_ms', { queue: 'orders' }, Number.NaN);
    expect(takeDelta()).toBeUndefined();
  });
});

describe('Prometheus text', () => {
  it('renders every catalogued family, cumulative buckets and escaped labels, and parses strictly', () => {
    const text = renderPrometheus(
      {
        counters: [{ name: 'seckill_http_requests_total', labels: { route: '/a"b\\c', method: 'GET', outcome: 'ok' }, value: 5 }],
        histograms: [
          {
            name: 'seckill_http_request_duration_ms',
            labels: { route: '/x' },
            counts: [1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4],
            sum: 123456,
            count: 7,
          },
        ],
      },
      [{ name: 'seckill_goods_stock', help: 'Units\nleft.', samples: [{ labels: { goods_id: '1', source: 'object' }, value: 3 }] }],
    );
    const parsed = parsePrometheus(text);
    for (const name of Object.keys(COUNTERS)) {
      expect(parsed.types.get(name)).toBe('counter');
    }
    for (const name of Object.keys(HISTOGRAMS)) {
      expect(parsed.types.get(name)).toBe('histogram');
    }
    expect(parsed.types.get('seckill_goods_stock')).toBe('gauge');
    expect(metric(parsed, 'seckill_http_requests_total', { route: '/a"b\\c' })).toBe(5);
    const buckets = parsed.samples.filter((s) => s.name === 'seckill_http_request_duration_ms_bucket');
    expect(buckets.map((b) => b.value)).toEqual([1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 7]);
    expect(buckets.at(-1)?.labels.le).toBe('+Inf');
    expect(metric(parsed, 'seckill_http_request_duration_ms_count', { route: '/x' })).toBe(7);
    expect(metric(parsed, 'seckill_http_request_duration_ms_sum', { route: '/x' })).toBe(123456);
    expect(metric(parsed, 'seckill_goods_stock', { goods_id: '1', source: 'object' })).toBe(3);
    expect(text).toContain('# HELP seckill_goods_stock Units\\nleft.');
  });

  it('the strict parser refuses what Prometheus would refuse', () => {
    expect(() => parsePrometheus('x 1\n')).toThrow(/no TYPE/);
    expect(() => parsePrometheus('# TYPE x counter\nx{a="1} 1\n')).toThrow();
    expect(() => parsePrometheus('# TYPE x counter\nx one\n')).toThrow(/not a sample/);
    expect(() => parsePrometheus('# TYPE x counter\n# TYPE x counter\n')).toThrow(/repeats/);
    expect(() => parsePrometheus('# TYPE x counter\nx 1')).toThrow(/newline/);
  });
});
