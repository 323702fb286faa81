import { and, eq, sql as raw } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { seckillOrder } from '../../db/schema';
import { bearer, call, createGoods, devToken, json, pool, purchaseToken, settled, sql, stockObject } from './helpers';

const USERS = 1000;
const STOCK = 100;
const CONCURRENCY = 50;

describe('a sale of 1,000 shoppers for 100 units, through the Worker into Postgres', () => {
  it('sells exactly the stock, once per shopper, and every accepted request ends as an order', async () => {
    const { goodsId } = await createGoods({ stock: STOCK });
    // Everyone gets ready first (login, captcha, token), as before the sale's second.
    const shoppers = await pool(USERS, CONCURRENCY, async (i) => {
      const userId = `sale-${i}`;
      const jwt = await devToken(userId);
      return { userId, jwt, ...(await purchaseToken(jwt, goodsId)) };
    });

    const started = Date.now();
    let soldOutAt = 0;
    const answers = await pool(USERS, CONCURRENCY, async (i) => {
      const s = shoppers[i];
      if (!s) {
        throw new Error('missing shopper');
      }
      const res = await call(`/api/seckill/do/${s.path}`, { method: 'POST', headers: bearer(s.jwt), json: { goodsId, token: s.token } });
      const body = await json<{ requestId?: string; error?: { code: string } }>(res);
      if (res.status === 410 && !soldOutAt) {
        soldOutAt = Date.now();
      }
      return { status: res.status, body, userId: s.userId, jwt: s.jwt };
    });
    const answeredAt = Date.now();
    const accepted = answers.filter((a) => a.status === 202);
    const byStatus: Record<number, number> = {};
    for (const a of answers) {
      byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
    }
    expect(byStatus).toEqual({ 202: STOCK, 410: USERS - STOCK });

    const s = await settled(goodsId, 60_000);
    const landedAt = Date.now();
    expect(s).toMatchObject({ totalStock: STOCK, doRemaining: 0, dbStock: 0, queued: 0, outboxPending: 0, consistent: true });
    expect(s.orders.PENDING_PAYMENT).toBe(STOCK);

    // Nobody holds two live orders; every accepted request is an order of its shopper.
    const perUser = await sql((db) =>
      db
        .select({ userId: seckillOrder.userId, n: raw<number>`count(*)::int` })
        .from(seckillOrder)
        .where(and(eq(seckillOrder.goodsId, goodsId)))
        .groupBy(seckillOrder.userId),
    );
    expect(perUser).toHaveLength(STOCK);
    expect(perUser.every((r) => r.n === 1)).toBe(true);
    const stub = stockObject(goodsId);
    const results = await Promise.all(accepted.map((a) => stub.result(String(a.body.requestId))));
    expect(results.every((r) => r?.status === 'SUCCESS' && r.orderId)).toBe(true);
    expect(new Set(perUser.map((r) => r.userId))).toEqual(new Set(accepted.map((a) => a.userId)));

    console.log(
      JSON.stringify({
        sale: { users: USERS, stock: STOCK, concurrency: CONCURRENCY },
        soldOutMs: soldOutAt - started,
        allAnsweredMs: answeredAt - started,
        ordersLandedMs: landedAt - started,
      }),
    );
  });
});
