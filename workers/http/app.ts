import { Hono } from 'hono';
import { RegExpRouter } from 'hono/router/reg-exp-router';
import type { AppEnv } from './context';
import { limitBody } from './middleware/body-limit';
import { requestContext } from './middleware/context';
import { requestMetrics } from './middleware/metrics';
import { shopperFront } from './middleware/shopper-front';
import { notFound, onError } from './on-error';
import { adminDeadLetters } from './routes/admin-dead-letters';
import { admin } from './routes/admin-goods';
import { adminLimits } from './routes/admin-limits';
import { adminWebhooks } from './routes/admin-webhooks';
import { challengeToken } from './routes/challenge-token';
import { dev } from './routes/dev';
import { devFaultRoutes } from './routes/dev-faults';
import { fairness } from './routes/fairness';
import { goods } from './routes/goods';
import { live } from './routes/live';
import { orders } from './routes/orders';
import { payments } from './routes/payments';
import { purchase } from './routes/purchase';
import { queue } from './routes/queue';
import { result } from './routes/result';

/**
 * The shopper API under /api/seckill: every route first meets the client's address, the runtime
 * limits and the shield (shopperFront). The order routes and the sandbox checkout meet the same, in their own
 * modules; the payment provider's webhook does not (it is the provider calling, signed).
 */
const shopper = new Hono<AppEnv>()
  .use(shopperFront)
  .route('/', goods)
  .route('/', challengeToken)
  .route('/', purchase)
  .route('/', result)
  // The waiting room (docs/waiting-room.md).
  .route('/', queue)
  .route('/', live)
  .route('/', fairness);

/** Builds the HTTP app: shopper API, admin API, dev helpers, one error shape. */
export function createApp() {
  // One regular expression for every route, matched once per request; a route it cannot hold
  // fails here, at start, instead of sending every request through the slower trie.
  const app = new Hono<AppEnv>({ router: new RegExpRouter() });
  app.use(requestContext, requestMetrics, limitBody);

  app.route('/api/seckill', shopper);
  // Inline form so staging/production bundles drop the route and its module (see workers/kernel/build-flags.ts).
  if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
    app.route('/api/dev', dev);
    app.route('/admin/dev/faults', devFaultRoutes);
  }
  app.route('/api/orders', orders);
  app.route('/api/payments', payments);
  app.route('/admin', admin);
  app.route('/admin/dead-letters', adminDeadLetters);
  app.route('/admin/limits', adminLimits);
  app.route('/admin/webhooks', adminWebhooks);
  app.get('/api/health', (c) => c.json({ ok: true, serverTime: new Date().toISOString() }));

  app.notFound(notFound);
  app.onError(onError);
  return app;
}
