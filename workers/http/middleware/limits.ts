import { createMiddleware } from 'hono/factory';
import { currentLimits } from '../../edge/limits';
import { type AppEnv, waitUntilOf } from '../context';

/** The runtime limits into the context, read once per request (the isolate's copy, renewed in the background; 503 BUSY when none can be had). */
export const loadLimits = createMiddleware<AppEnv>(async function loadLimits(c, next) {
  c.set('limits', await currentLimits(c.env, waitUntilOf(c)));
  await next();
});
