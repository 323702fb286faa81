import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';

const JSON_MEDIA = /^application\/([\w.-]+\+)?json$/i;

/**
 * JSON-body routes refuse other media types with 415 before reading the body (the validator
 * alone would treat them as an empty object and answer with a misleading field error).
 */
export const requireJson = createMiddleware<AppEnv>(async function requireJson(c, next) {
  requireJsonMedia(c);
  await next();
});

/** requireJson's check, for a route that runs its steps itself. */
export function requireJsonMedia(c: Context<AppEnv>): void {
  const type = c.req.header('content-type');
  const media = type?.split(';')[0]?.trim() ?? '';
  if (!JSON_MEDIA.test(media)) {
    throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'send the body as application/json');
  }
}
