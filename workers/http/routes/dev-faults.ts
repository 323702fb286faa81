import { Hono } from 'hono';
import { allStockShards } from '../../../durable-objects/routing';
import { getGoods } from '../../edge/goods-cache';
import { askObjectReset, DEV_FAULT, DevFaultsBody, DevResetBody, devFaults, setDevFaults } from '../../kernel/dev-faults';
import { AppError } from '../../kernel/errors';
import { log } from '../../kernel/log';
import { ObjectCallsBody, objectCalls, setObjectCalls } from '../../kernel/object-calls';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { valid } from '../middleware/validate';

/**
 * Fault switches for the local chaos run (scripts/chaos.ts): admin token, DEV_MODE, and dev
 * builds only (app.ts mounts it behind the build flag; see workers/kernel/dev-faults.ts).
 */
export const devFaultRoutes = new Hono<AppEnv>()
  .use(async function devFaultsOnly(c, next) {
    if (!c.get('config').devMode) {
      throw new AppError('NOT_FOUND', 'not found');
    }
    await next();
  }, adminAuth)

  .get('/', (c) => c.json(devFaults()))

  // Durable Object calls counted by class and method, and a delay on each (the bench's model).
  .get('/object-calls', (c) => c.json(objectCalls()))

  .put('/object-calls', valid('json', ObjectCallsBody), (c) => {
    const body = c.req.valid('json');
    log.warn('dev_fault.object_calls', { requestId: c.get('traceId'), ...body });
    return c.json(setObjectCalls(body));
  })

  .put('/', valid('json', DevFaultsBody), (c) => {
    const body = c.req.valid('json');
    log.warn('dev_fault.set', { requestId: c.get('traceId'), ...body });
    return c.json(setDevFaults(body));
  })

  // Every stock shard of the goods throws away its in-memory state, as an eviction or a crash
  // would: the next call to each meets a new instance that has only what was in storage.
  .post('/reset', valid('json', DevResetBody), async (c) => {
    const { goodsId } = c.req.valid('json');
    const goods = await getGoods(c.get('config'), goodsId);
    let reset = true;
    // One shard at a time: the request is by goods, and the first shard to look takes it.
    for (const stub of allStockShards(c.env, goods)) {
      const withdraw = askObjectReset(goodsId);
      const done = await stub
        .snapshot()
        .then(
          () => false,
          (error: unknown) => error instanceof Error && error.message.includes(DEV_FAULT),
        )
        .finally(withdraw);
      reset &&= done;
    }
    log.warn('dev_fault.object_reset', { requestId: c.get('traceId'), goodsId, reset });
    return c.json({ goodsId, reset });
  });
