import { type Db, withDbFor } from '../../db/client';
import {
  claimDeadLetter,
  type DeadLetterRow,
  findDeadLetter,
  type NewDeadLetter,
  storeDeadLetters,
  unclaimDeadLetter,
} from '../../db/dead-letters';
import { backoffSeconds } from '../kernel/backoff';
import { getConfig } from '../kernel/config';
import { OrderMessage, TimeoutMessage } from '../kernel/contract';
import { log } from '../kernel/log';

/** The dead-letter consumer's first wait when Postgres is down; it doubles up to the consumers' cap. */
const DEAD_LETTER_RETRY_SECONDS = 30;

export type SourceQueue = 'orders' | 'timeouts' | 'unknown';

/** A dead body's key: its reservation or order, else the message (and its place in a pack). */
function messageKey(message: Message<unknown>, body = message.body, index = 0): string {
  const order = body as { requestId?: unknown; orderId?: unknown; kind?: unknown } | null;
  if (order && typeof order === 'object') {
    if (typeof order.requestId === 'string') {
      return `order:${order.requestId}`;
    }
    if (typeof order.orderId === 'string') {
      return `${String(order.kind)}:${order.orderId}`;
    }
  }
  return index === 0 ? `message:${message.id}` : `message:${message.id}:${index}`;
}

/** Which queue a dead message came from, by its kind (the dead-letter queue does not say). */
function sourceQueue(body: unknown): SourceQueue {
  const kind = (body as { kind?: unknown } | null)?.kind;
  return kind === 'reserve' || kind === 'reserve-pack' ? 'orders' : kind === 'pay-timeout' ? 'timeouts' : 'unknown';
}

/**
 * The bodies a dead message is kept as: a pack's orders one by one (so each is counted, found
 * and re-driven as the reservation or timeout it is), anything else as it came.
 */
function bodiesOf(message: Message<unknown>): unknown[] {
  const body = message.body as { kind?: unknown; orders?: unknown; orderIds?: unknown; goodsId?: unknown } | null;
  if (body && typeof body === 'object' && body.kind === 'reserve-pack' && Array.isArray(body.orders) && body.orders.length > 0) {
    return body.orders;
  }
  if (body && typeof body === 'object' && body.kind === 'pay-timeout-pack' && Array.isArray(body.orderIds) && body.orderIds.length > 0) {
    // Kept as the lone timeout messages they stand for, which the timeout queue takes back one by one.
    return body.orderIds.map((orderId: unknown): unknown => ({ v: 1, kind: 'pay-timeout', orderId, goodsId: body.goodsId }));
  }
  return [message.body];
}

function goodsOf(body: unknown): number | null {
  const g = (body as { goodsId?: unknown } | null)?.goodsId;
  return typeof g === 'number' && Number.isSafeInteger(g) ? g : null;
}

/**
 * Messages that exhausted their retries land here and are kept in Postgres, where the goods'
 * stats count them and an operator can re-drive them. Nothing is dropped: if Postgres is
 * down too, the message is retried on this queue. A message that dies again after a re-drive
 * reopens its row.
 */
export async function consumeDeadLetters(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const config = getConfig(env);
  // One row per key: a batch may carry the same message twice, and an upsert may touch a row once.
  const rows = new Map<string, NewDeadLetter>();
  for (const m of batch.messages) {
    for (const [index, body] of bodiesOf(m).entries()) {
      const queue = sourceQueue(body);
      const key = messageKey(m, body, index);
      rows.set(`${queue}|${key}`, { queue, messageKey: key, goodsId: goodsOf(body), body: body ?? {}, attempts: m.attempts });
    }
  }
  try {
    await withDbFor(config, (db) => storeDeadLetters(db, [...rows.values()]), 1);
    for (const row of rows.values()) {
      log.error('dead_letter.stored', { key: row.messageKey, attempts: row.attempts });
    }
    batch.ackAll();
  } catch (error) {
    log.error('dead_letter.store_failed', { messages: batch.messages.length, error });
    // Postgres is unreachable: wait and try again (max_retries is high on this queue), never
    // drop. An order message lost here anyway is sent again by its goods' object until settled.
    const { backoffCapSeconds } = config.retry;
    const attempts = Math.max(1, ...batch.messages.map((m) => m.attempts));
    batch.retryAll({ delaySeconds: backoffSeconds(attempts, backoffCapSeconds, Math.min(DEAD_LETTER_RETRY_SECONDS, backoffCapSeconds)) });
  }
}

export type RedriveResult =
  | { ok: true; id: number; queue: 'orders' | 'timeouts' }
  | { ok: false; id: number; reason: 'NOT_FOUND' | 'ALREADY_REDRIVEN' | 'UNROUTABLE' | 'MALFORMED' | 'SEND_FAILED' };

/** The queue a dead letter goes back to, if its body is one that queue's consumer accepts. */
function destination(env: Env, row: DeadLetterRow): { queue: Queue; name: 'orders' | 'timeouts' } | 'UNROUTABLE' | 'MALFORMED' {
  if (row.queue === 'orders') {
    return OrderMessage.safeParse(row.body).success ? { queue: env.ORDER_QUEUE, name: 'orders' } : 'MALFORMED';
  }
  if (row.queue === 'timeouts') {
    return TimeoutMessage.safeParse(row.body).success ? { queue: env.TIMEOUT_QUEUE, name: 'timeouts' } : 'MALFORMED';
  }
  return 'UNROUTABLE';
}

/**
 * Sends a dead letter's body back to its source queue. The row is claimed first (a guarded
 * update of redriven_at), so two operators re-driving at once send it once; a failed send
 * gives the claim back. The consumers are idempotent, so a re-driven message that already
 * took effect changes nothing.
 */
export async function redriveDeadLetter(env: Env, db: Db, id: number, now = Date.now()): Promise<RedriveResult> {
  const row = await findDeadLetter(db, id);
  if (!row) {
    return { ok: false, id, reason: 'NOT_FOUND' };
  }
  if (row.redrivenAt !== null) {
    return { ok: false, id, reason: 'ALREADY_REDRIVEN' };
  }
  const to = destination(env, row);
  if (typeof to === 'string') {
    return { ok: false, id, reason: to };
  }
  if (!(await claimDeadLetter(db, id, now))) {
    return { ok: false, id, reason: 'ALREADY_REDRIVEN' };
  }
  try {
    await to.queue.send(row.body, { contentType: 'json' });
  } catch (error) {
    log.error('dead_letter.redrive_failed', { id, queue: to.name, error });
    await unclaimDeadLetter(db, id);
    return { ok: false, id, reason: 'SEND_FAILED' };
  }
  log.info('dead_letter.redriven', { id, queue: to.name, key: row.messageKey });
  return { ok: true, id, queue: to.name };
}
