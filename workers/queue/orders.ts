import { dbOptions, httpDb } from '../../db/client';
import { type WriteResult, writeOrders } from '../../db/orders';
import { goodsStock } from '../../durable-objects/routing';
import { placementOf } from '../edge/placements';
import { enqueueDeliveries } from '../edge/webhooks';
import { backoffSeconds, queueDelay } from '../kernel/backoff';
import { type Config, getConfig } from '../kernel/config';
import { type GoodsPlacement, OrderMessage, type Settlement, type TimeoutMessage } from '../kernel/contract';
import { deliverTwiceIfAsked, failAfterWriteIfAsked } from '../kernel/dev-faults';
import { log } from '../kernel/log';
import { shardOfOrderId } from '../kernel/shards';
import { flushMetrics } from '../metrics/flush';
import { observeQueueLag } from '../metrics/queue';
import { count } from '../metrics/registry';
import { tellShoppers } from './room-results';

export type Parsed<T> = { message: Message<unknown>; body: T };

/**
 * Splits a batch into valid messages grouped by goods, and the malformed ones (which no
 * retry can fix). Pure, so the grouping is tested without a network.
 */
export function groupByGoods(messages: readonly Message<unknown>[]) {
  const groups = new Map<number, Parsed<OrderMessage>[]>();
  const malformed: Message<unknown>[] = [];
  for (const message of messages) {
    const parsed = OrderMessage.safeParse(message.body);
    if (!parsed.success) {
      malformed.push(message);
      continue;
    }
    const group = groups.get(parsed.data.goodsId) ?? [];
    // The same reservation twice in one batch (a resend): keep one, ack both.
    if (!group.some((p) => p.body.requestId === parsed.data.requestId)) {
      group.push({ message, body: parsed.data });
    } else {
      message.ack();
    }
    groups.set(parsed.data.goodsId, group);
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
    // A consumer has no waitUntil here; one RPC per batch keeps the counts current.
    const flushStarted = Date.now();
    await flushMetrics(env);
    timing.flushMs = Date.now() - flushStarted;
    log.info('orders.batch', { messages: messages.length, groups: groups.size, ...timing, totalMs: Date.now() - started });
  }
}

async function consumeGroups(env: Env, config: Config, groups: Map<number, Parsed<OrderMessage>[]>, timing: BatchTiming): Promise<void> {
  // One fetch per statement and nothing to close: no connection set-up per batch.
  const db = httpDb(dbOptions(config));
  await Promise.all(
    [...groups].map(async ([goodsId, items]) => {
      try {
        const writeStarted = Date.now();
        // The placement is a cached lookup after the first batch of each goods in an isolate.
        const [results, goods] = await Promise.all([
          writeOrders(
            db,
            goodsId,
            items.map((i) => i.body),
          ),
          placementOf(db, goodsId),
        ]);
        if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
          failAfterWriteIfAsked();
        }
        const notifyStarted = Date.now();
        timing.writeMs = Math.max(timing.writeMs, notifyStarted - writeStarted);
        // Independent and both idempotent: a retry repeats whichever of them failed. A timeout
        // that fires before the object heard of its order finds it QUEUED and releases it; the
        // late settle then changes nothing.
        // The shop's order.created events were written with the orders; their send never fails the batch.
        await Promise.all([
          settle(env, goods, items, results),
          scheduleTimeouts(env, items, results),
          enqueueDeliveries(
            env,
            results.flatMap((r) => (r.ok && r.webhookId ? [r.webhookId] : [])),
          ),
        ]);
        // Waiting room: push each settled result to its shopper's live channel (never fails the batch).
        await tellShoppers(
          env,
          goods,
          items.map((i) => i.body),
          results,
        );
        timing.notifyMs = Math.max(timing.notifyMs, Date.now() - notifyStarted);
        for (const i of items) {
          i.message.ack();
        }
        count('seckill_queue_messages_total', { queue: 'orders', outcome: 'acked' }, items.length);
      } catch (error) {
        log.warn('orders.group_failed', { goodsId, messages: items.length, error });
        const { backoffCapSeconds, backoffBaseSeconds } = config.retry;
        for (const i of items) {
          i.message.retry({ delaySeconds: backoffSeconds(i.message.attempts, backoffCapSeconds, backoffBaseSeconds) });
        }
        count('seckill_queue_messages_total', { queue: 'orders', outcome: 'retried' }, items.length);
      }
    }),
  );
}

/** Tells each stock shard what Postgres made of its reservations (the message names the shard). */
async function settle(env: Env, goods: GoodsPlacement, items: Parsed<OrderMessage>[], results: WriteResult[]): Promise<void> {
  const shardOf = new Map(items.map((i) => [i.body.requestId, i.body.shard ?? shardOfOrderId(i.body.orderId)]));
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

async function scheduleTimeouts(env: Env, items: Parsed<OrderMessage>[], results: WriteResult[]): Promise<void> {
  const timeoutOf = new Map(items.map((i) => [i.body.requestId, i.body]));
  const messages = results.flatMap((r) => {
    const body = timeoutOf.get(r.requestId);
    if (!r.ok || !body) {
      return [];
    }
    const timeout: TimeoutMessage = { v: 1, kind: 'pay-timeout', orderId: r.orderId, goodsId: body.goodsId };
    return [{ body: timeout, contentType: 'json' as const, delaySeconds: queueDelay(body.payTimeoutSeconds) }];
  });
  const sends: Promise<unknown>[] = [];
  for (let i = 0; i < messages.length; i += 100) {
    sends.push(env.TIMEOUT_QUEUE.sendBatch(messages.slice(i, i + 100)));
  }
  await Promise.all(sends);
}
