import { ConfigError, getConfig } from '../kernel/config';
import { log } from '../kernel/log';
import { consumeDeadLetters } from './dead-letters';
import { consumeOrders } from './orders';
import { queueRole } from './roles';
import { consumeTimeouts } from './timeouts';
import { consumeWebhooks } from './webhooks';

// A misconfigured deploy must not burn the messages' retries in seconds and push orders to
// the dead-letter queue: hold them back long enough for an operator to fix the secret.
const CONFIG_RETRY_SECONDS = 15 * 60;
const DEAD_LETTER_CONFIG_RETRY_SECONDS = 12 * 3600;

/** Routes a batch by its queue's role; names carry an environment suffix in staging/production. */
export function handleQueue(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const role = queueRole(batch.queue);
  try {
    getConfig(env);
  } catch (error) {
    if (!(error instanceof ConfigError)) {
      throw error;
    }
    log.error('config.invalid', { queue: batch.queue, messages: batch.messages.length, issues: error.issues });
    batch.retryAll({ delaySeconds: role === 'dead-letters' ? DEAD_LETTER_CONFIG_RETRY_SECONDS : CONFIG_RETRY_SECONDS });
    return Promise.resolve();
  }
  switch (role) {
    case 'dead-letters':
      return consumeDeadLetters(batch, env);
    case 'timeouts':
      return consumeTimeouts(batch, env);
    case 'orders':
      return consumeOrders(batch, env);
    case 'webhooks':
      return consumeWebhooks(batch, env);
    default:
      // An unknown queue bound to this Worker: retry so nothing is lost while someone looks.
      log.error('queue.unknown', { queue: batch.queue });
      batch.retryAll({ delaySeconds: 60 });
      return Promise.resolve();
  }
}
