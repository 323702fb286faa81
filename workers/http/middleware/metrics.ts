import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { HTTPException } from 'hono/http-exception';
import { matchedRoutes } from 'hono/route';
import { AppError } from '../../kernel/errors';
import { log } from '../../kernel/log';
import { scheduleMetricsFlush } from '../../metrics/flush';
import { count, observe } from '../../metrics/registry';
import { type AppEnv, waitUntilOf } from '../context';

/** Requests slower than this are logged (with their trace id) even when they succeed. */
const SLOW_REQUEST_MS = 2_000;

/** The route pattern that answered (`/api/seckill/goods/:goodsId`), never the raw path. */
function routeOf(c: Context<AppEnv>): string {
  const handlers = matchedRoutes(c).filter((r) => r.method !== 'ALL');
  return handlers.at(-1)?.path ?? 'unmatched';
}

/** accepted / ok, or the contract's error code in lower case (sold_out, rate_limited, ...). */
function outcomeOf(c: Context<AppEnv>): string {
  const error = c.error;
  if (error instanceof AppError) {
    return error.code.toLowerCase();
  }
  if (error instanceof HTTPException && error.status < 500) {
    return `http_${error.status}`;
  }
  if (error) {
    return 'internal';
  }
  const status = c.res.status;
  if (status === 202) {
    return 'accepted';
  }
  if (status < 400) {
    return 'ok';
  }
  return status === 404 ? 'not_found' : `http_${status}`;
}

/**
 * Counts every request by route and outcome, records its latency, and logs what an operator
 * needs to trace (admin actions, server errors, slow requests) with the trace id. Shopper
 * requests are counted, not logged one by one: at sale peak that would be a log line per click.
 */
export const requestMetrics = createMiddleware<AppEnv>(async function requestMetrics(c, next) {
  const started = Date.now();
  await next();
  const ms = Date.now() - started;
  // A result read held for its final answer (`?wait=`) takes the wait's time by design: its own
  // series, so the route's latency stays a latency, and never a slow request.
  const held = c.get('heldRead') === true;
  const route = held ? `${routeOf(c)}?wait` : routeOf(c);
  const outcome = outcomeOf(c);
  count('seckill_http_requests_total', { route, method: c.req.method, outcome });
  observe('seckill_http_request_duration_ms', { route }, ms);
  const status = c.res.status;
  const purchaseId = c.get('purchaseId');
  const fields = { requestId: c.get('traceId'), ...(purchaseId ? { purchaseId } : {}), method: c.req.method, route, status, outcome, ms };
  if (status >= 500) {
    log.error('http.request', fields);
  } else if (ms >= SLOW_REQUEST_MS && !held) {
    log.warn('http.slow_request', fields);
  } else if (route.startsWith('/admin') && c.req.method !== 'GET') {
    // An audit trail of operator actions (pause, limits, reconcile, ...); reads are not logged.
    log.info('http.admin', fields);
  }
  // Without an execution context (a direct app.request() call) the next scrape ships the counts.
  const waitUntil = waitUntilOf(c);
  if (waitUntil) {
    scheduleMetricsFlush(c.env, waitUntil);
  }
});
