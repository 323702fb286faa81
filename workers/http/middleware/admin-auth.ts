import { createMiddleware } from 'hono/factory';
import { safeEqual } from '../../kernel/crypto';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';
import { bearer } from './bearer';

/** Admin routes: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time. */
export const adminAuth = createMiddleware<AppEnv>(async function adminAuth(c, next) {
  const token = bearer(c.req.header('authorization'));
  if (!token || !safeEqual(token, c.get('config').adminToken)) {
    throw new AppError('UNAUTHENTICATED', 'the admin token is missing or wrong');
  }
  await next();
});
