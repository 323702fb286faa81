import { Hono } from 'hono';
import { currentGoods } from '../../edge/goods-cache';
import { goodsView } from '../../edge/goods-view';
import { noteStock } from '../../edge/sold-out';
import { readRemaining } from '../../edge/stock-reads';
import type { AppEnv } from '../context';
import { goodsInPath, loadGoods } from '../middleware/goods';

/** The goods pages: the list and one goods, stock from the mirror (or the object when it lacks it). */
export const goods = new Hono<AppEnv>()
  .get('/goods', async (c) => {
    const now = Date.now();
    const rows = [...(await currentGoods(c.var.config, now)).values()].filter((r) => r.endAt.getTime() > now);
    const stocks = await readRemaining(c.env, c.var.config, rows);
    for (const [i, r] of rows.entries()) {
      noteStock(r.id, stocks[i]);
    }
    return c.json(rows.map((r, i) => goodsView(r, stocks[i]?.snapshot, stocks[i]?.remaining, now)));
  })

  .get('/goods/:goodsId', goodsInPath, loadGoods, async (c) => {
    const row = c.var.goods;
    const [stock] = await readRemaining(c.env, c.var.config, [row]);
    noteStock(row.id, stock);
    return c.json(goodsView(row, stock?.snapshot, stock?.remaining, Date.now()));
  });
