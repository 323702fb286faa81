import { createMiddleware } from 'hono/factory';
import { admitClient, checkLocalBans, clientIp, clientKeys, ipKey, type SaleAction, shield } from '../../edge/client-guard';
import { currentLimits } from '../../edge/limits';
import { type AppEnv, waitUntilOf } from '../context';

/**
 * In front of every shopper route: a malformed client address is refused, a banned address is
 * refused from this isolate's memory, and the Rate Limiting shield counts the address.
 */
export const edgeShield = createMiddleware<AppEnv>(async function edgeShield(c, next) {
  const ip = clientIp(c.req.header('cf-connecting-ip'));
  c.set('clientIp', ip);
  if (ip) {
    checkLocalBans([ipKey(ip)]);
  }
  await shield(c.env, ip, await currentLimits(c.env));
  await next();
});

/**
 * The exact per-IP and per-shopper limits and the ban counter, for one sale route. Runs after
 * authentication (the shopper is a key) and before any work that costs more than the check
 * (the purchase route answers a known sell-out, a closed window or a pause first: those
 * answers cost less than counting them).
 */
export function saleGuard(action: SaleAction) {
  return createMiddleware<AppEnv>(async function saleGuard(c, next) {
    const limits = await currentLimits(c.env);
    await admitClient(c.env, clientKeys(c.var.clientIp, c.var.userId, action, limits), limits, waitUntilOf(c));
    await next();
  });
}
