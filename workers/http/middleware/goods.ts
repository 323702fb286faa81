import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import type { GoodsRow } from '../../../db/goods';
import { getGoods } from '../../edge/goods-cache';
import { GoodsParam } from '../../kernel/http-bodies';
import type { AppEnv } from '../context';
import { validInto } from './validate';

/** The goods id of a `/goods/:goodsId/...` path into the context (400 INVALID_INPUT otherwise). */
export const goodsInPath = validInto('param', GoodsParam, (c, { goodsId }) => c.set('goodsId', goodsId));

/**
 * The row of the goods named by `goodsId`, from the isolate's goods list (404 NOT_FOUND), read
 * at most once per request: a step that needs it early reads it here, later ones reuse it.
 */
export async function goodsOf(c: Context<AppEnv>): Promise<GoodsRow> {
  const loaded = c.get('goods');
  if (loaded) {
    return loaded;
  }
  const row = await getGoods(c.get('config'), c.get('goodsId'));
  c.set('goods', row);
  return row;
}

/** The goods' row into the context (see goodsOf). */
export const loadGoods = createMiddleware<AppEnv>(async function loadGoods(c, next) {
  await goodsOf(c);
  await next();
});
