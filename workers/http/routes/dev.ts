import { Hono } from 'hono';
import { sign } from 'hono/jwt';
import { AppError } from '../../kernel/errors';
import { DevTokenBody } from '../../kernel/http-bodies';
import type { AppEnv } from '../context';
import { valid } from '../middleware/validate';

/** Shopper JWTs for local runs and load tests; the route does not exist unless DEV_MODE=true. */
export const dev = new Hono<AppEnv>()
  .use(async function devOnly(c, next) {
    if (!c.get('config').devMode) {
      throw new AppError('NOT_FOUND', 'not found');
    }
    await next();
  })
  .post('/token', valid('json', DevTokenBody), async (c) => {
    const { userId } = c.req.valid('json');
    const now = Math.floor(Date.now() / 1000);
    const token = await sign({ sub: userId, iat: now, exp: now + 24 * 3600 }, c.get('config').jwtSecret, 'HS256');
    return c.json({ token, userId, expiresAt: new Date((now + 24 * 3600) * 1000).toISOString() });
  });
