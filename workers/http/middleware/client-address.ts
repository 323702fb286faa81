import { createMiddleware } from 'hono/factory';
import { checkLocalBans, clientIp, ipKey } from '../../edge/client-guard';
import { type AppEnv, waitUntilOf } from '../context';

/**
 * In front of every shopper route: the client address from `cf-connecting-ip` (a malformed one
 * is 400), and a ban of that address this isolate already knows is answered at once (403).
 */
export const clientAddress = createMiddleware<AppEnv>(async function clientAddress(c, next) {
  const ip = clientIp(c.req.header('cf-connecting-ip'));
  c.set('clientIp', ip);
  if (ip) {
    checkLocalBans(c.env, [ipKey(ip)], waitUntilOf(c));
  }
  await next();
});
