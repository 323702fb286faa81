import { Hono } from 'hono';
import { pageStanding } from '../../edge/eligibility';
import { currentGoods } from '../../edge/goods-cache';
import { goodsView } from '../../edge/goods-view';
import { noteStock } from '../../edge/sold-out';
import { readRemaining } from '../../edge/stock-reads';
import { EligibilityQuery } from '../../kernel/http-bodies';
import { type AppEnv, waitUntilOf } from '../context';
import { goodsInPath, loadGoods } from '../middleware/goods';
import { admitSale } from '../middleware/sale-limits';
import { shopperAuth } from '../middleware/shopper-auth';
import { valid } from '../middleware/validate';

/** The goods pages: the list and one goods, stock from the mirror (or the object when it lacks it). */
export const goods = new Hono<AppEnv>()
  .get('/goods', async (c) => {
    const now = Date.now();
    const rows = [...(await currentGoods(c.get('config'), now)).values()].filter((r) => r.endAt.getTime() > now);
    const stocks = await readRemaining(c.env, c.get('config'), rows);
    for (const [i, r] of rows.entries()) {
      noteStock(r.id, stocks[i]);
    }
    return c.json(rows.map((r, i) => goodsView(r, stocks[i]?.snapshot, stocks[i]?.remaining, now)));
  })

  .get('/goods/:goodsId', goodsInPath, loadGoods, async (c) => {
    const row = c.get('goods');
    const [stock] = await readRemaining(c.env, c.get('config'), [row]);
    noteStock(row.id, stock);
    return c.json(goodsView(row, stock?.snapshot, stock?.remaining, Date.now()));
  })

  // What the page tells a shopper before the sale: may they buy, how many, how many they hold
  // (live orders in Postgres; a purchase still on its way there is not counted yet). The crowd's
  // page loads are answered from the isolate's copies (allowlist-copies.ts, holders-copies.ts),
  // a second or two behind Postgres, and Postgres answers a shopper only where a copy is missing,
  // or when the page asks again right after the shopper's own order changed (`?fresh=1`).
  .get('/goods/:goodsId/eligibility', shopperAuth, goodsInPath, valid('query', EligibilityQuery), loadGoods, async (c) => {
    const goods = c.get('goods'),
      userId = c.get('userId'),
      config = c.get('config');
    const fresh = c.req.valid('query').fresh === '1';
    if (fresh) {
      // Postgres' own answer reads the shopper's orders: counted as an order read (per shopper and address).
      await admitSale(c, 'order');
    }
    const standing = await pageStanding(config, goods, userId, waitUntilOf(c), fresh);
    const listed = goods.eligibility !== 'allowlist' || standing.listed;
    const elsewhere = goods.limitScope === 'activity' && standing.elsewhere;
    return c.json({ eligible: listed && !elsewhere, perUserLimit: goods.perUserLimit, held: standing.held });
  });
