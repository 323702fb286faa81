import { createMiddleware } from 'hono/factory';
import { getConfig } from '../../kernel/config';
import { randomId } from '../../kernel/crypto';
import type { AppEnv } from '../context';

/** First on every route: the trace id (Cloudflare's cf-ray, else random), then the parsed configuration. */
export const requestContext = createMiddleware<AppEnv>(async function requestContext(c, next) {
  c.set('traceId', c.req.header('cf-ray') ?? randomId());
  // A missing secret throws ConfigError here, answered by onError with the trace id already set.
  c.set('config', getConfig(c.env));
  await next();
});
