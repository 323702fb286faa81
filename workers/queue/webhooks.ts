import { dbOptions, httpDb } from '../../db/client';
import {
  type AttemptOutcome,
  claimDeliveries,
  type DeliveryRow,
  getWebhookConfig,
  recordAttempt,
  type WebhookConfigRow,
} from '../../db/webhooks';
import { enqueueDeliveries } from '../edge/webhooks';
import { backoffSeconds, queueDelay } from '../kernel/backoff';
import { getConfig } from '../kernel/config';
import { log } from '../kernel/log';
import type { RetrySchedule } from '../kernel/retry-schedule';
import { webhookSignature } from '../kernel/webhook-signature';
import { WEBHOOK_GIVE_UP_MS, WEBHOOK_TIMEOUT_MS, WebhookMessage, webhookBody } from '../kernel/webhooks';

/**
 * The webhook sender: each message names a delivery row of the outbox. The row is claimed
 * (so one attempt at a time), POSTed signed to the shop's URL with a timeout, and marked
 * DELIVERED on a 2xx; otherwise it is tried again with backoff, as a new delayed message,
 * until WEBHOOK_GIVE_UP_MS after the event (or its redelivery), then FAILED. An event type the
 * shop no longer subscribes to (or no endpoint) ends FAILED without a request; an operator can
 * redeliver it. `now` is the clock the decisions use (tests drive it).
 */
export async function consumeWebhooks(batch: MessageBatch<unknown>, env: Env, now?: number): Promise<void> {
  const config = getConfig(env);
  const ids = new Set<string>();
  for (const m of batch.messages) {
    const parsed = WebhookMessage.safeParse(m.body);
    if (parsed.success) {
      ids.add(parsed.data.deliveryId);
    } else {
      // Nothing can make it valid, and it names no row: the outbox still holds every event.
      log.error('webhooks.malformed_message', { id: m.id });
    }
  }
  const at = now ?? Date.now();
  const db = httpDb(dbOptions(config));
  try {
    const [endpoint, claimed] = await Promise.all([getWebhookConfig(db), claimDeliveries(db, [...ids], at)]);
    const outcomes = await Promise.all(
      claimed.map(async (row) => {
        const outcome = decide(row, await attempt(endpoint, row), at, config.retry);
        await recordAttempt(db, row.id, outcome, at);
        return { row, outcome };
      }),
    );
    const later = new Map<number, string[]>();
    for (const { row, outcome } of outcomes) {
      log[outcome.kind === 'delivered' ? 'info' : 'warn'](`webhooks.${outcome.kind}`, {
        id: row.id,
        attempts: row.attempts,
        statusCode: outcome.statusCode,
        ...(outcome.kind === 'delivered' ? {} : { error: outcome.error }),
      });
      if (outcome.kind === 'retry') {
        const delay = queueDelay(Math.ceil((outcome.nextAttemptAt - at) / 1000), 1);
        later.set(delay, [...(later.get(delay) ?? []), row.id]);
      }
    }
    await Promise.all([...later].map(([delay, retryIds]) => enqueueDeliveries(env, retryIds, delay)));
    batch.ackAll();
  } catch (error) {
    // Postgres did not answer: nothing was recorded, so the whole batch is tried again.
    log.warn('webhooks.batch_failed', { messages: batch.messages.length, error });
    const { backoffCapSeconds, backoffBaseSeconds } = config.retry;
    const attempts = Math.max(1, ...batch.messages.map((m) => m.attempts));
    batch.retryAll({ delaySeconds: backoffSeconds(attempts, backoffCapSeconds, backoffBaseSeconds) });
  }
}

type Sent = { ok: true; statusCode: number } | { ok: false; statusCode: number | null; error: string; final?: boolean };

/** One POST of one event. */
async function attempt(endpoint: WebhookConfigRow | undefined, row: DeliveryRow): Promise<Sent> {
  if (!endpoint?.events.includes(row.type)) {
    return { ok: false, statusCode: null, error: `webhooks are off for ${row.type}`, final: true };
  }
  const body = webhookBody(row);
  const timestamp = Math.floor(Date.now() / 1000);
  try {
    const res = await fetch(endpoint.url, {
      method: 'POST',
      body,
      // A redirect is an answer, not a delivery: the signature was made for this URL.
      redirect: 'manual',
      signal: AbortSignal.timeout(WEBHOOK_TIMEOUT_MS),
      headers: {
        'content-type': 'application/json',
        'user-agent': 'edge-seckill-webhooks/1',
        'webhook-id': row.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': await webhookSignature(endpoint.secret, row.id, timestamp, body),
      },
    });
    // The answer's body is not read; let its connection go.
    await res.body?.cancel();
    return res.status >= 200 && res.status < 300
      ? { ok: true, statusCode: res.status }
      : { ok: false, statusCode: res.status, error: `the shop answered ${res.status}` };
  } catch (error) {
    const timedOut = error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError');
    return {
      ok: false,
      statusCode: null,
      error: timedOut ? `no answer within ${WEBHOOK_TIMEOUT_MS / 1000} s` : error instanceof Error ? error.message : String(error),
    };
  }
}

/** What an attempt's result makes of the delivery: delivered, tried again after a backoff, or failed for good. */
export function decide(row: Pick<DeliveryRow, 'attempts' | 'retrySince'>, sent: Sent, now: number, retry: RetrySchedule): AttemptOutcome {
  if (sent.ok) {
    return { kind: 'delivered', statusCode: sent.statusCode };
  }
  const nextAttemptAt = now + backoffSeconds(row.attempts, retry.backoffCapSeconds, retry.backoffBaseSeconds) * 1000;
  if (sent.final || nextAttemptAt - row.retrySince.getTime() > WEBHOOK_GIVE_UP_MS) {
    return { kind: 'failed', statusCode: sent.statusCode, error: sent.error };
  }
  return { kind: 'retry', statusCode: sent.statusCode, error: sent.error, nextAttemptAt };
}
