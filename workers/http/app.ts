import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import { ConfigError, getConfig } from '../kernel/config';
import { randomId } from '../kernel/crypto';
import { AppError, type ErrorCode, errorBody } from '../kernel/errors';
import { log } from '../kernel/log';
import type { AppEnv } from './context';
import { requestMetrics } from './middleware/metrics';
import { adminDeadLetters } from './routes/admin-dead-letters';
import { admin } from './routes/admin-goods';
import { adminLimits } from './routes/admin-limits';
import { dev } from './routes/dev';
import { orders } from './routes/orders';
import { payments } from './routes/payments';
import { shopper } from './routes/shopper';

/** Request bodies are small JSON documents; anything larger is refused before parsing. */
const MAX_BODY_BYTES = 16 * 1024;

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

/** Builds the HTTP app: shopper API, admin API, dev helpers, one error shape. */
export function createApp() {
  const app = new Hono<AppEnv>();

  app.use(async function context(c, next) {
    c.set('requestId', c.req.header('cf-ray') ?? randomId());
    c.set('config', getConfig(c.env));
    await next();
  });

  app.use(requestMetrics);

  app.use(
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: () => {
        throw new AppError('PAYLOAD_TOO_LARGE', `request bodies are limited to ${MAX_BODY_BYTES} bytes`);
      },
    }),
  );

  app.route('/api/seckill', shopper);
  // Inline form so staging/production bundles drop the route and its module (see build-flags.ts).
  if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
    app.route('/api/dev', dev);
  }
  app.route('/api/orders', orders);
  app.route('/api/payments', payments);
  app.route('/admin', admin);
  app.route('/admin/dead-letters', adminDeadLetters);
  app.route('/admin/limits', adminLimits);
  app.get('/api/health', (c) => c.json({ ok: true, serverTime: new Date().toISOString() }));

  app.notFound((c) => c.json(errorBody('NOT_FOUND', `no route for ${c.req.method} ${c.req.path}`, c.var.requestId ?? ''), 404));

  app.onError((err, c) => {
    const requestId = c.var.requestId ?? '';
    if (err instanceof AppError) {
      for (const [k, v] of Object.entries(err.headers)) {
        c.header(k, v);
      }
      return c.json(errorBody(err.code, err.message, requestId), err.status);
    }
    if (err instanceof HTTPException && err.status < 500) {
      const code = STATUS_CODE[err.status] ?? 'INVALID_INPUT';
      return c.json(errorBody(code, err.message || code.toLowerCase(), requestId), err.status);
    }
    if (err instanceof ConfigError) {
      log.error('config.invalid', { requestId, issues: err.issues });
      return c.json(errorBody('INTERNAL', 'the service is misconfigured', requestId), 500);
    }
    log.error('http.unhandled', { requestId, method: c.req.method, path: c.req.path, error: err });
    return c.json(errorBody('INTERNAL', 'internal error', requestId), 500);
  });

  return app;
}
