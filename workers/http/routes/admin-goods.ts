import { Hono } from 'hono';
import { z } from 'zod';
import { changeAllowlist } from '../../../db/allowlist';
import { dbOptions, httpDb, withDbFor } from '../../../db/client';
import { findGoods, type GoodsRow, insertGoods, setGoodsPaused, setGoodsShards, toGoodsInit, updateGoodsSettings } from '../../../db/goods';
import { getGoods, invalidateGoods } from '../../edge/goods-cache';
import { goodsView } from '../../edge/goods-view';
import { goodsStats } from '../../edge/stats';
import { forgetStock } from '../../edge/stock-reads';
import { allowlistShards, goodsSnapshot, initShards, pauseShards } from '../../edge/stock-shards';
import { commitSeed, nextQueueSettings, pushRoomSettings, queueOf } from '../../edge/waiting-room';
import type { Config } from '../../kernel/config';
import { GoodsId, type StockSnapshot } from '../../kernel/contract';
import { sha256B64 } from '../../kernel/crypto';
import { AppError } from '../../kernel/errors';
import { AllowlistBody, CreateGoodsBody, IdempotencyHeader, UpdateGoodsBody } from '../../kernel/http-bodies';
import { log } from '../../kernel/log';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { limitAllowlistBody } from '../middleware/body-limit';
import { valid } from '../middleware/validate';
import { failedDependency } from '../on-error';
import { adminOps } from './admin-ops';

const GoodsParam = z.object({ goodsId: GoodsId });

export const admin = new Hono<AppEnv>()
  .use(adminAuth)
  .route('/', adminOps)

  // With an Idempotency-Key, the same create sent again (its answer lost on the way) answers the
  // goods it made, `Idempotent-Replayed: true`, and sets its objects up again (an init is
  // idempotent); the key with another body is 409 CONFLICT.
  .post('/goods', valid('header', IdempotencyHeader), valid('json', CreateGoodsBody), async (c) => {
    const body = c.req.valid('json');
    const key = c.req.valid('header')['idempotency-key'];
    const create = key === undefined ? undefined : { key, digest: await createDigest(body) };
    const { row, replayed } = await withDbFor(c.get('config'), (d) => insertGoods(d, body, create));
    await invalidateGoods(c.get('config'));
    const { snapshot, prewarmed } = await prewarmNew(c.env, row, c.get('traceId'));
    if (replayed) {
      c.header('Idempotent-Replayed', 'true');
    }
    return c.json({ ...goodsAnswer(row, snapshot), ...(prewarmed ? {} : { prewarmed }) }, 201);
  })

  .put('/goods/:goodsId', valid('param', GoodsParam), valid('json', UpdateGoodsBody), async (c) => {
    const { goodsId } = c.req.valid('param');
    const body = c.req.valid('json');
    const { shards, ...settings } = body;
    const row = await withDbFor(c.get('config'), async (d) => {
      if (settings.queue) {
        const current = await findGoods(d, goodsId);
        if (!current) {
          return undefined;
        }
        settings.queue = nextQueueSettings(current, settings.queue, Date.now());
      }
      // The shard count first: a refused change (the sale started) changes nothing else either.
      const resharded = shards === undefined ? undefined : await setGoodsShards(d, goodsId, shards, Date.now());
      if (resharded === 'SALE_STARTED') {
        throw new AppError('SALE_STARTED', 'shards can change only before the sale starts');
      }
      return Object.keys(settings).length > 0 ? updateGoodsSettings(d, goodsId, settings) : (resharded ?? findGoods(d, goodsId));
    });
    if (!row) {
      throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
    }
    await invalidateGoods(c.get('config'));
    await Promise.all([commitSeed(c.env, row), pushRoomSettings(c.env, row)]);
    // A new shard count or new sale rules take effect in every shard at once (a shard not made
    // yet is made with them).
    const rules = body.perUserLimit !== undefined || body.limitScope !== undefined || body.eligibility !== undefined;
    const snapshot =
      shards !== undefined || rules ? await initShards(c.env, row, toGoodsInit(row)) : (await goodsSnapshot(c.env, row)).total;
    // Once the objects have the change: a goods page read before it would show the old window.
    await forgetStock(c.get('config'), goodsId);
    return c.json(goodsAnswer(row, snapshot));
  })

  // Postgres first, in chunks of multi-row statements (and then the list's version, which the
  // edge's copies of it follow); then every stock shard of the goods, in chunks of RPCs, so the
  // check where the unit is taken reads its own copy. A failure part-way is safe to repeat.
  .put('/goods/:goodsId/allowlist', limitAllowlistBody, valid('param', GoodsParam), valid('json', AllowlistBody), async (c) => {
    const { goodsId } = c.req.valid('param');
    const add = c.req.valid('json').add ?? [];
    const remove = c.req.valid('json').remove ?? [];
    const row = await withDbFor(c.get('config'), (d) => findGoods(d, goodsId), 1);
    if (!row) {
      throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
    }
    const count = await changeAllowlist(httpDb(dbOptions(c.get('config'))), goodsId, add, remove);
    await allowlistShards(c.env, row, add, remove);
    // The list's new version: this isolate and its data center load the new copy at once, the rest within the list's 5 s.
    await invalidateGoods(c.get('config'));
    return c.json({ count });
  })

  .post('/goods/:goodsId/prewarm', valid('param', GoodsParam), async (c) => {
    const { goodsId } = c.req.valid('param');
    const row = await withDbFor(c.get('config'), (d) => findGoods(d, goodsId));
    if (!row) {
      throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
    }
    const snapshot = await initShards(c.env, row, toGoodsInit(row));
    return c.json(snapshot);
  })

  .post('/goods/:goodsId/pause', valid('param', GoodsParam), (c) =>
    setPaused(c.env, c.get('config'), c.req.valid('param').goodsId, true).then((s) => c.json(s)),
  )
  .post('/goods/:goodsId/resume', valid('param', GoodsParam), (c) =>
    setPaused(c.env, c.get('config'), c.req.valid('param').goodsId, false).then((s) => c.json(s)),
  )

  .get('/goods/:goodsId/stats', valid('param', GoodsParam), async (c) => {
    const stats = await goodsStats(c.env, c.get('config'), c.req.valid('param').goodsId);
    if (!stats) {
      throw new AppError('NOT_FOUND', 'no such goods');
    }
    // The queue's settings beside its figures, so the dashboard's mode switch keeps the rest of them.
    const queueSettings = await getGoods(c.get('config'), stats.goodsId).then(queueOf, () => undefined);
    return c.json({ ...stats, ...(queueSettings ? { queueSettings } : {}) });
  });

/**
 * A new goods' objects made at once (the shards hold their leases before the first shopper
 * arrives) and its room's seed committed. The row is in Postgres by then: an object or Postgres
 * failing under this setup does not undo it, and a 503 would have the operator create the goods
 * a second time. The goods is answered as created, `prewarmed: false`; its objects are made on
 * first use, at the cron's next pre-warm or by POST .../prewarm, and its room commits its seed
 * when first asked for it. Anything else that fails here is a fault, answered as one.
 */
async function prewarmNew(
  env: Env,
  row: GoodsRow,
  requestId: string,
): Promise<{ snapshot: StockSnapshot | undefined; prewarmed: boolean }> {
  let snapshot: StockSnapshot | undefined;
  try {
    snapshot = await initShards(env, row, toGoodsInit(row));
    await commitSeed(env, row);
    return { snapshot, prewarmed: true };
  } catch (error) {
    if (!failedDependency(error)) {
      throw error;
    }
    log.warn('admin.goods_prewarm_failed', { requestId, goodsId: row.id, error });
    return { snapshot, prewarmed: false };
  }
}

async function setPaused(env: Env, config: Config, goodsId: number, paused: boolean) {
  const row = await withDbFor(config, (d) => setGoodsPaused(d, goodsId, paused));
  if (!row) {
    throw new AppError('NOT_FOUND', `goods ${goodsId} does not exist`);
  }
  await invalidateGoods(config);
  await pushRoomSettings(env, row);
  // Every shard holds the switch; objects never used yet are created paused or not from the row just written.
  const snapshot = (await pauseShards(env, row, paused)) ?? (await initShards(env, row, toGoodsInit(row)));
  await forgetStock(config, goodsId);
  return { goodsId, paused: snapshot.paused, remaining: snapshot.remaining };
}

/** The digest a create's key is kept with: its body as parsed, keys sorted, so the same settings sent again match whatever order a client wrote them in. */
function createDigest(body: CreateGoodsBody): Promise<string> {
  const sorted = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sorted)
      : v !== null && typeof v === 'object'
        ? Object.fromEntries(
            Object.entries(v)
              .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
              .map(([k, x]) => [k, sorted(x)]),
          )
        : v;
  return sha256B64(JSON.stringify(sorted(body)));
}

/** The goods as the admin routes answer it: the view plus the settings only operators see. */
function goodsAnswer(row: GoodsRow, snapshot: Parameters<typeof goodsView>[1]) {
  return { ...goodsView(row, snapshot, undefined, Date.now()), locationHint: row.locationHint, queue: queueOf(row), shards: row.shards };
}
