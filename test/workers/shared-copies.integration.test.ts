// What a data center's isolates share through the Cache API (workers/edge/shared-copies.ts).
// The goods list (goods-cache.ts): an isolate whose own copy is stale takes the data center's
// while it is fresh instead of asking Postgres, replaces an older one from Postgres, answers
// from one of any age while Postgres is away, and an admin change reaches it at once. The goods
// pages' stock (stock-reads.ts): a crowd's page views are one read of the goods' shards a
// second, a fresh copy of the data center's answers without one, no figure is over a second
// old, and a pause shows at once.
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { GoodsRow } from '../../db/goods';
import { seckillGoods } from '../../db/schema';
import { goodsStock } from '../../durable-objects/routing';
import { sharedListKey } from '../../workers/edge/goods-cache';
import { readShared, type SharedCopy, sharedKey, writeShared } from '../../workers/edge/shared-copies';
import type { StockRead } from '../../workers/edge/stock-reads';
import type { ObjectCallsView } from '../../workers/kernel/object-calls';
import { ADMIN, buy, call, createGoods, holdObject, json, metric, scrape, sql } from './helpers';

/**
 * The same database under a URL of this file's own, so that the shared copies it writes are
 * under keys no other file reads (the key is the database URL's).
 */
const own = {
  ...env,
  DATABASE_URL: `${env.DATABASE_URL}${env.DATABASE_URL.includes('?') ? '&' : '?'}application_name=shared-copies`,
} as Env;
/** The same, with the mirror off: a goods page's stock comes from the objects. */
const ownNoMirror = { ...own, UPSTASH_REDIS_REST_URL: '', UPSTASH_REDIS_REST_TOKEN: '' } as Env;
/** Postgres out of reach, under a URL no other file uses either. */
const away = { ...env, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/shared-copies' } as Env;

/** Past the isolate's own copy (4 s), and the shared copy's freshness (1 s) with it. */
const PAST_BOTH_MS = 5_000;

const CALLS = '/admin/dev/faults/object-calls';

afterEach(async () => {
  vi.useRealTimers();
  expect((await call(CALLS, { method: 'PUT', headers: ADMIN, json: { watch: false, reset: true } })).status).toBe(200);
});

/**
 * Moves this isolate's clock on by `ms` (the Worker reads the same Date), from where the file's
 * last move left it: the isolate remembers when it last refreshed, so its clock never goes back.
 */
let ahead = 0;
function later(ms: number): void {
  vi.useRealTimers();
  ahead += ms;
  vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + ahead });
}

async function rowOf(goodsId: number) {
  const [row] = await sql((db) => db.select().from(seckillGoods).where(eq(seckillGoods.id, goodsId)));
  if (!row) {
    throw new Error(`no goods ${goodsId}`);
  }
  return row;
}

/** The shared list of the deployment whose database is `databaseUrl`, put or read as the Worker does. */
async function putList(databaseUrl: string, list: SharedCopy<GoodsRow[]>): Promise<void> {
  await writeShared(await sharedListKey(databaseUrl), list, 600);
}

async function readList(databaseUrl: string): Promise<SharedCopy<GoodsRow[]> | undefined> {
  return readShared<GoodsRow[]>(await sharedListKey(databaseUrl));
}

async function titleOf(goodsId: number, workerEnv: Env): Promise<string> {
  const res = await call(`/api/seckill/goods/${goodsId}`, { env: workerEnv });
  const text = await res.clone().text();
  expect(res.status, text).toBe(200);
  return (await json<{ title: string }>(res)).title;
}

/** How many renewals of `copy` came from each source so far (`seckill_edge_copy_renewals_total`). */
async function renewals(copy: string): Promise<Record<string, number>> {
  const m = await scrape();
  const sources = ['data_center', 'postgres', 'objects', 'mirror', 'failed'];
  return Object.fromEntries(sources.map((source) => [source, metric(m, 'seckill_edge_copy_renewals_total', { copy, source })]));
}

/** What renewals of `copy` came from each source since `before` (sources with none left out). */
async function renewalsSince(copy: string, before: Record<string, number>): Promise<Record<string, number>> {
  const now = await renewals(copy);
  return Object.fromEntries(Object.entries(now).flatMap(([k, v]) => (v - (before[k] ?? 0) > 0 ? [[k, v - (before[k] ?? 0)]] : [])));
}

describe("the data center's goods list", () => {
  it('answers an isolate whose copy is stale while it is fresh, and is replaced from Postgres once it is not', async () => {
    const { goodsId } = await createGoods();
    const row = await rowOf(goodsId);
    // The goods' stock read once, so that the timings below are the list's.
    expect(await titleOf(goodsId, own)).toBe(row.title);
    later(PAST_BOTH_MS);
    const counted = await renewals('goods_list');
    // A copy another isolate of the data center listed just now: its title is not Postgres'.
    await putList(own.DATABASE_URL, { at: Date.now(), value: [{ ...row, title: 'As the data center listed it' }] });
    const fromShared = performance.now();
    expect(await titleOf(goodsId, own)).toBe('As the data center listed it');
    const sharedMs = performance.now() - fromShared;
    expect(await renewalsSince('goods_list', counted)).toEqual({ data_center: 1 });

    // Both stale: the refresh asks Postgres, and shares what it read.
    later(PAST_BOTH_MS);
    const before = Date.now();
    const fromPostgres = performance.now();
    expect(await titleOf(goodsId, own)).toBe(row.title);
    const postgresMs = performance.now() - fromPostgres;
    console.info(
      `shared-copies: a refreshing request took ${sharedMs.toFixed(1)} ms from the shared copy, ${postgresMs.toFixed(1)} ms from Postgres`,
    );
    const shared = await readList(own.DATABASE_URL);
    expect(shared?.at).toBeGreaterThanOrEqual(before);
    expect(shared?.value.find((r) => r.id === goodsId)?.title).toBe(row.title);
    expect(await renewalsSince('goods_list', counted)).toEqual({ data_center: 1, postgres: 1 });
  });

  it('answers from a copy of any age while Postgres is away', async () => {
    const { goodsId } = await createGoods();
    const row = await rowOf(goodsId);
    await putList(away.DATABASE_URL, { at: Date.now() - 120_000, value: [{ ...row, title: 'Listed two minutes ago' }] });
    later(PAST_BOTH_MS);
    expect(await titleOf(goodsId, away)).toBe('Listed two minutes ago');
  });

  it('takes an admin change at once', async () => {
    const { goodsId } = await createGoods();
    const before = Date.now();
    const res = await call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN });
    expect(res.status).toBe(200);
    const shared = await readList(env.DATABASE_URL);
    expect(shared?.at).toBeGreaterThanOrEqual(before);
    expect(shared?.value.find((r) => r.id === goodsId)?.status).toBe(1);
  });
});

type Page = { remaining: number; status: string };

async function page(goodsId: number): Promise<Page> {
  const res = await call(`/api/seckill/goods/${goodsId}`, { env: ownNoMirror });
  const text = await res.clone().text();
  expect(res.status, text).toBe(200);
  return json<Page>(res);
}

/** Counts object calls from here on. */
async function watchCalls(): Promise<void> {
  expect((await call(CALLS, { method: 'PUT', headers: ADMIN, json: { watch: true, reset: true } })).status).toBe(200);
}

/** The stock shards' snapshot calls counted since watchCalls. */
async function snapshotCalls(): Promise<number> {
  const view = await json<ObjectCallsView>(await call(CALLS, { headers: ADMIN }));
  return view.counts.GoodsStock?.snapshot?.calls ?? 0;
}

describe("the goods pages' stock", () => {
  const SHARDS = 4;

  it("is one read of the goods' shards a second in an isolate, however many pages the crowd opens", async () => {
    const { goodsId } = await createGoods({ stock: 20, shards: SHARDS });
    // The clock held still, however long a loaded machine takes between the pages.
    later(0);
    // Counted before the calls are (a scrape reads the stock objects for its gauges).
    const counted = await renewals('page_stock');
    await watchCalls();
    // The goods' first views in this isolate: one asks every shard, the others show the
    // database's figure meanwhile (the same 20 here).
    const first = await Promise.all(Array.from({ length: 50 }, () => page(goodsId)));
    expect(first.every((p) => p.remaining === 20)).toBe(true);
    expect(await snapshotCalls()).toBe(SHARDS);
    const crowd = await Promise.all(Array.from({ length: 50 }, () => page(goodsId)));
    expect(crowd.every((p) => p.remaining === 20)).toBe(true);
    expect(await snapshotCalls()).toBe(SHARDS);
    // A second on: the first page renews the figure (every shard once), the rest answer from it meanwhile.
    later(1_100);
    const next = await Promise.all(Array.from({ length: 50 }, () => page(goodsId)));
    expect(next.every((p) => p.remaining === 20)).toBe(true);
    expect(await snapshotCalls()).toBe(2 * SHARDS);
    expect(await renewalsSince('page_stock', counted)).toEqual({ objects: 2 });
  });

  it("answers from the data center's fresh copy without asking the objects", async () => {
    const { goodsId } = await createGoods({ stock: 20, shards: SHARDS });
    const key = await sharedKey(ownNoMirror.DATABASE_URL, `stock/${goodsId}`);
    // Counted before the copy is left (a scrape can take longer than the copy's second).
    const counted = await renewals('page_stock');
    await writeShared<StockRead>(key, { at: Date.now(), value: { remaining: 7 } }, 60);
    await watchCalls();
    expect((await page(goodsId)).remaining).toBe(7);
    expect(await snapshotCalls()).toBe(0);
    expect(await renewalsSince('page_stock', counted)).toEqual({ data_center: 1 });
  });

  it("answers within a second when a shard does not, with the database's figure, and asks the shards again on the next view", async () => {
    const { goodsId } = await createGoods({ stock: 20, shards: SHARDS });
    const counted = await renewals('page_stock');
    const { reopened } = await holdObject(goodsStock(env, { id: goodsId, locationHint: null, shards: SHARDS }, 1), 6_000);
    const started = Date.now();
    expect((await page(goodsId)).remaining).toBe(20);
    // The view's second for the shards, not the 6 s the shard is held.
    expect(Date.now() - started).toBeLessThan(3_000);
    await reopened;
    expect((await page(goodsId)).remaining).toBe(20);
    expect(await renewalsSince('page_stock', counted)).toEqual({ failed: 1, objects: 1 });
  });

  it('is never more than a second old, and shows a pause at once', async () => {
    const { goodsId } = await createGoods({ stock: 20, shards: SHARDS });
    expect((await page(goodsId)).remaining).toBe(20);
    expect((await buy('page-stock-buyer', goodsId)).status).toBe(202);
    later(1_100);
    expect((await page(goodsId)).remaining).toBe(19);
    const res = await call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN, env: own });
    expect(res.status).toBe(200);
    expect((await page(goodsId)).status).toBe('PAUSED');
  });
});
