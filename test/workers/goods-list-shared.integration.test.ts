// The goods list a data center's isolates share (workers/edge/goods-cache.ts): an isolate whose
// own copy is stale takes the data center's copy (the Cache API) while it is fresh instead of
// asking Postgres, replaces an older one from Postgres, answers from one of any age while
// Postgres is away, and an admin change reaches it at once.
import { env } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { seckillGoods } from '../../db/schema';
import { type SharedList, sharedListKey } from '../../workers/edge/goods-cache';
import { ADMIN, call, createGoods, json, sql } from './helpers';

/**
 * The same database under a URL of this file's own, so that the shared copies it writes are
 * under keys no other file reads (the key is the database URL's).
 */
const own = {
  ...env,
  DATABASE_URL: `${env.DATABASE_URL}${env.DATABASE_URL.includes('?') ? '&' : '?'}application_name=goods-list-shared`,
} as Env;
/** Postgres out of reach, under a URL no other file uses either. */
const away = { ...env, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/goods-list-shared' } as Env;

/** Past the isolate's own copy (4 s), and the shared copy's freshness (1 s) with it. */
const PAST_BOTH_MS = 5_000;

afterEach(() => {
  vi.useRealTimers();
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

async function putShared(databaseUrl: string, list: SharedList): Promise<void> {
  const headers = { 'content-type': 'application/json', 'cache-control': 'max-age=600' };
  await caches.default.put(await sharedListKey(databaseUrl), new Response(JSON.stringify(list), { headers }));
}

async function readShared(databaseUrl: string): Promise<SharedList | undefined> {
  const hit = await caches.default.match(await sharedListKey(databaseUrl));
  return hit ? ((await hit.json()) as SharedList) : undefined;
}

async function titleOf(goodsId: number, workerEnv: Env): Promise<string> {
  const res = await call(`/api/seckill/goods/${goodsId}`, { env: workerEnv });
  const text = await res.clone().text();
  expect(res.status, text).toBe(200);
  return (await json<{ title: string }>(res)).title;
}

describe("the data center's goods list", () => {
  it('answers an isolate whose copy is stale while it is fresh, and is replaced from Postgres once it is not', async () => {
    const { goodsId } = await createGoods();
    const row = await rowOf(goodsId);
    // The goods' stock read once, so that the timings below are the list's.
    expect(await titleOf(goodsId, own)).toBe(row.title);
    later(PAST_BOTH_MS);
    // A copy another isolate of the data center listed just now: its title is not Postgres'.
    await putShared(own.DATABASE_URL, { listedAt: Date.now(), rows: [{ ...row, title: 'As the data center listed it' }] });
    const fromShared = performance.now();
    expect(await titleOf(goodsId, own)).toBe('As the data center listed it');
    const sharedMs = performance.now() - fromShared;

    // Both stale: the refresh asks Postgres, and shares what it read.
    later(PAST_BOTH_MS);
    const before = Date.now();
    const fromPostgres = performance.now();
    expect(await titleOf(goodsId, own)).toBe(row.title);
    const postgresMs = performance.now() - fromPostgres;
    console.info(
      `goods-list-shared: a refreshing request took ${sharedMs.toFixed(1)} ms from the shared copy, ${postgresMs.toFixed(1)} ms from Postgres`,
    );
    const shared = await readShared(own.DATABASE_URL);
    expect(shared?.listedAt).toBeGreaterThanOrEqual(before);
    expect(shared?.rows.find((r) => r.id === goodsId)?.title).toBe(row.title);
  });

  it('answers from a copy of any age while Postgres is away', async () => {
    const { goodsId } = await createGoods();
    const row = await rowOf(goodsId);
    await putShared(away.DATABASE_URL, { listedAt: Date.now() - 120_000, rows: [{ ...row, title: 'Listed two minutes ago' }] });
    later(PAST_BOTH_MS);
    expect(await titleOf(goodsId, away)).toBe('Listed two minutes ago');
  });

  it('takes an admin change at once', async () => {
    const { goodsId } = await createGoods();
    const before = Date.now();
    const res = await call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN });
    expect(res.status).toBe(200);
    const shared = await readShared(env.DATABASE_URL);
    expect(shared?.listedAt).toBeGreaterThanOrEqual(before);
    expect(shared?.rows.find((r) => r.id === goodsId)?.status).toBe(1);
  });
});
