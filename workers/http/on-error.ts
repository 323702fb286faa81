import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { postgresUnavailable } from '../../db/outage';
import { markedUnavailable } from '../edge/object-unavailable';
import { ConfigError } from '../kernel/config';
import { AppError, type ErrorCode, errorBody, unavailable } from '../kernel/errors';
import { log } from '../kernel/log';
import type { AppEnv } from './context';

const STATUS_CODE: Record<number, ErrorCode> = {
  400: 'INVALID_INPUT',
  401: 'UNAUTHENTICATED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
};

/** A dependency that failed under the request, when the error says which: Postgres, or an object workerd marked. */
export function failedDependency(err: unknown): 'postgres' | 'object' | undefined {
  if (postgresUnavailable(err)) {
    return 'postgres';
  }
  return markedUnavailable(err) ? 'object' : undefined;
}

const UNAVAILABLE_MESSAGE = {
  postgres: 'the database is unavailable, please retry',
  object: 'a part of the service is restarting or busy, please retry',
} as const;

function appErrorAnswer(err: AppError, c: Context<AppEnv>, traceId: string): Response {
  for (const [k, v] of Object.entries(err.headers)) {
    c.header(k, v);
  }
  return c.json(errorBody(err.code, err.message, traceId, err.details), err.status);
}

/**
 * The one error answer: `{error: {code, message, requestId}}` with the request's trace id;
 * internals are logged, not shown. A dependency that failed under the request (Postgres out of
 * reach, an object reset or overloaded) is 503 UNAVAILABLE with Retry-After, on any route.
 */
export function onError(err: Error, c: Context<AppEnv>): Response {
  const traceId = c.get('traceId') ?? '';
  if (err instanceof AppError) {
    return appErrorAnswer(err, c, traceId);
  }
  const dependency = failedDependency(err);
  if (dependency) {
    log.warn('http.dependency_unavailable', { requestId: traceId, method: c.req.method, path: c.req.path, dependency, error: err });
    const answer = unavailable(UNAVAILABLE_MESSAGE[dependency]);
    // The request metrics count the answer given (outcome `unavailable`), not an internal error.
    c.error = answer;
    return appErrorAnswer(answer, c, traceId);
  }
  if (err instanceof HTTPException && err.status < 500) {
    const code = STATUS_CODE[err.status] ?? 'INVALID_INPUT';
    return c.json(errorBody(code, err.message || code.toLowerCase(), traceId), err.status);
  }
  if (err instanceof ConfigError) {
    log.error('config.invalid', { requestId: traceId, issues: err.issues });
    return c.json(errorBody('INTERNAL', 'the service is misconfigured', traceId), 500);
  }
  log.error('http.unhandled', { requestId: traceId, method: c.req.method, path: c.req.path, error: err });
  return c.json(errorBody('INTERNAL', 'internal error', traceId), 500);
}

/** No route for the method and path: the contract's 404. */
export function notFound(c: Context<AppEnv>): Response {
  return c.json(errorBody('NOT_FOUND', `no route for ${c.req.method} ${c.req.path}`, c.get('traceId') ?? ''), 404);
}
