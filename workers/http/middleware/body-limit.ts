import { bodyLimit } from 'hono/body-limit';
import { createMiddleware } from 'hono/factory';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';

/** Request bodies are small JSON documents; anything larger is refused before parsing. */
export const MAX_BODY_BYTES = 16 * 1024;
/** An allowlist change may name 200,000 shoppers: its route (admin only) takes up to this much. */
export const MAX_ALLOWLIST_BODY_BYTES = 8 * 1024 * 1024;

/** The one route whose body is allowed to be large, and only after its admin check (limitAllowlistBody). */
const ALLOWLIST_PATH = /^\/admin\/goods\/[^/]+\/allowlist$/;

function limit(maxSize: number) {
  return bodyLimit({
    maxSize,
    onError: () => {
      throw new AppError('PAYLOAD_TOO_LARGE', `request bodies are limited to ${maxSize} bytes`);
    },
  });
}

const small = limit(MAX_BODY_BYTES);

/** 413 PAYLOAD_TOO_LARGE for a body over MAX_BODY_BYTES, before anything reads it (the allowlist route has its own limit). */
export const limitBody = createMiddleware<AppEnv>(async function limitBody(c, next) {
  if (c.req.method === 'PUT' && ALLOWLIST_PATH.test(c.req.path)) {
    await next();
    return;
  }
  return small(c, next);
});

/** 413 beyond MAX_ALLOWLIST_BODY_BYTES, for the allowlist route behind its admin check. */
export const limitAllowlistBody = limit(MAX_ALLOWLIST_BODY_BYTES);
