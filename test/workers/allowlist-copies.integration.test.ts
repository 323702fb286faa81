// An allowlist goods' list kept at the edge (workers/edge/allowlist-copies.ts): once an isolate
// holds the fingerprints of the list's current version, the waiting room's join and the token
// route answer from them and not from a Postgres statement a shopper; a change of the list is a
// new version, which the shoppers' own statements answer until its copy is loaded; a version's
// copy is loaded from Postgres once and then read from the data center's cache; a list too large
// to keep leaves every shopper to the statement. Before the sale starts, the page's eligibility
// route answers from the copy too (nobody holds a unit yet); while Postgres is away a copy still
// answers, and without one the statement meets the outage (503).
//
// "Not from Postgres" is shown by changing seckill_allowlist behind the version's back (plain SQL,
// no version moved): a copy answers what the list held when it was loaded, a statement what it
// holds now.
import { createExecutionContext } from 'cloudflare:test';
import { eq, sql as raw } from 'drizzle-orm';
import { beforeEach, describe, expect, it } from 'vitest';
import { seckillGoods } from '../../db/schema';
import { allowlistCopyName, fingerprintsOf, forgetAllowlists, keepCopy, listedAtEdge, loadCopy } from '../../workers/edge/allowlist-copies';
import { requireEligible } from '../../workers/edge/eligibility';
import { getGoods, invalidateGoods } from '../../workers/edge/goods-cache';
import { LOAD_AFTER_ASKS } from '../../workers/edge/holders-copies';
import { dropShared, readSharedBytes, sharedKey, writeSharedBytes } from '../../workers/edge/shared-copies';
import worker from '../../workers/index';
import { getConfig } from '../../workers/kernel/config';
import { ADMIN, bearer, callAndWait, devToken, json, looseLimitsForFile, metric, ownEnv, scrape, sql } from './helpers';
import { answerOf, createRulesGoods } from './rules-helpers';

const own = ownEnv('allowlist-copies');
const config = getConfig(own);

looseLimitsForFile();
beforeEach(() => {
  forgetAllowlists();
});

/** The goods as the edge reads it (its id, creation and allowlist version), as Postgres has it now. */
async function goodsAt(goodsId: number) {
  const [row] = await sql((db) =>
    db
      .select({ id: seckillGoods.id, createdAt: seckillGoods.createdAt, allowlistVersion: seckillGoods.allowlistVersion })
      .from(seckillGoods)
      .where(eq(seckillGoods.id, goodsId)),
  );
  if (!row) {
    throw new Error(`no goods ${goodsId}`);
  }
  return row;
}

async function versionOf(goodsId: number): Promise<number> {
  return (await goodsAt(goodsId)).allowlistVersion;
}

/** Changes the list behind the version's back: what a copy does not see and a statement does. */
async function behindTheBack(goodsId: number, change: { add?: string[]; remove?: string[] }) {
  for (const id of change.add ?? []) {
    await sql((db) => db.execute(raw`INSERT INTO seckill_allowlist (goods_id, user_id) VALUES (${goodsId}, ${id})`));
  }
  for (const id of change.remove ?? []) {
    await sql((db) => db.execute(raw`DELETE FROM seckill_allowlist WHERE goods_id = ${goodsId} AND user_id = ${id}`));
  }
}

function changeList(goodsId: number, change: { add?: string[]; remove?: string[] }) {
  return callAndWait(own, `/admin/goods/${goodsId}/allowlist`, { method: 'PUT', headers: ADMIN, json: change });
}

async function join(userId: string, goodsId: number) {
  return answerOf(
    await callAndWait(own, `/api/seckill/goods/${goodsId}/queue`, { method: 'POST', headers: bearer(await devToken(userId)) }),
  );
}

async function token(userId: string, goodsId: number) {
  const jwt = await devToken(userId);
  const ch = await json<{ challengeId: string; prompt: string }>(
    await callAndWait(own, `/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) }),
  );
  const [a, b] = ch.prompt.match(/\d+/g)?.map(Number) ?? [];
  const answer = String((a ?? 0) + (b ?? 0));
  return answerOf(
    await callAndWait(own, `/api/seckill/goods/${goodsId}/token`, {
      method: 'POST',
      headers: bearer(jwt),
      json: { challengeId: ch.challengeId, answer },
    }),
  );
}

describe("an allowlist goods' list kept at the edge", () => {
  it('answers joins and token requests from the copy once it is loaded, and a new version from statements until its copy is', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist' });
    expect((await changeList(goodsId, { add: ['kc-in', 'kc-late'] })).status).toBe(200);
    const first = await versionOf(goodsId);
    expect(first).toBeGreaterThan(0);

    // The first join finds no copy: its statement answers, and it leaves the copy loading.
    expect((await join('kc-in', goodsId)).status).toBe(200);
    expect(listedAtEdge(config, await goodsAt(goodsId), 'kc-in', undefined)).toBe(true);
    expect(listedAtEdge(config, await goodsAt(goodsId), 'kc-out', undefined)).toBe(false);

    // Behind the version's back: the copy still has kc-in and not kc-ghost, so it answered.
    await behindTheBack(goodsId, { add: ['kc-ghost'], remove: ['kc-in'] });
    expect((await join('kc-in', goodsId)).status).toBe(200);
    expect(await join('kc-ghost', goodsId)).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    expect((await token('kc-in', goodsId)).status).toBe(200);
    expect(await token('kc-ghost', goodsId)).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });

    // A change through the route is a new version: until its copy is here, statements answer
    // (kc-in is gone from Postgres, kc-ghost is on it); then the copy, which holds the same.
    expect((await changeList(goodsId, { remove: ['kc-late'] })).status).toBe(200);
    const second = await goodsAt(goodsId);
    expect(second.allowlistVersion).toBe(first + 1);
    expect(listedAtEdge(config, second, 'kc-ghost', undefined)).toBeUndefined();
    expect(await join('kc-in', goodsId)).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    expect((await join('kc-ghost', goodsId)).status).toBe(200);
    expect(listedAtEdge(config, second, 'kc-ghost', undefined)).toBe(true);
    expect(listedAtEdge(config, second, 'kc-in', undefined)).toBe(false);
    expect(listedAtEdge(config, second, 'kc-late', undefined)).toBe(false);
    // A goods row a version behind the copy is answered by the newer copy.
    expect(listedAtEdge(config, { ...second, allowlistVersion: first }, 'kc-ghost', undefined)).toBe(true);
  });

  it("loads a version from Postgres once, in pages, and other isolates read the data center's copy", async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist' });
    const ids = Array.from({ length: 23 }, (_, i) => `kc-page-${i}`);
    expect((await changeList(goodsId, { add: ids })).status).toBe(200);
    const row = await goodsAt(goodsId);
    const version = row.allowlistVersion;
    const renewals = async () => {
      const m = await scrape();
      const from = (source: string) => metric(m, 'seckill_edge_copy_renewals_total', { copy: 'allowlist', source });
      return { postgres: from('postgres'), dataCenter: from('data_center') };
    };
    const before = await renewals();

    // Pages of 5 over 23 shoppers: every one held, none more.
    const loaded = await loadCopy(config, row, version, 5);
    expect(loaded?.length).toBe(23);
    // Its loading mark is gone with the load.
    expect(await readSharedBytes(`${await sharedKey(config.databaseUrl, allowlistCopyName(row, version))}/loading`)).toBeUndefined();
    const goods = row;
    const loads: Promise<unknown>[] = [];
    expect(listedAtEdge(config, goods, 'kc-page-0', (p) => loads.push(p))).toBeUndefined();
    // One load per isolate at a time: the requests beside it do not start another.
    expect(listedAtEdge(config, goods, 'kc-page-1', (p) => loads.push(p))).toBeUndefined();
    expect(loads).toHaveLength(1);
    await Promise.all(loads);
    expect(ids.every((id) => listedAtEdge(config, goods, id, undefined) === true)).toBe(true);
    expect(listedAtEdge(config, goods, 'kc-page-23', undefined)).toBe(false);

    // Another isolate (this one, forgetting) reads the data center's copy: Postgres' new row is not in it.
    await behindTheBack(goodsId, { add: ['kc-page-new'] });
    forgetAllowlists();
    expect((await loadCopy(config, row, version))?.length).toBe(23);
    // A version the data center has no copy of is Postgres' list as it is now.
    expect((await loadCopy(config, row, version + 1000))?.length).toBe(24);
    // So is the same id and version of a goods created at another moment (a database made again
    // under the same URL): the copy is keyed by the goods' creation too.
    expect((await loadCopy(config, { ...row, createdAt: new Date(row.createdAt.getTime() + 1) }, version))?.length).toBe(24);
    // Counted by where each load came from: three from Postgres, two from the data center's copy.
    const after = await renewals();
    expect({ postgres: after.postgres - before.postgres, dataCenter: after.dataCenter - before.dataCenter }).toEqual({
      postgres: 3,
      dataCenter: 2,
    });
  });

  it('a version another isolate of the data center is loading is not loaded again: its copy is looked for a second later', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist' });
    expect((await changeList(goodsId, { add: ['km-in'] })).status).toBe(200);
    const row = await goodsAt(goodsId);
    const key = await sharedKey(config.databaseUrl, allowlistCopyName(row, row.allowlistVersion));
    // Another isolate's mark: this one neither reads Postgres nor marks the version itself.
    await writeSharedBytes(`${key}/loading`, new Uint8Array([1]), 30);
    expect(await loadCopy(config, row, row.allowlistVersion)).toBeUndefined();
    const loads: Promise<unknown>[] = [];
    expect(listedAtEdge(config, row, 'km-in', (p) => loads.push(p))).toBeUndefined();
    await Promise.all(loads);
    expect(listedAtEdge(config, row, 'km-in', (p) => loads.push(p))).toBeUndefined();
    expect(loads).toHaveLength(1);
    // The other isolate leaves its copy (one of a list Postgres never had, to show which is read) and its mark goes.
    await writeSharedBytes(key, new Uint8Array(fingerprintsOf(['km-shared']).buffer), 600);
    await dropShared(`${key}/loading`);
    expect(listedAtEdge(config, row, 'km-in', (p) => loads.push(p), Date.now() + 1_000)).toBeUndefined();
    await Promise.all(loads);
    expect(listedAtEdge(config, row, 'km-shared', undefined)).toBe(true);
    expect(listedAtEdge(config, row, 'km-in', undefined)).toBe(false);
  });

  it('a list over the bound is never kept: every shopper asks Postgres, and the data center remembers it', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist' });
    expect((await changeList(goodsId, { add: ['kc-big-1', 'kc-big-2', 'kc-big-3'] })).status).toBe(200);
    const row = await goodsAt(goodsId);
    const version = row.allowlistVersion;
    expect(await loadCopy(config, row, version, 2, 2)).toBeNull();
    const copy = await readSharedBytes(await sharedKey(config.databaseUrl, allowlistCopyName(row, version)));
    expect(copy?.byteLength).toBe(1);
    // The isolate's load now reads that mark: nothing is kept, statements answer every shopper.
    const loads: Promise<unknown>[] = [];
    expect(listedAtEdge(config, row, 'kc-big-1', (p) => loads.push(p))).toBeUndefined();
    await Promise.all(loads);
    expect(listedAtEdge(config, row, 'kc-big-1', undefined)).toBeUndefined();
    expect((await join('kc-big-2', goodsId)).status).toBe(200);
    expect(await join('kc-big-9', goodsId)).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
  });

  it("answers the page's eligibility from the copies before the start and on, and from Postgres where one is missing or asked fresh", async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist', perUserLimit: 2, startAt: Date.now() + 600_000 });
    expect((await changeList(goodsId, { add: ['kp-in'] })).status).toBe(200);
    const page = async (userId: string, query = '') =>
      json(await callAndWait(own, `/api/seckill/goods/${goodsId}/eligibility${query}`, { headers: bearer(await devToken(userId)) }));

    // The first view finds no copy and asks Postgres; its request leaves the copy loaded.
    expect(await page('kp-in')).toEqual({ eligible: true, perUserLimit: 2, held: 0 });
    await behindTheBack(goodsId, { add: ['kp-ghost'], remove: ['kp-in'] });
    expect(await page('kp-in')).toEqual({ eligible: true, perUserLimit: 2, held: 0 });
    expect(await page('kp-ghost')).toEqual({ eligible: false, perUserLimit: 2, held: 0 });

    // The sale on (its start moved in Postgres, as the clock would): the units a shopper holds
    // come from the goods' holders copy, which is read once the page is busy (LOAD_AFTER_ASKS
    // asks); until then Postgres answers, the list as it is now. Then the copies answer, the
    // list's as loaded; the page's ask right after a shopper's own order changed (`?fresh=1`)
    // is Postgres' still.
    await sql((db) => db.execute(raw`UPDATE seckill_goods SET start_at = now() - interval '1 second' WHERE id = ${goodsId}`));
    await invalidateGoods(config);
    expect(await page('kp-in')).toEqual({ eligible: false, perUserLimit: 2, held: 0 });
    for (let i = 1; i < LOAD_AFTER_ASKS; i++) {
      expect(await page('kp-ghost')).toEqual({ eligible: true, perUserLimit: 2, held: 0 });
    }
    expect(await page('kp-ghost')).toEqual({ eligible: false, perUserLimit: 2, held: 0 });
    expect(await page('kp-ghost', '?fresh=1')).toEqual({ eligible: true, perUserLimit: 2, held: 0 });
  });

  it('answers the eligibility of an open goods of several units a shopper before its start without Postgres', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, perUserLimit: 2, startAt: Date.now() + 600_000 });
    // Postgres out of reach (the goods list is this isolate's own, renewed by the create).
    const away = { ...own, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/allowlist-copies' } as Env;
    const res = await worker.fetch(
      new Request(`https://seckill.test/api/seckill/goods/${goodsId}/eligibility`, { headers: bearer(await devToken('kp-open')) }),
      away,
      createExecutionContext(),
    );
    expect(await json(res)).toEqual({ eligible: true, perUserLimit: 2, held: 0 });
  });

  it('answers joins from the copy while Postgres is out of reach', async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist' });
    expect((await changeList(goodsId, { add: ['kd-in'] })).status).toBe(200);
    // The isolate holds the current version's copy of a deployment whose Postgres is away (the
    // goods list is this isolate's own, renewed by the change).
    const away = { ...own, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/allowlist-copies' } as Env;
    const version = await versionOf(goodsId);
    keepCopy(`${away.DATABASE_URL}|${goodsId}`, { version, fingerprints: fingerprintsOf(['kd-in']) });
    const joinAway = async (userId: string) => {
      const headers = bearer(await devToken(userId));
      const req = new Request(`https://seckill.test/api/seckill/goods/${goodsId}/queue`, { method: 'POST', headers });
      return answerOf(await worker.fetch(req, away, createExecutionContext()));
    };
    expect(await joinAway('kd-in')).toMatchObject({ status: 200 });
    expect(await joinAway('kd-out')).toMatchObject({ status: 403, code: 'NOT_ELIGIBLE' });
    // Without a copy, the shopper's statement meets the outage: 503, not a guess.
    forgetAllowlists();
    expect(await joinAway('kd-in')).toMatchObject({ status: 503, code: 'UNAVAILABLE' });
  });

  it("an activity-scoped allowlist goods loads both copies, the list's and the activity's holders, and then answers from them", async () => {
    const { goodsId } = await createRulesGoods({ stock: 5, eligibility: 'allowlist', limitScope: 'activity', activityId: 912_345 });
    expect((await changeList(goodsId, { add: ['kc-act'] })).status).toBe(200);
    const goods = await getGoods(config, goodsId);
    expect(goods).toMatchObject({ eligibility: 'allowlist', limitScope: 'activity' });
    const loads: Promise<unknown>[] = [];
    await requireEligible(config, goods, 'kc-act', (p) => loads.push(p));
    expect(loads).toHaveLength(2);
    await Promise.all(loads);
    await behindTheBack(goodsId, { remove: ['kc-act'], add: ['kc-act-out'] });
    await requireEligible(config, goods, 'kc-act', (p) => loads.push(p));
    await expect(requireEligible(config, goods, 'kc-act-out', (p) => loads.push(p))).rejects.toMatchObject({ code: 'NOT_ELIGIBLE' });
    expect(loads).toHaveLength(2);
  });
});
