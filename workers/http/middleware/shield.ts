import { createMiddleware } from 'hono/factory';
import { shield } from '../../edge/client-guard';
import type { AppEnv } from '../context';

/** The coarse Rate Limiting shield per client address (429), while the runtime per-IP limit is below its rate. Needs clientAddress and loadLimits. */
export const ipShield = createMiddleware<AppEnv>(async function ipShield(c, next) {
  await shield(c.env, c.get('clientIp'), c.get('limits'));
  await next();
});
