// Queue names carry an environment suffix when deployed (seckill-orders-production), and a
// shop may prefix them too; the Worker dispatches by the role word in the name.

export type QueueRole = 'orders' | 'timeouts' | 'dead-letters' | 'webhooks';

/** The role of a queue by name, e.g. `seckill-order-timeouts-staging` -> timeouts; undefined if unknown. */
export function queueRole(name: string): QueueRole | undefined {
  // Most specific first: a dead-letter queue of orders ("orders-dlq") is a dead-letter queue.
  if (/(^|-)dlq(-|$)/.test(name)) {
    return 'dead-letters';
  }
  if (/(^|-)order-timeouts(-|$)/.test(name)) {
    return 'timeouts';
  }
  if (/(^|-)orders(-|$)/.test(name)) {
    return 'orders';
  }
  if (/(^|-)webhooks(-|$)/.test(name)) {
    return 'webhooks';
  }
  return undefined;
}
