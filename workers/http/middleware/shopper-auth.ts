import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { verifyShopperToken } from '../../edge/shopper-jwt';
import { USER_ID } from '../../kernel/contract';
import { AppError } from '../../kernel/errors';
import { type AppEnv, waitUntilOf } from '../context';
import { bearer } from './bearer';

/**
 * Shopper routes: `Authorization: Bearer <JWT>` (HS256, or RS256/ES256 via AUTH_JWKS_URL), `sub`
 * is the user id; `exp` is required, within AUTH_JWT_MAX_LIFETIME_SECONDS.
 */
export const shopperAuth = createMiddleware<AppEnv>(async function shopperAuth(c, next) {
  c.set('userId', await signIn(c));
  await next();
});

/** The shopper's user id from the request's JWT, or 401 UNAUTHENTICATED (shopperAuth, for a step that needs it early). */
export async function signIn(c: Context<AppEnv>): Promise<string> {
  const token = bearer(c.req.header('authorization'));
  if (!token) {
    throw new AppError('UNAUTHENTICATED', 'a Bearer token is required');
  }
  let sub: unknown;
  try {
    sub = (await verifyShopperToken(token, c.get('config').shopperAuth, Date.now(), waitUntilOf(c))).sub;
  } catch (error) {
    if (error instanceof AppError) {
      throw error;
    }
    throw new AppError('UNAUTHENTICATED', 'the token is invalid or expired');
  }
  // USER_ID is UserId's pattern and lengths in one expression: every purchase signs in, and zod
  // checks a string rule by rule in its interpreter.
  if (typeof sub !== 'string' || !USER_ID.test(sub)) {
    throw new AppError('UNAUTHENTICATED', 'the token has no usable subject');
  }
  return sub;
}
