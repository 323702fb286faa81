import { withDb } from '../../db/client';
import { type WriteResult, writeOrders } from '../../db/orders';
import { backoffSeconds } from '../../durable-objects/reservation';
import { type Config, getConfig } from '../config';
import { dbOptions } from '../goods';
import { log } from '../log';
import { flushMetrics } from '../metrics/flush';
import { observeQueueLag } from '../metrics/queue';
import { count } from '../metrics/registry';
import { goodsStock } from '../routing';
import { OrderMessage, type Settlement, type TimeoutMessage } from '../schemas';

/** Queues cap a message's delay at 12 hours. */
const MAX_DELAY_SECONDS = 43_200;

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

/**
 * The order consumer: per goods, one Postgres transaction for the whole group, then the
 * goods' object is told what became of each reservation, then the payment timeouts are
 * scheduled. Any failure retries that goods' messages with backoff; the ids in the messages
 * make every step safe to repeat.
 */
export async function consumeOrders(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const config = getConfig(env);
  observeQueueLag('orders', batch.messages);
  const { groups, malformed } = groupByGoods(batch.messages);
  for (const m of malformed) {
    log.error('orders.malformed_message', { id: m.id, queue: batch.queue });
    // Nothing can make this message valid; the dead-letter queue keeps it for an operator.
    m.retry({ delaySeconds: 0 });
  }
  count('seckill_queue_messages_total', { queue: 'orders', outcome: 'malformed' }, malformed.length);
  try {
    await consumeGroups(env, config, groups);
  } finally {
    // A consumer has no waitUntil here; one RPC per batch keeps the counts current.
    await flushMetrics(env);
  }
}

async function consumeGroups(env: Env, config: Config, groups: Map<number, Parsed<OrderMessage>[]>): Promise<void> {
  await withDb({ ...dbOptions(config), max: Math.min(5, groups.size || 1) }, async (db) => {
    await Promise.all(
      [...groups].map(async ([goodsId, items]) => {
        try {
          const results = await writeOrders(
            db,
            goodsId,
            items.map((i) => i.body),
          );
          await settle(env, goodsId, results);
          await scheduleTimeouts(env, items, results);
          for (const i of items) {
            i.message.ack();
          }
          count('seckill_queue_messages_total', { queue: 'orders', outcome: 'acked' }, items.length);
        } catch (error) {
          log.warn('orders.group_failed', { goodsId, messages: items.length, error });
          for (const i of items) {
            i.message.retry({ delaySeconds: backoffSeconds(i.message.attempts) });
          }
          count('seckill_queue_messages_total', { queue: 'orders', outcome: 'retried' }, items.length);
        }
      }),
    );
  });
}

async function settle(env: Env, goodsId: number, results: WriteResult[]): Promise<void> {
  const settlements = results.map(
    (r): Settlement =>
      r.ok ? { requestId: r.requestId, ok: true, orderId: r.orderId } : { requestId: r.requestId, ok: false, reason: r.reason },
  );
  await goodsStock(env, goodsId).settle(settlements);
}

async function scheduleTimeouts(env: Env, items: Parsed<OrderMessage>[], results: WriteResult[]): Promise<void> {
  const timeoutOf = new Map(items.map((i) => [i.body.requestId, i.body]));
  const messages = results.flatMap((r) => {
    const body = timeoutOf.get(r.requestId);
    if (!r.ok || !body) {
      return [];
    }
    const timeout: TimeoutMessage = { v: 1, kind: 'pay-timeout', orderId: r.orderId, goodsId: body.goodsId };
    return [{ body: timeout, contentType: 'json' as const, delaySeconds: Math.min(MAX_DELAY_SECONDS, body.payTimeoutSeconds) }];
  });
  for (let i = 0; i < messages.length; i += 100) {
    await env.TIMEOUT_QUEUE.sendBatch(messages.slice(i, i + 100));
  }
}
