import { createMiddleware } from 'hono/factory';
import { checkLocalBans, clientIp, ipKey, shield } from '../../edge/client-guard';
import { currentLimits } from '../../edge/limits';
import { type AppEnv, waitUntilOf } from '../context';

/**
 * In front of every shopper route, as one middleware (a sold-out flood meets it on every
 * request, and a middleware costs a closure and two promises however little it does):
 *
 * - the client address from `cf-connecting-ip` (a malformed one is 400), and a ban of that
 *   address this isolate already knows is answered at once (403);
 * - the runtime limits into the context, read once per request (the isolate's copy, renewed in
 *   the background; 503 BUSY when none can be had);
 * - the coarse Rate Limiting shield per client address (429), while the runtime per-IP limit is
 *   below its rate.
 */
export const shopperFront = createMiddleware<AppEnv>(async function shopperFront(c, next) {
  const waitUntil = waitUntilOf(c);
  const ip = clientIp(c.req.header('cf-connecting-ip'));
  c.set('clientIp', ip);
  if (ip) {
    checkLocalBans(c.env, [ipKey(ip)], waitUntil);
  }
  const limits = await currentLimits(c.env, waitUntil);
  c.set('limits', limits);
  await shield(c.env, ip, limits);
  await next();
});
