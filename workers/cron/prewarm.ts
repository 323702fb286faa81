import type { Db } from '../../db/client';
import { listCurrentGoods, toGoodsInit } from '../../db/goods';
import { initShards } from '../edge/stock-shards';
import { log } from '../kernel/log';
import { PREWARM_AHEAD_MS } from '../kernel/schedule';

/**
 * Creates (or refreshes) the stock object of every goods that starts soon or is on sale. The
 * object writes its Redis mirror (stock, goods hash, start/end) as part of each init, so the
 * mirror is warm before the first shopper too. One goods failing does not stop the others.
 */
export async function prewarmGoods(env: Env, db: Db, now: number): Promise<number> {
  const goods = await listCurrentGoods(db, now);
  let prewarmed = 0;
  for (const g of goods.filter((r) => r.startAt.getTime() - now <= PREWARM_AHEAD_MS)) {
    try {
      await initShards(env, g, toGoodsInit(g));
      prewarmed++;
    } catch (error) {
      log.error('cron.prewarm_failed', { goodsId: g.id, error });
    }
  }
  return prewarmed;
}
