import { Hono } from 'hono';
import { dbOptions, httpDb } from '../../../db/client';
import {
  countDeliveries,
  type DeliveryRow,
  deleteWebhookConfig,
  getWebhookConfig,
  listDeliveries,
  putWebhookConfig,
  resetDelivery,
  type WebhookConfigRow,
} from '../../../db/webhooks';
import { enqueueDeliveries } from '../../edge/webhooks';
import { AppError } from '../../kernel/errors';
import { DeliveriesQuery, DeliveryParam, PutWebhooksBody, webhookUrlProblem } from '../../kernel/webhooks';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { requireJson } from '../middleware/require-json';
import { valid } from '../middleware/validate';

/** The endpoint as operators see it: never the secret. */
function configView(row: WebhookConfigRow | undefined, deliveries: Awaited<ReturnType<typeof countDeliveries>>) {
  return {
    url: row?.url ?? null,
    events: row?.events ?? [],
    enabled: (row?.events.length ?? 0) > 0,
    updatedAt: row?.updatedAt.toISOString() ?? null,
    deliveries,
  };
}

function deliveryView(row: DeliveryRow) {
  return {
    id: row.id,
    type: row.type,
    orderId: row.orderId,
    goodsId: row.goodsId,
    status: row.status,
    attempts: row.attempts,
    nextAttemptAt: row.status === 'PENDING' ? row.nextAttemptAt.toISOString() : null,
    lastAttemptAt: row.lastAttemptAt?.toISOString() ?? null,
    lastStatusCode: row.lastStatusCode,
    lastError: row.lastError,
    deliveredAt: row.deliveredAt?.toISOString() ?? null,
    createdAt: row.createdAt.toISOString(),
    payload: row.payload,
  };
}

/**
 * The shop's webhooks (docs/operations.md): its endpoint and events, the delivery log, and a
 * redelivery of one event under its own id.
 */
export const adminWebhooks = new Hono<AppEnv>()
  .use(adminAuth)

  .get('/', async (c) => {
    const db = httpDb(dbOptions(c.get('config')));
    const [row, deliveries] = await Promise.all([getWebhookConfig(db), countDeliveries(db)]);
    return c.json(configView(row, deliveries));
  })

  .put('/', requireJson, valid('json', PutWebhooksBody), async (c) => {
    const body = c.req.valid('json');
    const problem = webhookUrlProblem(body.url, c.get('config').environment === 'development');
    if (problem) {
      throw new AppError('INVALID_INPUT', `json url: ${problem}`);
    }
    const db = httpDb(dbOptions(c.get('config')));
    const row = await putWebhookConfig(db, body);
    return c.json(configView(row, await countDeliveries(db)));
  })

  .delete('/', async (c) => {
    const db = httpDb(dbOptions(c.get('config')));
    await deleteWebhookConfig(db);
    return c.json(configView(undefined, await countDeliveries(db)));
  })

  .get('/deliveries', valid('query', DeliveriesQuery), async (c) => {
    const rows = await listDeliveries(httpDb(dbOptions(c.get('config'))), c.req.valid('query'));
    return c.json({ deliveries: rows.map(deliveryView) });
  })

  .post('/deliveries/:id/redeliver', valid('param', DeliveryParam), async (c) => {
    const { id } = c.req.valid('param');
    const result = await resetDelivery(httpDb(dbOptions(c.get('config'))), id, Date.now());
    if (result.kind === 'missing') {
      throw new AppError('NOT_FOUND', `no delivery ${id}`);
    }
    if (result.kind === 'pending') {
      throw new AppError('CONFLICT', `delivery ${id} is pending already; it is on its way`);
    }
    // A lost send leaves it pending; the cron sends it within a few minutes.
    await enqueueDeliveries(c.env, [id]);
    return c.json(deliveryView(result.row));
  });
