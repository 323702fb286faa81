import { Hono } from 'hono';
import { allStockShards, roomHub, roomShard } from '../../../durable-objects/routing';
import { getGoods } from '../../edge/goods-cache';
import { roomGoodsOf } from '../../edge/waiting-room';
import { askObjectReset, DevFaultsBody, DevResetBody, devFaults, resetName, setDevFaults } from '../../kernel/dev-faults';
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

  // The goods' objects throw away their in-memory state, as an eviction or a crash would: every
  // stock shard (`stock`, the default), and every shard and the coordinator of its waiting room
  // (`room`). The next call to each meets a new instance that has only what was in storage.
  .post('/reset', valid('json', DevResetBody), async (c) => {
    const { goodsId, objects = ['stock'] } = c.req.valid('json');
    const goods = await getGoods(c.get('config'), goodsId);
    const calls: [string, () => Promise<unknown>][] = [];
    if (objects.includes('stock')) {
      allStockShards(c.env, goods).forEach((stub, shard) => {
        calls.push([resetName(goodsId, { stock: shard }), () => stub.snapshot()]);
      });
    }
    if (objects.includes('room')) {
      const room = roomGoodsOf(goods);
      if (room.mode === 'off') {
        throw new AppError('INVALID_INPUT', 'the goods has no waiting room to reset');
      }
      for (let shard = 0; shard < room.shards; shard++) {
        calls.push([resetName(goodsId, { room: shard }), () => roomShard(c.env, goods, shard).configure(room, shard)]);
      }
      calls.push([resetName(goodsId, { room: 'hub' }), () => roomHub(c.env, goods).roomStats(room)]);
    }
    let reset = true;
    // One object at a time, each asked by its own name; a shopper's call may meet it first.
    for (const [name, look] of calls) {
      const taken = askObjectReset(name);
      // The call fails with the reset's reason when it is the one that meets it.
      await look().catch(() => undefined);
      reset &&= taken();
    }
    log.warn('dev_fault.object_reset', { requestId: c.get('traceId'), goodsId, objects, reset });
    return c.json({ goodsId, objects, reset });
  });
