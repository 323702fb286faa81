import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { Metrics } from '../../durable-objects/metrics/index';
import type { MetricsStorage } from '../../durable-objects/metrics/storage';
import { METRICS_SHARDS, metricsShard } from '../../durable-objects/routing';
import { MetricsShipper } from '../../workers/metrics/flush';
import { type MetricsDelta, mergeDeltas } from '../../workers/metrics/registry';
import { metric, scrape, watchStatements } from './helpers';

// The totals are spread over METRICS_SHARDS objects (each isolate ships to one of them); the
// scrape sums every shard, so what any shard holds shows up once and only once.
//
// The tests of one shard's writes use objects of the class under names no isolate flushes to:
// this isolate's own metrics go to a shard drawn at random, and its pending sum and alarm in a
// test's shard made rehearsals fail (an alarm already run, a write the test did not make, an
// alarm already set). metricsShard takes its index modulo METRICS_SHARDS, so an index past the
// last shard is one of the fleet's: hence names of their own.
const lone = (n: number): DurableObjectStub<Metrics> => env.METRICS.get(env.METRICS.idFromName(`metrics-test:${n}`));

/** A counter's value in a shard's totals (0 when absent). */
async function counterOf(shard: DurableObjectStub<Metrics>, name: string, labels: Record<string, string>): Promise<number> {
  const { counters } = await shard.totals();
  return counters.filter((c) => c.name === name && sameLabels(c.labels, labels)).reduce((n, c) => n + c.value, 0);
}

/** A histogram's count and sum in a shard's totals. */
async function histogramOf(
  shard: DurableObjectStub<Metrics>,
  name: string,
  labels: Record<string, string>,
): Promise<{ count: number; sum: number }> {
  const { histograms } = await shard.totals();
  const h = histograms.find((x) => x.name === name && sameLabels(x.labels, labels));
  return { count: h?.count ?? 0, sum: h?.sum ?? 0 };
}

function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const sorted = (l: Record<string, string>) => JSON.stringify(Object.entries(l).sort(([x], [y]) => (x < y ? -1 : 1)));
  return sorted(a) === sorted(b);
}

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

  it('a shard writes each series once per interval, however many isolates flush to it', async () => {
    const shard = lone(3);
    const labels = { route: '/metrics-write-behind', method: 'POST', outcome: 'ok' };
    const delta: MetricsDelta = {
      counters: [
        { name: 'seckill_http_requests_total', labels, value: 1 },
        { name: 'seckill_http_requests_total', labels: { ...labels, outcome: 'rejected' }, value: 2 },
      ],
      histograms: [
        latency(
          new Array<number>(12).fill(0).map((_, j) => (j === 1 ? 1 : 0)),
          7,
        ),
      ].map((h) => ({ ...h, labels: { route: labels.route } })),
    };
    const rows = await rowsWrittenBy(shard, async () => {
      // Fifty isolates' flushes in one interval, then its write.
      for (let i = 0; i < 50; i++) {
        await shard.add(delta);
      }
      // Heard, not yet written: the totals (what the scrape sums) have them.
      expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(50);
      expect(await runDurableObjectAlarm(shard)).toBe(true);
    });
    // Three series, each written once (a row and its key's index entry): about 200 rows when every flush was written.
    expect(rows).toBeLessThanOrEqual(6);
    // Written, and kept by a new instance.
    await runInDurableObject(shard, (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
    const fresh = lone(3);
    expect(await counterOf(fresh, 'seckill_http_requests_total', labels)).toBe(50);
    expect(await counterOf(fresh, 'seckill_http_requests_total', { ...labels, outcome: 'rejected' })).toBe(100);
    expect(await histogramOf(fresh, 'seckill_http_request_duration_ms', { route: labels.route })).toEqual({ count: 50, sum: 350 });
    // The next interval updates the three rows in place: a row each.
    const again = await rowsWrittenBy(fresh, async () => {
      await fresh.add(delta);
      expect(await runDurableObjectAlarm(fresh)).toBe(true);
    });
    expect(again).toBeLessThanOrEqual(3);
    expect((await histogramOf(fresh, 'seckill_http_request_duration_ms', { route: labels.route })).count).toBe(51);
  });

  it('a write that fails keeps the sum for the next alarm', async () => {
    const shard = lone(4);
    const labels = { route: '/metrics-write-fails', method: 'GET', outcome: 'ok' };
    await shard.add({ counters: [{ name: 'seckill_http_requests_total', labels, value: 3 }], histograms: [] });
    // The storage refuses the first write.
    await runInDurableObject(shard, (instance: Metrics) => {
      const store = (instance as unknown as { store: MetricsStorage }).store;
      const addCounter = store.addCounter.bind(store);
      let refused = false;
      store.addCounter = (...args) => {
        if (!refused) {
          refused = true;
          throw new Error('storage refused for the test');
        }
        addCounter(...args);
      };
    });
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(3);
    expect(await runInDurableObject(shard, (_instance, state) => state.storage.getAlarm())).not.toBeNull();
    await shard.add({ counters: [{ name: 'seckill_http_requests_total', labels, value: 4 }], histograms: [] });
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    await runInDurableObject(shard, (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
    expect(await counterOf(lone(4), 'seckill_http_requests_total', labels)).toBe(7);
  });

  it('a flush the shard could not take is not counted, so the isolate sending it again counts it once', async () => {
    const shard = lone(6);
    const labels = { route: '/metrics-alarm-fails', method: 'GET', outcome: 'ok' };
    const delta: MetricsDelta = { counters: [{ name: 'seckill_http_requests_total', labels, value: 5 }], histograms: [] };
    // The storage refuses the alarm the shard sets for a flush into an empty sum.
    const first = await runInDurableObject(shard, async (instance: Metrics, state) => {
      const setAlarm = state.storage.setAlarm.bind(state.storage);
      state.storage.setAlarm = () => {
        state.storage.setAlarm = setAlarm;
        return Promise.reject(new Error('storage refused for the test'));
      };
      return instance.add(delta).then(
        () => 'taken',
        (error: Error) => error.message,
      );
    });
    expect(first).toBe('storage refused for the test');
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(0);
    // The isolate keeps the flush and sends it again (workers/metrics/flush.ts MetricsShipper).
    await shard.add(delta);
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(5);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(5);
  });

  it("a flush sent again under its id counts once; the next one, and another isolate's, count", async () => {
    const shard = lone(7);
    const labels = { route: '/metrics-flush-ids', method: 'GET', outcome: 'ok' };
    const delta = (value: number): MetricsDelta => ({
      counters: [{ name: 'seckill_http_requests_total', labels, value }],
      histograms: [],
    });
    await shard.add(delta(5), { isolate: 'a', seq: 1 });
    await shard.add(delta(5), { isolate: 'a', seq: 1 });
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(5);
    await shard.add(delta(2), { isolate: 'a', seq: 2 });
    // A copy of the first that lands after the second: counted already.
    await shard.add(delta(5), { isolate: 'a', seq: 1 });
    await shard.add(delta(3), { isolate: 'b', seq: 1 });
    // An earlier build's flush carries no id.
    await shard.add(delta(1));
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(11);
    // Written and read back, the ids still hold.
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    await shard.add(delta(2), { isolate: 'a', seq: 2 });
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(11);
  });

  it("an isolate's flush that its shard never answers is given up at the deadline and sent again, counting once", async () => {
    const shard = lone(8);
    const labels = { route: '/metrics-flush-deadline', method: 'GET', outcome: 'ok' };
    const gathered: MetricsDelta[] = [];
    const gather = (value: number) => gathered.push({ counters: [{ name: 'seckill_http_requests_total', labels, value }], histograms: [] });
    // The shard's answers are lost while `silent` (the call lands, its answer never comes), or
    // the call is refused outright while `refusing`.
    let silent = true;
    let refusing = false;
    let calls = 0;
    const deadlineMs = 300;
    const shipper = new MetricsShipper(
      {
        take: () => gathered.shift(),
        isolate: () => 'deadline-test',
        send: async (delta, from) => {
          calls++;
          if (refusing) {
            throw new Error('refused for the test');
          }
          await shard.add(delta, from);
          if (silent) {
            await new Promise(() => {});
          }
        },
      },
      deadlineMs,
    );
    gather(5);
    const started = Date.now();
    const first = shipper.ship();
    // A flush asked for while the send is under way leaves its counts to the next one.
    await new Promise((resolve) => setTimeout(resolve, 50));
    gather(2);
    await shipper.ship();
    expect(calls).toBe(1);
    await first;
    expect(Date.now() - started).toBeLessThan(deadlineMs + 1_500);
    expect(shipper.owes).toBe(true);
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(5);

    // Sent again, under its id: the shard counted it already. Then the counts gathered since.
    silent = false;
    await shipper.ship();
    expect(shipper.owes).toBe(false);
    expect(calls).toBe(3);
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(7);

    // A flush the shard refused counts when sent again.
    refusing = true;
    gather(4);
    await shipper.ship();
    expect(shipper.owes).toBe(true);
    refusing = false;
    await shipper.ship();
    expect(await counterOf(shard, 'seckill_http_requests_total', labels)).toBe(11);
    expect(shipper.owes).toBe(false);
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

/** SQLite rows the shard writes while `work` runs. */
async function rowsWrittenBy(shard: DurableObjectStub<Metrics>, work: () => Promise<void>): Promise<number> {
  const watch = await runInDurableObject(shard, (_instance, state) => watchStatements(state.storage.sql));
  try {
    await work();
  } finally {
    watch.stop();
  }
  return watch.statements.reduce((n, s) => n + s.cursor.rowsWritten, 0);
}
