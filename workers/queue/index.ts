import { consumeDeadLetters } from './dead-letters';
import { consumeOrders } from './orders';
import { consumeTimeouts } from './timeouts';

/** Routes a batch by its queue's role; names carry an environment suffix in staging/production. */
export function handleQueue(batch: MessageBatch<unknown>, env: Env): Promise<void> {
  const name = batch.queue;
  if (/(^|-)dlq(-|$)/.test(name)) {
    return consumeDeadLetters(batch, env);
  }
  if (/(^|-)order-timeouts(-|$)/.test(name)) {
    return consumeTimeouts(batch, env);
  }
  if (/(^|-)orders(-|$)/.test(name)) {
    return consumeOrders(batch, env);
  }
  // An unknown queue bound to this Worker: retry so nothing is lost while someone looks.
  console.error(JSON.stringify({ level: 'error', event: 'queue.unknown', queue: name }));
  batch.retryAll({ delaySeconds: 60 });
  return Promise.resolve();
}
