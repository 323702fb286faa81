// A per-goods sale's page at the edge (workers/edge/holders-copies.ts): once the sale is on, the
// page's eligibility tells a shopper the units they hold, and a crowd's page loads ask the
// isolate's copy of who holds how many, renewed from the shoppers whose orders changed, not a
// Postgres statement each; the page's ask right after the shopper's own order changed
// (`?fresh=1`) is Postgres', and a cancel here frees the shopper's units at once. A page asked
// now and then is answered by its statements: the copy is first read once the isolate has been
// asked LOAD_AFTER_ASKS times within a few seconds.
//
// "Not from Postgres" is shown as in activity-holders.integration.test.ts: orders deleted behind
// the copies' back (no change stamped) are still held in a copy, gone from a statement.
import { sql as raw } from 'drizzle-orm';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { readGoodsHolders } from '../../db/holders';
import { forgetHoldersCopies, LOAD_AFTER_ASKS, unitsHeldAtEdge } from '../../workers/edge/holders-copies';
import { getConfig } from '../../workers/kernel/config';
import { randomId } from '../../workers/kernel/crypto';
import { bearer, buyOrder, callAndWait, devToken, json, looseLimitsForFile, metric, ownEnv, scrape, sql } from './helpers';
import { createRulesGoods } from './rules-helpers';

const own = ownEnv('goods-holders');
const config = getConfig(own);

looseLimitsForFile();
beforeEach(() => {
  forgetHoldersCopies();
});

/** A per-goods sale of up to three units a shopper, on since a second ago. */
async function threePerShopper(): Promise<number> {
  return (await createRulesGoods({ stock: 20, perUserLimit: 3 })).goodsId;
}

/** Writes an order of the goods straight into Postgres (a live one unless `status` says otherwise); its id. */
async function order(goodsId: number, userId: string, quantity = 1, status = 0): Promise<string> {
  const id = randomId();
  await sql((db) =>
    db.execute(raw`INSERT INTO seckill_order (id, order_no, request_id, user_id, goods_id, activity_id, price_cents, quantity,
      limit_scope, per_user_limit, status, reserved_at, pay_deadline)
      VALUES (${id}, ${`no-${id}`}, ${`rq-${id}`}, ${userId}, ${goodsId}, 1, 100, ${quantity}, 'goods', 3, ${status},
        now(), now() + interval '10 minutes')`),
  );
  return id;
}

/** An order's status changed as the lifecycle does it (the change stamped). */
async function setStatus(orderId: string, status: number): Promise<void> {
  await sql((db) => db.execute(raw`UPDATE seckill_order SET status = ${status}, updated_at = now() WHERE id = ${orderId}`));
}

/** A shopper's orders of the goods gone behind the copies' back: no change stamped. */
async function behindTheBack(goodsId: number, userId: string): Promise<void> {
  await sql((db) => db.execute(raw`DELETE FROM seckill_order WHERE goods_id = ${goodsId} AND user_id = ${userId}`));
}

/** What this isolate's copy says of a shopper's units (at `now`), with the renewal it started run to its end. */
async function units(goodsId: number, userId: string, now = Date.now()) {
  const renewals: Promise<unknown>[] = [];
  const answer = unitsHeldAtEdge(config, goodsId, userId, (p) => renewals.push(p), now);
  await Promise.all(renewals);
  return { answer, renewed: renewals.length };
}

/** Asks the isolate's copy as busy a page would, until one ask starts its first read; the asks that started none. */
async function busyPage(goodsId: number): Promise<number> {
  let quiet = 0;
  while ((await units(goodsId, 'gh-busy')).renewed === 0) {
    quiet++;
  }
  return quiet;
}

/** The page's eligibility answer for a shopper, through the Worker. */
async function page(goodsId: number, userId: string, query = '') {
  const res = await callAndWait(own, `/api/seckill/goods/${goodsId}/eligibility${query}`, { headers: bearer(await devToken(userId)) });
  return { status: res.status, body: await json<Record<string, unknown>>(res) };
}

/** The page's rule checks so far, by what answered them, and the goods copies' renewals from Postgres. */
async function counts() {
  const m = await scrape();
  return {
    edge: metric(m, 'seckill_edge_rule_checks_total', { rule: 'units_held', answered_by: 'edge' }),
    postgres: metric(m, 'seckill_edge_rule_checks_total', { rule: 'units_held', answered_by: 'postgres' }),
    renewals: metric(m, 'seckill_edge_copy_renewals_total', { copy: 'goods_holders', source: 'postgres' }),
  };
}

describe("a per-goods sale's holders at the edge", () => {
  it("answer the page's units from the copy once the isolate has one, and from Postgres when the page asks fresh", async () => {
    const goodsId = await threePerShopper();
    await order(goodsId, 'gh-two');
    await order(goodsId, 'gh-two');
    await order(goodsId, 'gh-two', 1, 3);
    const before = await counts();
    // The clock held still, however long a loaded machine takes between the loads: the copy read
    // once does not age into a second renewal.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    try {
      // No copy yet: Postgres answers; the page busy enough, its copy's read starts in the background.
      for (let i = 0; i < LOAD_AFTER_ASKS; i++) {
        expect(await page(goodsId, 'gh-two')).toEqual({ status: 200, body: { eligible: true, perUserLimit: 3, held: 2 } });
      }
      await behindTheBack(goodsId, 'gh-two');
      expect(await page(goodsId, 'gh-two')).toEqual({ status: 200, body: { eligible: true, perUserLimit: 3, held: 2 } });
      expect(await page(goodsId, 'gh-nobody')).toEqual({ status: 200, body: { eligible: true, perUserLimit: 3, held: 0 } });
      // The page's ask right after the shopper's own order changed: Postgres', which has them gone.
      expect(await page(goodsId, 'gh-two', '?fresh=1')).toEqual({ status: 200, body: { eligible: true, perUserLimit: 3, held: 0 } });
    } finally {
      vi.useRealTimers();
    }
    const after = await counts();
    expect({
      edge: after.edge - before.edge,
      postgres: after.postgres - before.postgres,
      renewals: after.renewals - before.renewals,
    }).toEqual({ edge: 2, postgres: LOAD_AFTER_ASKS + 1, renewals: 1 });
  });

  it('renew from the shoppers whose orders changed: new units, a closed order, a shopper with none left', async () => {
    const goodsId = await threePerShopper();
    const closing = await order(goodsId, 'gh-keeps', 2);
    await order(goodsId, 'gh-keeps');
    const last = await order(goodsId, 'gh-leaves');
    // A page asked now and then: no copy read, its statements answer; busy, the copy is read.
    expect(await busyPage(goodsId)).toBe(LOAD_AFTER_ASKS - 1);
    expect((await units(goodsId, 'gh-keeps')).answer).toBe(3);
    await setStatus(closing, 3);
    await setStatus(last, 2);
    await order(goodsId, 'gh-new', 2);
    // A second on, a request renews the copy from the changes; the answers after it have them.
    const later = Date.now() + 1_100;
    expect((await units(goodsId, 'gh-keeps', later)).renewed).toBe(1);
    expect((await units(goodsId, 'gh-keeps', later)).answer).toBe(1);
    expect((await units(goodsId, 'gh-leaves', later)).answer).toBe(0);
    expect((await units(goodsId, 'gh-new', later)).answer).toBe(2);
  });

  it("let a shopper whose order was cancelled here see their units back at once, through the order's cancel", async () => {
    const goodsId = await threePerShopper();
    const bought = await buyOrder('gh-cancel', goodsId);
    expect((await page(goodsId, 'gh-cancel')).body).toMatchObject({ held: 1 });
    await busyPage(goodsId);
    expect((await units(goodsId, 'gh-cancel')).answer).toBe(1);
    const cancel = await callAndWait(own, `/api/orders/${bought.orderId}/cancel`, { method: 'POST', headers: bearer(bought.jwt) });
    expect(cancel.status).toBe(200);
    // The copy read before the cancel answers no more: the statement does, then a copy read after it.
    expect((await units(goodsId, 'gh-cancel')).answer).toBeUndefined();
    expect((await page(goodsId, 'gh-cancel')).body).toMatchObject({ held: 0 });
    await busyPage(goodsId);
    expect((await units(goodsId, 'gh-cancel')).answer).toBe(0);
  });

  it('refuses a `fresh` that is neither 0 nor 1', async () => {
    const goodsId = await threePerShopper();
    const { status, body } = await page(goodsId, 'gh-bad', '?fresh=yes');
    expect(status).toBe(400);
    expect(body).toMatchObject({ error: { code: 'INVALID_INPUT' } });
  });

  it("read Postgres for every shopper's live units, for those of the shoppers changed since a time, and say when there are too many", async () => {
    const goodsId = await threePerShopper();
    const since = (await sql((db) => readGoodsHolders(db, goodsId, null, 10))).asOf;
    const closed = await order(goodsId, 'gh-r1');
    await order(goodsId, 'gh-r2', 2);
    await order(goodsId, 'gh-r2');
    await setStatus(closed, 3);
    const whole = await sql((db) => readGoodsHolders(db, goodsId, null, 10));
    expect(whole.changes).toEqual([{ userId: 'gh-r2', goodsId, quantity: 3, live: true }]);
    const changed = await sql((db) => readGoodsHolders(db, goodsId, since - 1_000, 10));
    expect(changed.changes?.sort((a, b) => a.userId.localeCompare(b.userId))).toEqual([
      { userId: 'gh-r1', goodsId, quantity: 0, live: false },
      { userId: 'gh-r2', goodsId, quantity: 3, live: true },
    ]);
    expect(changed.asOf).toBeGreaterThanOrEqual(since);
    expect((await sql((db) => readGoodsHolders(db, goodsId, since - 1_000, 1))).changes).toBeNull();
  });
});
