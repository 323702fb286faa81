import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { admitClient, type ClientAction, clientKeys } from '../../edge/client-guard';
import { type AppEnv, waitUntilOf } from '../context';

/**
 * The exact per-IP and per-shopper limits and the ban counter, for one sale or order route.
 * Runs after authentication (the shopper is a key) and before any work that costs more than
 * the check (the purchase route answers a known sell-out, a closed window or a pause first:
 * those answers cost less than counting them).
 */
export function saleLimits(action: ClientAction) {
  return createMiddleware<AppEnv>(async function saleLimits(c, next) {
    await admitSale(c, action);
    await next();
  });
}

/** saleLimits' check, for a route that runs its steps itself. */
export function admitSale(c: Context<AppEnv>, action: ClientAction): Promise<void> {
  const limits = c.get('limits');
  return admitClient(c.env, clientKeys(c.get('clientIp'), c.get('userId'), action, limits), limits, waitUntilOf(c));
}
