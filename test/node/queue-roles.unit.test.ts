// The Worker dispatches queue batches by the role in the queue's name. Every environment's
// queues in wrangler.toml must reach the right consumer, or orders would sit in a queue nobody
// drains (an unknown queue is retried forever).
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { unstable_readConfig } from 'wrangler';
import { queueRole } from '../../workers/queue/roles';

const configPath = fileURLToPath(new URL('../../wrangler.toml', import.meta.url));

// wrangler's declarations leave its Config untyped here; these are the fields read below.
type Producer = { binding: string; queue: string };
type Consumer = { queue: string; dead_letter_queue?: string };

describe('queueRole', () => {
  it.each([
    ['seckill-orders', 'orders'],
    ['seckill-orders-staging', 'orders'],
    ['seckill-orders-production', 'orders'],
    ['shop-eu-seckill-orders-production', 'orders'],
    ['seckill-order-timeouts', 'timeouts'],
    ['seckill-order-timeouts-staging', 'timeouts'],
    ['seckill-order-timeouts-production', 'timeouts'],
    ['seckill-dlq', 'dead-letters'],
    ['seckill-dlq-staging', 'dead-letters'],
    ['seckill-dlq-production', 'dead-letters'],
    ['seckill-orders-dlq', 'dead-letters'],
    ['seckill-webhooks', 'webhooks'],
    ['seckill-webhooks-staging', 'webhooks'],
    ['seckill-webhooks-production', 'webhooks'],
  ])('%s -> %s', (name, role) => {
    expect(queueRole(name)).toBe(role);
  });

  it.each(['seckill-preorders', 'seckill-ordersx', 'dlqs', 'seckill-order-timeout', 'payments', 'seckill-webhook'])(
    '%s is unknown',
    (name) => {
      expect(queueRole(name)).toBeUndefined();
    },
  );
});

describe.each(['', 'staging', 'production'])('wrangler.toml queues (%s)', (env) => {
  const config = unstable_readConfig({ config: configPath, env: env || undefined }, { hideWarnings: true });
  const producers: Producer[] = config.queues.producers ?? [];
  const consumers: Consumer[] = config.queues.consumers ?? [];

  it('routes every consumed queue to a consumer', () => {
    expect(consumers.map((c) => queueRole(c.queue)).sort()).toEqual(['dead-letters', 'orders', 'timeouts', 'webhooks']);
  });

  it('produces into the queues it consumes, by role', () => {
    const byBinding = Object.fromEntries(producers.map((p) => [p.binding, p.queue]));
    expect(queueRole(byBinding.ORDER_QUEUE ?? '')).toBe('orders');
    expect(queueRole(byBinding.TIMEOUT_QUEUE ?? '')).toBe('timeouts');
    expect(queueRole(byBinding.WEBHOOK_QUEUE ?? '')).toBe('webhooks');
    for (const p of producers) {
      expect(consumers.map((c) => c.queue)).toContain(p.queue);
    }
  });

  it('sends exhausted messages to its own dead-letter queue, which is consumed', () => {
    const dlq = consumers.find((c) => queueRole(c.queue) === 'dead-letters');
    // A webhook message only names its delivery row, which stays pending in Postgres and is
    // sent again by the cron: it has no dead-letter queue.
    const webhooks = consumers.find((c) => queueRole(c.queue) === 'webhooks');
    expect(webhooks?.dead_letter_queue).toBeUndefined();
    for (const c of consumers.filter((c) => c !== dlq && c !== webhooks)) {
      expect(c.dead_letter_queue).toBe(dlq?.queue);
    }
  });

  it(env ? `suffixes every queue with -${env}` : 'uses the unsuffixed local names', () => {
    for (const name of [...producers.map((p) => p.queue), ...consumers.map((c) => c.queue)]) {
      expect(env ? name.endsWith(`-${env}`) : !/-(staging|production)$/.test(name)).toBe(true);
    }
  });
});
