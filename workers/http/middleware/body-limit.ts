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

/** Methods whose requests carry no body to limit. */
const BODILESS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * 413 PAYLOAD_TOO_LARGE for a body over MAX_BODY_BYTES, before anything reads it (the allowlist
 * route has its own limit). A body with a Content-Length (and no Transfer-Encoding) is judged by
 * its header alone, as Hono's bodyLimit judges it, but without making the request's body stream
 * first: that cost every purchase and every sold-out answer about 3 µs. Any other body goes
 * through bodyLimit, which counts it as it streams.
 */
export const limitBody = createMiddleware<AppEnv>(async function limitBody(c, next) {
  const method = c.req.method;
  if (BODILESS.has(method) || (method === 'PUT' && ALLOWLIST_PATH.test(c.req.path))) {
    await next();
    return;
  }
  const headers = c.req.raw.headers;
  const length = headers.get('content-length');
  if (length !== null && !headers.has('transfer-encoding')) {
    if (Number.parseInt(length, 10) > MAX_BODY_BYTES) {
      throw new AppError('PAYLOAD_TOO_LARGE', `request bodies are limited to ${MAX_BODY_BYTES} bytes`);
    }
    await next();
    return;
  }
  return small(c, next);
});

/** 413 beyond MAX_ALLOWLIST_BODY_BYTES, for the allowlist route behind its admin check. */
export const limitAllowlistBody = limit(MAX_ALLOWLIST_BODY_BYTES);
