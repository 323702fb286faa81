import { eq } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { seckillGoods } from '../../db/schema';
import {
  bearer,
  buy,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  metric,
  reconcileNow,
  scrape,
  spreadGoodsIds,
  sql,
  stats,
  stockSnapshot,
} from './helpers';

// Postgres holding less stock than the goods' object (a manual fix, a bad import): a unit
// Postgres refuses is held aside, not offered again, so the sale sells out instead of
// accepting every buyer and failing them all; reconciliation returns the units once
// Postgres has room for them.

async function resultOf(jwt: string, requestId: string) {
  return json<{ status: string; reason?: string; orderId?: string }>(
    await call(`/api/seckill/result/${requestId}`, { headers: bearer(jwt) }),
  );
}

/** Buys for `userId` and waits for the purchase's final answer. */
async function buyAndWait(userId: string, goodsId: number) {
  const jwt = await devToken(userId);
  const { status, body } = await buy(userId, goodsId, { jwt });
  expect(status).toBe(202);
  return eventually(async () => {
    const r = await resultOf(jwt, String(body.requestId));
    return r.status === 'QUEUED' ? undefined : r;
  });
}

describe('units Postgres refused', () => {
  beforeAll(spreadGoodsIds);

  it('are held aside: the next buyer is told SOLD_OUT, and the stats and metrics raise the alarm', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    // A bad import: Postgres has none of the three units the object will sell.
    await sql((db) => db.update(seckillGoods).set({ stock: 0 }).where(eq(seckillGoods.id, goodsId)));
    for (const u of ['ref-a', 'ref-b', 'ref-c']) {
      expect(await buyAndWait(`${u}-${goodsId}`, goodsId)).toMatchObject({ status: 'FAIL', reason: 'SOLD_OUT' });
    }
    // Not offered again: the object has nothing left to sell.
    const late = await buy(`ref-d-${goodsId}`, goodsId);
    expect(late.status).toBe(410);
    expect(late.body).toMatchObject({ error: { code: 'SOLD_OUT' } });
    expect(await stockSnapshot(goodsId)).toMatchObject({ remaining: 0, refused: 3, queued: 0 });
    expect(await stats(goodsId)).toMatchObject({ doRemaining: 0, dbStock: 0, refusedUnits: 3, consistent: false });
    await eventually(async () => metric(await scrape(), 'seckill_units_refused_total', { goods_id: String(goodsId) }) === 3);
  });

  it('are reported by reconciliation and put back on sale once Postgres has room for them', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    await sql((db) => db.update(seckillGoods).set({ stock: 1 }).where(eq(seckillGoods.id, goodsId)));
    expect(await buyAndWait(`rr-a-${goodsId}`, goodsId)).toMatchObject({ status: 'SUCCESS' });
    expect(await buyAndWait(`rr-b-${goodsId}`, goodsId)).toMatchObject({ status: 'FAIL', reason: 'SOLD_OUT' });
    expect(await buyAndWait(`rr-c-${goodsId}`, goodsId)).toMatchObject({ status: 'FAIL', reason: 'SOLD_OUT' });
    // Object: 1 for sale, 2 held aside, 1 order. Postgres: 0 left. No room: reported only.
    const [held] = (await reconcileNow(goodsId)).goods;
    expect(held?.discrepancies).toEqual(
      expect.arrayContaining([
        { kind: 'units_refused', units: 2, dbStock: 0, doRemaining: 1 },
        { kind: 'db_stock', dbStock: 0, doRemaining: 1 },
      ]),
    );
    expect(held?.discrepancies.map((d) => d.kind)).not.toContain('stock_invariant');
    expect(held?.actions).toEqual([]);

    // The operator restores Postgres (4 units, 1 order): room for the 1 for sale and the 2 aside.
    await sql((db) => db.update(seckillGoods).set({ stock: 3 }).where(eq(seckillGoods.id, goodsId)));
    const [back] = (await reconcileNow(goodsId)).goods;
    expect(back?.actions).toEqual([{ action: 'refused_returned', units: 2, stillRefused: 0 }]);
    expect(back?.doRemaining).toBe(3);
    expect((await reconcileNow(goodsId)).goods[0]).toMatchObject({ consistent: true, doRemaining: 3, dbStock: 3 });
    expect(await stats(goodsId)).toMatchObject({ doRemaining: 3, dbStock: 3, refusedUnits: 0, consistent: true });
    expect(await buyAndWait(`rr-d-${goodsId}`, goodsId)).toMatchObject({ status: 'SUCCESS' });
  });
});
