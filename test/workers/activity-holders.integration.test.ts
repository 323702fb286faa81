// An activity-scoped sale's rule at the edge (workers/edge/holders-copies.ts): once an isolate
// holds its copy of who holds a live order of the activity, the waiting room's join, the token
// route and the page's eligibility answer from it and not from a Postgres statement a shopper;
// a renewal reads the orders that changed since the copy's read, or the data center's copy when
// another isolate read Postgres within the second; a copy 5 s old no longer answers; an order
// cancelled here frees its shopper at once, whatever copies were read before.
//
// "Not from Postgres" is shown by deleting an order behind the copies' back (plain SQL, no change
// stamped): a copy answers what the orders were when it read them, a statement what they are now,
// and a renewal that reads only the changes does not see a deletion either.
import { sql as raw } from 'drizzle-orm';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { readActivityHolders } from '../../db/holders';
import { forgetAllowlists } from '../../workers/edge/allowlist-copies';
import { requireEligible, standingAtEdge } from '../../workers/edge/eligibility';
import { getGoods } from '../../workers/edge/goods-cache';
import { forgetHoldersCopies, forgetHoldersOf, holdingAtEdge } from '../../workers/edge/holders-copies';
import { readSharedBytes, sharedKey, writeSharedBytes } from '../../workers/edge/shared-copies';
import { getConfig } from '../../workers/kernel/config';
import { randomId } from '../../workers/kernel/crypto';
import { ADMIN, bearer, callAndWait, devToken, json, looseLimitsForFile, metric, ownEnv, scrape, sql } from './helpers';
import { answerOf, createRulesGoods, freshActivity } from './rules-helpers';

const own = ownEnv('activity-holders');
const config = getConfig(own);

looseLimitsForFile();
beforeEach(() => {
  forgetHoldersCopies();
  forgetAllowlists();
});

/** Two goods of a fresh activity, `activity`-scoped, on sale. */
async function activityGoods(options: { eligibility?: 'allowlist'; perUserLimit?: number } = {}) {
  const activityId = freshActivity();
  const rules = { stock: 10, activityId, limitScope: 'activity' as const, perUserLimit: options.perUserLimit ?? 3, ...options };
  const a = (await createRulesGoods(rules)).goodsId;
  const b = (await createRulesGoods(rules)).goodsId;
  return { activityId, a, b };
}

/** Writes an activity order straight into Postgres (a live one unless `status` says otherwise); its id. */
async function order(activityId: number, goodsId: number, userId: string, quantity = 1, status = 0): Promise<string> {
  const id = randomId();
  await sql((db) =>
    db.execute(raw`INSERT INTO seckill_order (id, order_no, request_id, user_id, goods_id, activity_id, price_cents, quantity,
      limit_scope, per_user_limit, status, reserved_at, pay_deadline)
      VALUES (${id}, ${`no-${id}`}, ${`rq-${id}`}, ${userId}, ${goodsId}, ${activityId}, 100, ${quantity}, 'activity', 3, ${status},
        now(), now() + interval '10 minutes')`),
  );
  return id;
}

/** An order's status changed as the lifecycle does it (the change stamped). */
async function setStatus(orderId: string, status: number): Promise<void> {
  await sql((db) => db.execute(raw`UPDATE seckill_order SET status = ${status}, updated_at = now() WHERE id = ${orderId}`));
}

/** An order gone behind the copies' back: no change stamped, so only a statement or a whole read sees it. */
async function behindTheBack(orderId: string): Promise<void> {
  await sql((db) => db.execute(raw`DELETE FROM seckill_order WHERE id = ${orderId}`));
}

/** What this isolate's copy says of a shopper (at `now`), with the renewal it started run to its end. */
async function holding(activityId: number, userId: string, now = Date.now(), cfg = config) {
  const renewals: Promise<unknown>[] = [];
  const answer = holdingAtEdge(cfg, activityId, userId, (p) => renewals.push(p), now);
  await Promise.all(renewals);
  return { answer, renewed: renewals.length };
}

describe("an activity's holders at the edge", () => {
  it("answer a shopper's live order from the copy once the isolate has one, not from Postgres", async () => {
    const { activityId, a, b } = await activityGoods();
    const mine = await order(activityId, a, 'ah-one', 2);
    // No copy yet: the caller asks Postgres, and the copy's read starts in the background.
    expect(await holding(activityId, 'ah-one')).toEqual({ answer: undefined, renewed: 1 });
    expect((await holding(activityId, 'ah-one')).answer).toEqual({ goodsId: a, quantity: 2 });
    expect((await holding(activityId, 'ah-nobody')).answer).toBeNull();

    await behindTheBack(mine);
    expect((await holding(activityId, 'ah-one')).answer).toEqual({ goodsId: a, quantity: 2 });
    const [goodsA, goodsB] = [await getGoods(config, a), await getGoods(config, b)];
    // The other goods of the activity refuses the shopper; the same goods leaves it to its object.
    await expect(requireEligible(config, goodsB, 'ah-one', undefined)).rejects.toMatchObject({ code: 'LIMIT_REACHED' });
    await requireEligible(config, goodsA, 'ah-one', undefined);
    expect(standingAtEdge(config, goodsA, 'ah-one', undefined)).toEqual({ listed: true, held: 2, elsewhere: false });
    expect(standingAtEdge(config, goodsB, 'ah-one', undefined)).toEqual({ listed: true, held: 0, elsewhere: true });
    // A copy 5 s old no longer answers: the statement does (and knows the order is gone).
    expect((await holding(activityId, 'ah-one', Date.now() + 5_100)).answer).toBeUndefined();
  });

  it('renew from the orders changed since the copy: new orders, closed ones, a shopper who ordered again elsewhere', async () => {
    const { activityId, a, b } = await activityGoods();
    const first = await order(activityId, a, 'ah-moves');
    const stays = await order(activityId, b, 'ah-stays', 3);
    await holding(activityId, 'ah-moves');
    expect((await holding(activityId, 'ah-moves')).answer).toEqual({ goodsId: a, quantity: 1 });

    await order(activityId, a, 'ah-new', 2);
    await setStatus(first, 2);
    await order(activityId, b, 'ah-moves');
    // Gone without a stamped change: a renewal that reads only the changes keeps it.
    await behindTheBack(stays);
    const later = Date.now() + 1_100;
    expect(await holding(activityId, 'ah-new', later)).toEqual({ answer: null, renewed: 1 });
    expect((await holding(activityId, 'ah-new', later)).answer).toEqual({ goodsId: a, quantity: 2 });
    expect((await holding(activityId, 'ah-moves', later)).answer).toEqual({ goodsId: b, quantity: 1 });
    expect((await holding(activityId, 'ah-stays', later)).answer).toEqual({ goodsId: b, quantity: 3 });
  });

  it("take the data center's copy when another isolate read Postgres within the second", async () => {
    const { activityId, a } = await activityGoods();
    const gone = await order(activityId, a, 'ah-shared');
    await holding(activityId, 'ah-shared');
    await behindTheBack(gone);
    // A new isolate: its first renewal finds the data center's copy fresh and reads no Postgres
    // (which would have said the order is gone).
    forgetHoldersCopies();
    expect(await holding(activityId, 'ah-shared')).toEqual({ answer: undefined, renewed: 1 });
    expect((await holding(activityId, 'ah-shared')).answer).toEqual({ goodsId: a, quantity: 1 });
  });

  it('let a shopper whose order was cancelled here buy again at once, whatever copies were read before', async () => {
    const { activityId, a } = await activityGoods();
    const cancelled = await order(activityId, a, 'ah-cancel');
    await holding(activityId, 'ah-cancel');
    const name = await sharedKey(config.databaseUrl, `activity-holders/${activityId}`);
    const before = await readSharedBytes(name);
    expect(before?.byteLength).toBeGreaterThan(0);

    await setStatus(cancelled, 2);
    await forgetHoldersOf(config, { limitScope: 'activity', activityId, goodsId: a });
    // Another isolate of the data center leaves the copy it read before the cancel.
    await writeSharedBytes(name, new Uint8Array(before ?? new ArrayBuffer(0)), 15);
    // No copy answers until one read after the cancel: the statement does.
    expect(await holding(activityId, 'ah-cancel')).toEqual({ answer: undefined, renewed: 1 });
    expect((await holding(activityId, 'ah-cancel')).answer).toBeNull();
  });

  it("answer the join, the token's check and the page's eligibility of an activity goods from the copies", async () => {
    const { activityId, a, b } = await activityGoods({ eligibility: 'allowlist', perUserLimit: 2 });
    for (const goodsId of [a, b]) {
      const res = await callAndWait(own, `/admin/goods/${goodsId}/allowlist`, {
        method: 'PUT',
        headers: ADMIN,
        json: { add: ['ah-in', 'ah-held'] },
      });
      expect(res.status).toBe(200);
    }
    const held = await order(activityId, a, 'ah-held', 2);
    const join = async (goodsId: number, userId: string) =>
      answerOf(await callAndWait(own, `/api/seckill/goods/${goodsId}/queue`, { method: 'POST', headers: bearer(await devToken(userId)) }));
    const page = async (goodsId: number, userId: string) =>
      json(await callAndWait(own, `/api/seckill/goods/${goodsId}/eligibility`, { headers: bearer(await devToken(userId)) }));
    // The first requests load the copies (each goods' list, the activity's holders); Postgres answers them.
    expect(await join(b, 'ah-held')).toMatchObject({ status: 409, code: 'LIMIT_REACHED' });
    expect(await page(a, 'ah-held')).toEqual({ eligible: true, perUserLimit: 2, held: 2 });
    await behindTheBack(held);
    expect(await join(b, 'ah-held')).toMatchObject({ status: 409, code: 'LIMIT_REACHED' });
    expect(await join(b, 'ah-in')).toMatchObject({ status: 200 });
    expect(await join(b, 'ah-out')).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    expect(await page(a, 'ah-held')).toEqual({ eligible: true, perUserLimit: 2, held: 2 });
    expect(await page(b, 'ah-held')).toEqual({ eligible: false, perUserLimit: 2, held: 0 });
    expect(await page(b, 'ah-out')).toEqual({ eligible: false, perUserLimit: 2, held: 0 });
  });

  it('answer from the last copy for up to half an hour while Postgres is away, in a new isolate too, and renew when it is back', async () => {
    const { activityId, a } = await activityGoods();
    await order(activityId, a, 'ah-away');
    await holding(activityId, 'ah-away');
    // The same deployment with Postgres out of reach: its renewals fail. The clock moved on by hand.
    const away = { ...config, pgWsProxy: '127.0.0.1:1' };
    const start = Date.now();
    const at = (ms: number) => vi.useFakeTimers({ toFake: ['Date'], now: start + ms });
    try {
      at(1_100);
      expect(await holding(activityId, 'ah-away', Date.now(), away)).toEqual({ answer: { goodsId: a, quantity: 1 }, renewed: 1 });
      // Past the 5 s a renewing copy answers: Postgres' orders do not change while it is away, so the copy is what a statement would say.
      at(60_000);
      expect((await holding(activityId, 'ah-away', Date.now(), away)).answer).toEqual({ goodsId: a, quantity: 1 });
      expect((await holding(activityId, 'ah-nobody', Date.now(), away)).answer).toBeNull();
      // A new isolate has no copy: its first shopper asks Postgres (and meets the outage), its renewal takes the data center's copy.
      forgetHoldersCopies();
      expect(await holding(activityId, 'ah-away', Date.now(), away)).toEqual({ answer: undefined, renewed: 1 });
      at(120_000);
      expect((await holding(activityId, 'ah-away', Date.now(), away)).answer).toEqual({ goodsId: a, quantity: 1 });
      // Not past half an hour.
      at(1_810_000);
      expect((await holding(activityId, 'ah-away', Date.now(), away)).answer).toBeUndefined();
      // Postgres back: the next renewal reads it, and its copy answers for 5 s again.
      at(1_811_100);
      expect((await holding(activityId, 'ah-away')).renewed).toBe(1);
      expect((await holding(activityId, 'ah-away')).answer).toEqual({ goodsId: a, quantity: 1 });
      at(1_816_200);
      expect((await holding(activityId, 'ah-away', Date.now(), away)).answer).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
  });

  it('are counted: the checks by what answered them, the renewals by where they came from', async () => {
    const { activityId, a, b } = await activityGoods();
    await order(activityId, a, 'ah-counted');
    const join = async (userId: string) =>
      answerOf(await callAndWait(own, `/api/seckill/goods/${b}/queue`, { method: 'POST', headers: bearer(await devToken(userId)) }));
    const counts = async () => {
      const m = await scrape();
      const checks = (answered_by: string) => metric(m, 'seckill_edge_rule_checks_total', { rule: 'activity', answered_by });
      const renewals = (source: string) => metric(m, 'seckill_edge_copy_renewals_total', { copy: 'activity_holders', source });
      return {
        edge: checks('edge'),
        postgres: checks('postgres'),
        fromPostgres: renewals('postgres'),
        fromDataCenter: renewals('data_center'),
      };
    };
    const before = await counts();
    // The clock held still, however long a loaded machine takes between the joins: no copy ages into a renewal.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    let after: Awaited<ReturnType<typeof counts>>;
    try {
      // The first join asks Postgres and reads the copy; the next three answer from it.
      expect(await join('ah-counted')).toMatchObject({ status: 409, code: 'LIMIT_REACHED' });
      for (const userId of ['ah-c1', 'ah-c2', 'ah-counted']) {
        await join(userId);
      }
      // A new isolate takes the data center's copy.
      forgetHoldersCopies();
      await holding(activityId, 'ah-counted');
      after = await counts();
    } finally {
      vi.useRealTimers();
    }
    expect({
      edge: after.edge - before.edge,
      postgres: after.postgres - before.postgres,
      fromPostgres: after.fromPostgres - before.fromPostgres,
      fromDataCenter: after.fromDataCenter - before.fromDataCenter,
    }).toEqual({ edge: 3, postgres: 1, fromPostgres: 1, fromDataCenter: 1 });
  });

  it('read Postgres for the whole list, for the changes since a time, and say when there are too many', async () => {
    const { activityId, a, b } = await activityGoods();
    const since = (await sql((db) => readActivityHolders(db, activityId, null, 10))).asOf;
    const closed = await order(activityId, a, 'ah-r1');
    await order(activityId, b, 'ah-r2', 2);
    await setStatus(closed, 3);
    const whole = await sql((db) => readActivityHolders(db, activityId, null, 10));
    expect(whole.changes).toEqual([{ userId: 'ah-r2', goodsId: b, quantity: 2, live: true }]);
    const changed = await sql((db) => readActivityHolders(db, activityId, since - 1_000, 10));
    expect(changed.changes).toEqual([
      { userId: 'ah-r2', goodsId: b, quantity: 2, live: true },
      { userId: 'ah-r1', goodsId: a, quantity: 1, live: false },
    ]);
    expect(changed.asOf).toBeGreaterThanOrEqual(since);
    expect((await sql((db) => readActivityHolders(db, activityId, since - 1_000, 1))).changes).toBeNull();
  });
});
