import { dbOptions, httpDb } from '../../db/client';
import { type SqlExecutor, type WriteResult, writeOrders } from '../../db/orders';
import { subscribedTo } from '../../db/webhooks';
import { goodsStock } from '../../durable-objects/routing';
import { placementOf } from '../edge/placements';
import { enqueueDeliveries } from '../edge/webhooks';
import { backoffSeconds, queueDelay } from '../kernel/backoff';
import { type Config, getConfig } from '../kernel/config';
import { type GoodsPlacement, type OrderMessage, PACK_ORDERS_MAX, type Settlement, type TimeoutPack } from '../kernel/contract';
import { deliverTwiceIfAsked, failAfterWriteIfAsked, holdWhilePausedIfAsked } from '../kernel/dev-faults';
import { log } from '../kernel/log';
import { parseOrderQueueMessage } from '../kernel/order-messages';
import { shardOfOrderId } from '../kernel/shards';
import { flushMetrics } from '../metrics/flush';
import { observeQueueLag } from '../metrics/queue';
import { count } from '../metrics/registry';
import { tellShoppers } from './room-results';

/** One goods' part of a batch: its orders (each reservation once) and the messages that carry them. */
export type GoodsGroup = { orders: OrderMessage[]; messages: Message<unknown>[] };

/**
 * Orders one Postgres statement writes at most: a batch of packs can hold 10,000. Each statement
 * is a round trip and a transaction that locks the goods row, so a batch of 100 packs of 20 goes
 * as one (about 600 KB of JSON, well inside what SQL over HTTP takes).
 */
const ORDERS_PER_STATEMENT = 2000;

/**
 * Splits a batch into valid messages grouped by goods, and the malformed ones (which no
 * retry can fix). A message, lone order or pack, carries one goods, so its fate is its group's:
 * acked when the group's orders are written and settled, retried when not. The same
 * reservation twice in a batch (a resend) is written once. Pure, so the grouping is tested
 * without a network.
 */
export function groupByGoods(messages: readonly Message<unknown>[]) {
  const groups = new Map<number, GoodsGroup>();
  const seen = new Set<string>();
  const malformed: Message<unknown>[] = [];
  for (const message of messages) {
    const orders = parseOrderQueueMessage(message.body);
    const first = orders?.[0];
    if (!orders || !first) {
      malformed.push(message);
      continue;
    }
    let group = groups.get(first.goodsId);
    if (!group) {
      group = { orders: [], messages: [] };
      groups.set(first.goodsId, group);
    }
    group.messages.push(message);
    for (const order of orders) {
      if (!seen.has(order.requestId)) {
        seen.add(order.requestId);
        group.orders.push(order);
      }
    }
  }
  return { groups, malformed };
}

/** Where a batch's time went, in ms (the slowest group when a batch holds several goods). */
type BatchTiming = { writeMs: number; notifyMs: number; flushMs: number };

/**
 * The order consumer: per goods, one Postgres statement for the whole group (one fetch over
 * SQL over HTTP), then the goods' object is told what became of each reservation while the
 * payment timeouts are scheduled. Any failure retries that goods' messages with backoff; the
 * ids in the messages make every step safe to repeat.
 */
export async function consumeOrders(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
    await holdWhilePausedIfAsked();
  }
  const started = Date.now();
  const config = getConfig(env);
  // Read once: the runtime may build the list anew on every access.
  const messages = batch.messages;
  observeQueueLag('orders', messages);
  if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
    await deliverTwiceIfAsked(env.ORDER_QUEUE, messages);
  }
  const { groups, malformed } = groupByGoods(messages);
  for (const m of malformed) {
    log.error('orders.malformed_message', { id: m.id, queue: batch.queue });
    // Nothing can make this message valid; the dead-letter queue keeps it for an operator.
    m.retry({ delaySeconds: 0 });
  }
  count('seckill_queue_messages_total', { queue: 'orders', outcome: 'malformed' }, malformed.length);
  const timing: BatchTiming = { writeMs: 0, notifyMs: 0, flushMs: 0 };
  try {
    await consumeGroups(env, config, groups, timing);
  } finally {
    // A consumer has no waitUntil here; one RPC per batch keeps the counts current (where another
    // invocation's send is under way, the counts go with the isolate's next flush).
    const flushStarted = Date.now();
    await flushMetrics(env);
    timing.flushMs = Date.now() - flushStarted;
    log.info('orders.batch', {
      messages: messages.length,
      orders: [...groups.values()].reduce((n, g) => n + g.orders.length, 0),
      groups: groups.size,
      ...timing,
      totalMs: Date.now() - started,
    });
  }
}

async function consumeGroups(env: Env, config: Config, groups: Map<number, GoodsGroup>, timing: BatchTiming): Promise<void> {
  // One fetch per statement and nothing to close: no connection set-up per batch.
  const db = httpDb(dbOptions(config));
  // Once per batch; a failure here fails every group, which the queue retries.
  const events = groups.size > 0 ? subscribedTo(db, 'order.created') : Promise.resolve(false);
  await Promise.all(
    [...groups].map(async ([goodsId, group]) => {
      const { orders, messages } = group;
      try {
        const writeStarted = Date.now();
        // The placement is a cached lookup after the first batch of each goods in an isolate.
        const [results, goods] = await Promise.all([writeInStatements(db, goodsId, orders, await events), placementOf(db, goodsId)]);
        if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
          failAfterWriteIfAsked();
        }
        const notifyStarted = Date.now();
        timing.writeMs = Math.max(timing.writeMs, notifyStarted - writeStarted);
        // Independent and both idempotent: a retry repeats whichever of them failed. A timeout
        // that fires before the object heard of its order finds it QUEUED and releases it; the
        // late settle then changes nothing.
        // The shop's order.created events were written with the orders; their send never fails the batch.
        // The shoppers hear their results (on their live channels, through the waiting room) as
        // soon as the object has settled them, not after the timeouts' and the webhooks' sends:
        // the room counts a purchase as its shopper's only once it has heard of it. Telling
        // never fails the batch; a retry tells again, which the room takes as the same result.
        await Promise.all([
          settle(env, goods, orders, results).then(() => tellShoppers(env, goods, orders, results)),
          scheduleTimeouts(env, goodsId, orders, results),
          enqueueDeliveries(
            env,
            results.flatMap((r) => (r.ok && r.webhookId ? [r.webhookId] : [])),
          ),
        ]);
        timing.notifyMs = Math.max(timing.notifyMs, Date.now() - notifyStarted);
        for (const m of messages) {
          m.ack();
        }
        count('seckill_queue_messages_total', { queue: 'orders', outcome: 'acked' }, messages.length);
      } catch (error) {
        log.warn('orders.group_failed', { goodsId, messages: messages.length, orders: orders.length, error });
        const { backoffCapSeconds, backoffBaseSeconds } = config.retry;
        for (const m of messages) {
          m.retry({ delaySeconds: backoffSeconds(m.attempts, backoffCapSeconds, backoffBaseSeconds) });
        }
        count('seckill_queue_messages_total', { queue: 'orders', outcome: 'retried' }, messages.length);
      }
    }),
  );
}

/** Writes a goods' orders ORDERS_PER_STATEMENT at a time, one statement after the other (they share the goods row). */
async function writeInStatements(db: SqlExecutor, goodsId: number, orders: OrderMessage[], events: boolean): Promise<WriteResult[]> {
  const results: WriteResult[] = [];
  for (let i = 0; i < orders.length; i += ORDERS_PER_STATEMENT) {
    results.push(...(await writeOrders(db, goodsId, orders.slice(i, i + ORDERS_PER_STATEMENT), Date.now(), { events })));
  }
  return results;
}

/** Tells each stock shard what Postgres made of its reservations (the message names the shard). */
async function settle(env: Env, goods: GoodsPlacement, orders: OrderMessage[], results: WriteResult[]): Promise<void> {
  const shardOf = new Map(orders.map((o) => [o.requestId, o.shard ?? shardOfOrderId(o.orderId)]));
  const byShard = new Map<number, Settlement[]>();
  for (const r of results) {
    const shard = shardOf.get(r.requestId) ?? 0;
    const s: Settlement = r.ok
      ? { requestId: r.requestId, ok: true, orderId: r.orderId }
      : { requestId: r.requestId, ok: false, reason: r.reason };
    const list = byShard.get(shard);
    if (list) {
      list.push(s);
    } else {
      byShard.set(shard, [s]);
    }
  }
  await Promise.all([...byShard].map(([shard, settlements]) => goodsStock(env, goods, shard).settle(settlements)));
}

/** Timeout packs per sendBatch: 50 packs of 100 order ids stay well under the queue's 256 KB. */
const TIMEOUT_PACKS_PER_SEND = 50;

/** Schedules the new orders' payment timeouts: a pack per goods, delay and PACK_ORDERS_MAX orders. */
async function scheduleTimeouts(env: Env, goodsId: number, orders: OrderMessage[], results: WriteResult[]): Promise<void> {
  const timeoutOf = new Map(orders.map((o) => [o.requestId, o.payTimeoutSeconds]));
  const byDelay = new Map<number, string[]>();
  for (const r of results) {
    const seconds = timeoutOf.get(r.requestId);
    if (!r.ok || seconds === undefined) {
      continue;
    }
    const delay = queueDelay(seconds);
    const ids = byDelay.get(delay);
    if (ids) {
      ids.push(r.orderId);
    } else {
      byDelay.set(delay, [r.orderId]);
    }
  }
  const messages: MessageSendRequest<TimeoutPack>[] = [];
  for (const [delaySeconds, ids] of byDelay) {
    for (let i = 0; i < ids.length; i += PACK_ORDERS_MAX) {
      const body: TimeoutPack = { v: 1, kind: 'pay-timeout-pack', goodsId, orderIds: ids.slice(i, i + PACK_ORDERS_MAX) };
      messages.push({ body, contentType: 'json', delaySeconds });
    }
  }
  const sends: Promise<unknown>[] = [];
  for (let i = 0; i < messages.length; i += TIMEOUT_PACKS_PER_SEND) {
    sends.push(env.TIMEOUT_QUEUE.sendBatch(messages.slice(i, i + TIMEOUT_PACKS_PER_SEND)));
  }
  await Promise.all(sends);
}
