import { log } from '../kernel/log';
import type { WebhookMessage } from '../kernel/webhooks';

/**
 * Puts deliveries on the webhook queue after the change that wrote them committed. Never
 * throws: a lost send only delays the event until the cron finds it pending and overdue.
 * `delaySeconds` holds a retry back.
 */
export async function enqueueDeliveries(env: Env, ids: readonly string[], delaySeconds = 0): Promise<void> {
  if (ids.length === 0) {
    return;
  }
  const messages = ids.map((deliveryId) => {
    const body: WebhookMessage = { v: 1, kind: 'webhook', deliveryId };
    return { body, contentType: 'json' as const, ...(delaySeconds > 0 ? { delaySeconds } : {}) };
  });
  try {
    for (let i = 0; i < messages.length; i += 100) {
      await env.WEBHOOK_QUEUE.sendBatch(messages.slice(i, i + 100));
    }
  } catch (error) {
    log.warn('webhooks.enqueue_failed', { deliveries: ids.length, error });
  }
}
