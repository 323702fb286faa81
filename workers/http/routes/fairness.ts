import { Hono } from 'hono';
import { fairnessOf, queueOf } from '../../edge/waiting-room';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';
import { goodsInPath, loadGoods } from '../middleware/goods';

/** The pre-queue draw's commitment before the start, and the seed and the rule after it. */
export const fairness = new Hono<AppEnv>().get('/goods/:goodsId/fairness', goodsInPath, loadGoods, async (c) => {
  const goods = c.get('goods');
  if (queueOf(goods).mode === 'off') {
    throw new AppError('NOT_FOUND', 'this goods has no waiting room');
  }
  return c.json(await fairnessOf(c.env, goods, Date.now()));
});
