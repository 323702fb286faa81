import { env } from 'cloudflare:workers';
import { beforeAll, describe, expect, it } from 'vitest';
import { metricsShard } from '../../durable-objects/routing';
import { COUNTERS, HISTOGRAMS } from '../../workers/metrics/catalog';
import {
  ADMIN,
  bearer,
  call,
  createGoods,
  devToken,
  eventually,
  holdObject,
  json,
  metric,
  mirrorRedis,
  purchaseToken,
  reconcileNow,
  scrape,
  settled,
  spreadGoodsIds,
  stockObject,
} from './helpers';

/** A keyed purchase attempt (keyed requests always reach the goods' object, so it decides and counts each one). */
async function keyedBuy(jwt: string, goodsId: number, key: string) {
  const { token, path } = await purchaseToken(jwt, goodsId);
  return call(`/api/seckill/do/${path}`, {
    method: 'POST',
    headers: { ...bearer(jwt), 'idempotency-key': key },
    json: { goodsId, token },
  });
}

describe('GET /admin/metrics', () => {
  beforeAll(spreadGoodsIds);

  it('needs the admin token', async () => {
    const res = await call('/admin/metrics');
    expect(res.status).toBe(401);
    expect(await json(res)).toMatchObject({ error: { code: 'UNAUTHENTICATED' } });
  });

  it('is Prometheus text naming every counter and histogram family', async () => {
    const m = await scrape();
    for (const name of Object.keys(COUNTERS)) {
      expect(m.types.get(name), name).toBe('counter');
    }
    for (const name of Object.keys(HISTOGRAMS)) {
      expect(m.types.get(name), name).toBe('histogram');
    }
    expect(metric(m, 'seckill_metrics_gauges_up')).toBe(1);
  });

  it("counts the object's reservation decisions for a goods exactly", async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const ann = await devToken('mx-ann');
    expect((await keyedBuy(ann, goodsId, 'k1')).status).toBe(202);
    expect((await keyedBuy(ann, goodsId, 'k1')).status).toBe(202); // the same click again: a replay
    expect((await keyedBuy(await devToken('mx-ben'), goodsId, 'k1')).status).toBe(202);
    expect((await keyedBuy(await devToken('mx-cat'), goodsId, 'k1')).status).toBe(410);
    const goods_id = String(goodsId);
    const m = await eventually(async () => {
      const s = await scrape();
      return metric(s, 'seckill_reservations_total', { goods_id }) === 4 ? s : undefined;
    });
    expect(metric(m, 'seckill_reservations_total', { goods_id, outcome: 'accepted' })).toBe(2);
    expect(metric(m, 'seckill_reservations_total', { goods_id, outcome: 'replay' })).toBe(1);
    expect(metric(m, 'seckill_reservations_total', { goods_id, outcome: 'sold_out' })).toBe(1);
  });

  it('counts requests by route pattern and outcome, with a latency histogram', async () => {
    const route = '/admin/metrics';
    const before = await scrape();
    const unauthenticated = { route, method: 'GET', outcome: 'unauthenticated' };
    for (let i = 0; i < 3; i++) {
      expect((await call('/admin/metrics')).status).toBe(401);
    }
    const after = await eventually(async () => {
      const s = await scrape();
      return metric(s, 'seckill_http_requests_total', unauthenticated) - metric(before, 'seckill_http_requests_total', unauthenticated) ===
        3
        ? s
        : undefined;
    });
    // The raw path never becomes a label: no series per goods id or token.
    expect(after.samples.filter((s) => s.name === 'seckill_http_requests_total' && /\/\d/.test(s.labels.route ?? ''))).toEqual([]);
    const buckets = after.samples.filter((s) => s.name === 'seckill_http_request_duration_ms_bucket' && s.labels.route === route);
    expect(buckets.length).toBe(HISTOGRAMS.seckill_http_request_duration_ms.buckets.length + 1);
    expect(buckets.map((b) => b.value)).toEqual([...buckets.map((b) => b.value)].sort((a, b) => a - b));
    const count = metric(after, 'seckill_http_request_duration_ms_count', { route });
    expect(buckets.at(-1)?.value).toBe(count);
    expect(count - metric(before, 'seckill_http_request_duration_ms_count', { route })).toBeGreaterThanOrEqual(4);
  });

  it("answers in time when a goods' stock shard does not: that goods' object gauges left out, and counted", async () => {
    const [held, open] = [await createGoods({ stock: 3 }), await createGoods({ stock: 3 })];
    for (const { goodsId } of [held, open]) {
      expect((await keyedBuy(await devToken(`mx-held-${goodsId}`), goodsId, 'k')).status).toBe(202);
    }
    const objectStock = (m: Awaited<ReturnType<typeof scrape>>, goodsId: number) =>
      m.samples.filter((s) => s.name === 'seckill_goods_stock' && s.labels.goods_id === String(goodsId) && s.labels.source === 'object');
    expect(metric(await scrape(), 'seckill_metrics_goods_unanswered')).toBe(0);

    const { reopened } = await holdObject(stockObject(held.goodsId), 8_000);
    const started = Date.now();
    const m = await scrape();
    // The scrape's 3 s for an object, not the 8 s the object is held.
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(objectStock(m, held.goodsId)).toEqual([]);
    expect(objectStock(m, open.goodsId).map((s) => s.value)).toEqual([2]);
    expect(metric(m, 'seckill_goods_stock', { goods_id: String(held.goodsId), source: 'database' })).toBeGreaterThan(0);
    expect(metric(m, 'seckill_metrics_goods_unanswered')).toBe(1);
    expect(metric(m, 'seckill_metrics_gauges_up')).toBe(1);

    await reopened;
    const after = await scrape();
    expect(objectStock(after, held.goodsId).map((s) => s.value)).toEqual([2]);
    expect(metric(after, 'seckill_metrics_goods_unanswered')).toBe(0);
  });

  it('answers 503 UNAVAILABLE in time when a metrics shard does not, rather than counters summed without it', async () => {
    const { reopened } = await holdObject(metricsShard(env, 5), 9_000);
    const started = Date.now();
    const res = await call('/admin/metrics', { headers: ADMIN });
    // The isolate's flush (3 s at most, if its shard is the one held) and the counters' 3 s.
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await json(res)).toMatchObject({ error: { code: 'UNAVAILABLE' } });
    await reopened;
    expect(metric(await scrape(), 'seckill_metrics_gauges_up')).toBe(1);
  });

  it('reports stock from every side, orders by status, queue lag and the last reconciliation', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    for (const user of ['mx-dee', 'mx-eli']) {
      expect((await keyedBuy(await devToken(user), goodsId, 'k')).status).toBe(202);
    }
    await settled(goodsId);
    await reconcileNow(goodsId);
    const goods_id = String(goodsId);
    const m = await scrape();
    expect(metric(m, 'seckill_goods_total_stock', { goods_id })).toBe(3);
    expect(metric(m, 'seckill_goods_stock', { goods_id, source: 'object' })).toBe(1);
    expect(metric(m, 'seckill_goods_stock', { goods_id, source: 'database' })).toBe(1);
    if (mirrorRedis()) {
      expect(metric(m, 'seckill_goods_stock', { goods_id, source: 'mirror' })).toBe(1);
    }
    expect(metric(m, 'seckill_orders', { goods_id, status: 'PENDING_PAYMENT' })).toBe(2);
    expect(metric(m, 'seckill_orders', { goods_id, status: 'PAID' })).toBe(0);
    expect(metric(m, 'seckill_reservations_in_flight', { goods_id })).toBe(0);
    expect(metric(m, 'seckill_outbox_pending', { goods_id })).toBe(0);
    expect(metric(m, 'seckill_goods_paused', { goods_id })).toBe(0);
    expect(metric(m, 'seckill_reconcile_last_discrepancies', { goods_id })).toBe(0);
    expect(Math.abs(metric(m, 'seckill_reconcile_last_run_timestamp_seconds', { goods_id }) - Date.now() / 1000)).toBeLessThan(120);
    // The two orders went through the queue: their lag was measured and they were acked.
    expect(metric(m, 'seckill_queue_lag_ms_count', { queue: 'orders' })).toBeGreaterThanOrEqual(2);
    expect(metric(m, 'seckill_queue_messages_total', { queue: 'orders', outcome: 'acked' })).toBeGreaterThanOrEqual(2);
  });
});
