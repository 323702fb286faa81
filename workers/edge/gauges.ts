import type { Db } from '../../db/client';
import { countOpenDeadLettersByQueue } from '../../db/dead-letters';
import { countOrdersByGoodsAndStatus, listGoodsInScope } from '../../db/goods';
import { lastReconciliations } from '../../db/reconciliation';
import type { Config } from '../kernel/config';
import { log } from '../kernel/log';
import { knownStatusName, ORDER_STATUS } from '../kernel/order-status';
import type { GaugeFamily, GaugeSample } from '../metrics/prometheus';
import { OPERATOR_READ, readStocks } from '../mirror/client';
import { goodsSnapshot } from './stock-shards';

// Values read live at scrape time rather than counted: stock as each side sees it, what is
// in flight, orders by status, dead letters, the last reconciliation. A scrape costs a few
// Postgres queries, one snapshot per current goods and stock shard, and one Redis MGET.

function family(name: string, help: string, samples: GaugeSample[]): GaugeFamily {
  return { name, help, samples };
}

/**
 * The gauges for every goods in the reconciliation scope (on sale, about to start, just ended).
 * A goods whose stock shards fail or do not answer within `objectMs` is left out of the
 * object's gauges this time, and counted: gauges may be partial, the scrape may not hang.
 */
export async function collectGauges(env: Env, config: Config, db: Db, now: number, objectMs: number): Promise<GaugeFamily[]> {
  const goods = await listGoodsInScope(db, now);
  const ids = goods.map((g) => g.id);
  const orders = await countOrdersByGoodsAndStatus(db, ids);
  const deadLetters = await countOpenDeadLettersByQueue(db);
  const lastRuns = await lastReconciliations(db, ids);
  let unanswered = 0;
  const snapshots = await Promise.all(
    goods.map((g) =>
      goodsSnapshot(env, g, objectMs).then(
        (s) => s.total,
        (error: unknown) => {
          unanswered++;
          log.warn('metrics.goods_unanswered', { goodsId: g.id, error });
          return undefined;
        },
      ),
    ),
  );
  const mirror = config.redis ? await readStocks(config.redis, ids, OPERATOR_READ) : undefined;

  const stock: GaugeSample[] = [];
  const total: GaugeSample[] = [];
  const paused: GaugeSample[] = [];
  const inFlight: GaugeSample[] = [];
  const outbox: GaugeSample[] = [];
  const outboxAge: GaugeSample[] = [];
  const mirrorStale: GaugeSample[] = [];
  goods.forEach((g, i) => {
    const goods_id = String(g.id);
    const s = snapshots[i];
    total.push({ labels: { goods_id }, value: g.totalStock });
    stock.push({ labels: { goods_id, source: 'database' }, value: g.stock });
    const m = mirror?.[i];
    if (m !== undefined && m !== null) {
      stock.push({ labels: { goods_id, source: 'mirror' }, value: m });
    }
    if (s) {
      stock.push({ labels: { goods_id, source: 'object' }, value: s.remaining });
      paused.push({ labels: { goods_id }, value: s.paused ? 1 : 0 });
      inFlight.push({ labels: { goods_id }, value: s.queued });
      outbox.push({ labels: { goods_id }, value: s.outboxPending });
      outboxAge.push({ labels: { goods_id }, value: s.oldestOutboxAt === null ? 0 : Math.max(0, (now - s.oldestOutboxAt) / 1000) });
      mirrorStale.push({ labels: { goods_id }, value: s.mirrorStaleSince === null ? 0 : Math.max(0, (now - s.mirrorStaleSince) / 1000) });
    }
  });
  const orderSamples: GaugeSample[] = [];
  for (const g of goods) {
    for (const [name, code] of Object.entries(ORDER_STATUS)) {
      const n = orders.find((o) => o.goodsId === g.id && o.status === code)?.n ?? 0;
      orderSamples.push({ labels: { goods_id: String(g.id), status: name }, value: n });
    }
  }
  for (const o of orders) {
    if (!knownStatusName(o.status)) {
      orderSamples.push({ labels: { goods_id: String(o.goodsId), status: `code_${o.status}` }, value: o.n });
    }
  }
  return [
    family('seckill_goods_total_stock', 'Units put on sale.', total),
    family(
      'seckill_goods_stock',
      'Units not held by a live order, as the object (the authority), Postgres and the Redis mirror see them.',
      stock,
    ),
    family('seckill_goods_paused', '1 while an operator has paused the sale.', paused),
    family(
      'seckill_metrics_goods_unanswered',
      "Goods in scope whose stock shards failed or did not answer this scrape in time: their object's gauges are missing.",
      [{ labels: {}, value: unanswered }],
    ),
    family('seckill_reservations_in_flight', 'Reservations accepted by the object and not yet settled by the order consumer.', inFlight),
    family('seckill_outbox_pending', "Order messages in the object's outbox not yet accepted by the queue.", outbox),
    family('seckill_outbox_oldest_age_seconds', 'Age of the oldest outbox row (0 when empty); growing means queue sends fail.', outboxAge),
    family('seckill_mirror_stale_seconds', 'How long the Redis mirror has lagged the object (0 when up to date).', mirrorStale),
    family('seckill_orders', 'Units of the orders by status (an order of 2 counts 2).', orderSamples),
    family(
      'seckill_dead_letters',
      'Messages that exhausted their retries and wait for an operator, by source queue.',
      deadLetters.map((d) => ({ labels: { queue: d.queue }, value: d.n })),
    ),
    family(
      'seckill_reconcile_last_run_timestamp_seconds',
      'When the last reconciliation of the goods ran (Unix seconds).',
      lastRuns.map((r) => ({ labels: { goods_id: String(r.goodsId) }, value: Math.floor(r.runAt.getTime() / 1000) })),
    ),
    family(
      'seckill_reconcile_last_discrepancies',
      'Discrepancies found by the last reconciliation of the goods.',
      lastRuns.map((r) => ({
        labels: { goods_id: String(r.goodsId) },
        value: Array.isArray(r.discrepancies) ? r.discrepancies.length : 0,
      })),
    ),
  ];
}

/** Whether the live gauges could be read (Postgres reachable) at this scrape. */
export function gaugesUp(ok: boolean): GaugeFamily {
  return family('seckill_metrics_gauges_up', '1 when the live gauges (Postgres, objects) were read for this scrape.', [
    { labels: {}, value: ok ? 1 : 0 },
  ]);
}
