import { Hono } from 'hono';
import { z } from 'zod';
import { withDbFor } from '../../../db/client';
import { findGoods, insertGoods, setGoodsPaused, setGoodsQueue, toGoodsInit } from '../../../db/goods';
import { goodsStock } from '../../../durable-objects/routing';
import { getGoods, invalidateGoods } from '../../edge/goods-cache';
import { goodsView } from '../../edge/goods-view';
import { goodsStats } from '../../edge/stats';
import { commitSeed, pushRoomSettings, queueOf } from '../../edge/waiting-room';
import type { Config } from '../../kernel/config';
import { CreateGoodsBody, GoodsId, UpdateGoodsBody } from '../../kernel/contract';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { valid } from '../middleware/validate';
import { adminOps } from './admin-ops';

const GoodsParam = z.object({ goodsId: GoodsId });

export const admin = new Hono<AppEnv>()
  .use(adminAuth)
  .route('/', adminOps)

  .post('/goods', valid('json', CreateGoodsBody), async (c) => {
    const body = c.req.valid('json');
    const row = await withDbFor(c.var.config, (d) => insertGoods(d, body));
    await invalidateGoods(c.var.config);
    // Pre-warm at once: the object exists before the first shopper arrives.
    const snapshot = await goodsStock(c.env, row).init(toGoodsInit(row));
    await commitSeed(c.env, row);
    return c.json({ ...goodsView(row, snapshot, undefined, Date.now()), locationHint: row.locationHint, queue: queueOf(row) }, 201);
  })

  .put('/goods/:goodsId', valid('param', GoodsParam), valid('json', UpdateGoodsBody), async (c) => {
    const { goodsId } = c.req.valid('param');
    const body = c.req.valid('json');
    const row = await withDbFor(c.var.config, async (d) => (body.queue ? setGoodsQueue(d, goodsId, body.queue) : findGoods(d, goodsId)));
    if (!row) {
      throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
    }
    await invalidateGoods(c.var.config);
    await Promise.all([commitSeed(c.env, row), pushRoomSettings(c.env, row)]);
    const snapshot = await goodsStock(c.env, row).snapshot();
    return c.json({ ...goodsView(row, snapshot, undefined, Date.now()), locationHint: row.locationHint, queue: queueOf(row) });
  })

  .post('/goods/:goodsId/prewarm', valid('param', GoodsParam), async (c) => {
    const { goodsId } = c.req.valid('param');
    const row = await withDbFor(c.var.config, (d) => findGoods(d, goodsId));
    if (!row) {
      throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
    }
    const snapshot = await goodsStock(c.env, row).init(toGoodsInit(row));
    return c.json(snapshot);
  })

  .post('/goods/:goodsId/pause', valid('param', GoodsParam), (c) =>
    setPaused(c.env, c.var.config, c.req.valid('param').goodsId, true).then((s) => c.json(s)),
  )
  .post('/goods/:goodsId/resume', valid('param', GoodsParam), (c) =>
    setPaused(c.env, c.var.config, c.req.valid('param').goodsId, false).then((s) => c.json(s)),
  )

  .get('/goods/:goodsId/stats', valid('param', GoodsParam), async (c) => {
    const stats = await goodsStats(c.env, c.var.config, c.req.valid('param').goodsId);
    if (!stats) {
      throw new AppError('NOT_FOUND', 'no such goods');
    }
    // The queue's settings beside its figures, so the dashboard's mode switch keeps the rest of them.
    const queueSettings = await getGoods(c.var.config, stats.goodsId).then(queueOf, () => undefined);
    return c.json({ ...stats, ...(queueSettings ? { queueSettings } : {}) });
  });

async function setPaused(env: Env, config: Config, goodsId: number, paused: boolean) {
  const row = await withDbFor(config, (d) => setGoodsPaused(d, goodsId, paused));
  if (!row) {
    throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
  }
  await invalidateGoods(config);
  await pushRoomSettings(env, row);
  const stub = goodsStock(env, row);
  // An object never used yet is created paused or not from the row just written.
  const snapshot = (await stub.setPaused(paused)) ?? (await stub.init(toGoodsInit(row)));
  return { goodsId, paused: snapshot.paused, remaining: snapshot.remaining };
}
