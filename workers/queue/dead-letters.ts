import { withDb } from '../../db/client';
import { deadLetter } from '../../db/schema';
import { getConfig } from '../config';
import { dbOptions } from '../goods';
import { log } from '../log';

function messageKey(message: Message<unknown>): string {
  const body = message.body as { requestId?: unknown; orderId?: unknown; kind?: unknown } | null;
  if (body && typeof body === 'object') {
    if (typeof body.requestId === 'string') {
      return `order:${body.requestId}`;
    }
    if (typeof body.orderId === 'string') {
      return `${String(body.kind)}:${body.orderId}`;
    }
  }
  return `message:${message.id}`;
}

/** Which queue a dead message came from, by its kind (the dead-letter queue does not say). */
function sourceQueue(body: unknown): 'orders' | 'timeouts' | 'unknown' {
  const kind = (body as { kind?: unknown } | null)?.kind;
  return kind === 'reserve' ? 'orders' : kind === 'pay-timeout' ? 'timeouts' : 'unknown';
}

function goodsOf(body: unknown): number | null {
  const g = (body as { goodsId?: unknown } | null)?.goodsId;
  return typeof g === 'number' && Number.isSafeInteger(g) ? g : null;
}

/**
 * Messages that exhausted their retries land here and are kept in Postgres, where the goods'
 * stats count them and an operator can re-drive them. Nothing is dropped: if Postgres is
 * down too, the message is retried on this queue.
 */
export async function consumeDeadLetters(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const config = getConfig(env);
  try {
    await withDb({ ...dbOptions(config), max: 1 }, (db) =>
      db
        .insert(deadLetter)
        .values(
          batch.messages.map((m) => ({
            queue: sourceQueue(m.body),
            messageKey: messageKey(m),
            goodsId: goodsOf(m.body),
            body: m.body ?? {},
            attempts: m.attempts,
          })),
        )
        .onConflictDoNothing(),
    );
    for (const m of batch.messages) {
      log.error('dead_letter.stored', { key: messageKey(m), attempts: m.attempts });
    }
    batch.ackAll();
  } catch (error) {
    log.error('dead_letter.store_failed', { messages: batch.messages.length, error });
    batch.retryAll({ delaySeconds: 30 });
  }
}
