// A dependency that fails under a request (docs/operations.md#when-a-dependency-fails): Postgres
// out of reach, or a Durable Object reset as the call reaches it, is the contract's 503
// UNAVAILABLE with Retry-After, not a 500; the same request answers as usual once the dependency
// is back, and an object keeps what it had stored. A bug stays a 500.
import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { dbOptions, httpDb, SHOPPER_STATEMENT_MS } from '../../db/client';
import { goodsStock, roomHub, roomShard } from '../../durable-objects/routing';
import { REPORT_DEADLINE_MS } from '../../durable-objects/waiting-room/standing';
import { GOODS_TTL_MS, getGoods } from '../../workers/edge/goods-cache';
import { objectCall } from '../../workers/edge/object-unavailable';
import { lineIsOn } from '../../workers/edge/waiting-room';
import { getConfig } from '../../workers/kernel/config';
import { hmacHex } from '../../workers/kernel/crypto';
import { askObjectReset, GUARD_LIST_RESET_NAME, guardResetName, LIMITS_RESET_NAME, resetName } from '../../workers/kernel/dev-faults';
import { AppError } from '../../workers/kernel/errors';
import { UPKEEP_CALL_MS } from '../../workers/kernel/within';
import {
  ADMIN,
  bearer,
  buyOrder,
  call,
  createGoods,
  devToken,
  holdObject,
  json,
  reconcileNow,
  setLimits,
  stats,
  stockObject,
} from './helpers';
import { createQueuedGoods, join, shopper, sleep } from './room-helpers';
import { changeAllowlist, createRulesGoods } from './rules-helpers';

const postgresDown = { ...env, DATABASE_URL: 'postgres://nobody:nobody@127.0.0.1:1/nowhere' } as Env;
/** A Postgres the bridge reaches that takes every connection and statement and never answers (test/setup/services.ts). */
const postgresHung = { ...env, DATABASE_URL: (env as unknown as { TEST_SILENT_DATABASE_URL: string }).TEST_SILENT_DATABASE_URL } as Env;

type Ask = { path: string; method?: string; headers?: Record<string, string>; json?: unknown; body?: string };

/** The contract's 503: UNAVAILABLE, Retry-After, `{error: {code, message, requestId}}` and no internals. */
async function expectUnavailable(res: Response): Promise<void> {
  const text = await res.text();
  expect(res.status, text).toBe(503);
  expect(res.headers.get('retry-after')).toBe('1');
  const body = JSON.parse(text) as { error: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  expect(body.error).toEqual({ code: 'UNAVAILABLE', message: expect.stringMatching(/retry/), requestId: expect.stringMatching(/^\S+$/) });
  expect(text).not.toMatch(/nowhere|127\.0\.0\.1|Failed query|dev fault/);
}

/** The request with Postgres out of reach (503), then the same request with it back (`ok`). */
async function downThenBack(ask: Ask, ok: number): Promise<Response> {
  await expectUnavailable(await call(ask.path, { ...ask, env: postgresDown }));
  const back = await call(ask.path, ask);
  // A 101 carries a WebSocket, no body to show.
  const shown = back.status === 101 ? '' : await back.clone().text();
  expect(back.status, `${ask.method ?? 'GET'} ${ask.path}: ${shown}`).toBe(ok);
  return back;
}

type Answer = { challengeId: string; answer: string };

/** A challenge asked for and solved: the token route's body. */
async function solvedChallenge(jwt: string, goodsId: number): Promise<Answer> {
  const challenged = await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) });
  expect(challenged.status).toBe(200);
  const { challengeId, prompt } = await json<{ challengeId: string; prompt: string }>(challenged);
  const [a, b] = prompt.match(/\d+/g)?.map(Number) ?? [];
  return { challengeId, answer: String((a ?? 0) + (b ?? 0)) };
}

/** The answer exchanged for a purchase token. */
function redeem(jwt: string, goodsId: number, answer: Answer, workerEnv: Env = env): Promise<Response> {
  return call(`/api/seckill/goods/${goodsId}/token`, { method: 'POST', headers: bearer(jwt), json: answer, env: workerEnv });
}

describe('with Postgres out of reach', () => {
  it('the goods list of an isolate that has none yet is 503, then the list', async () => {
    // First in the file: this isolate has no copy of the list yet (one it has answers while Postgres is away).
    await downThenBack({ path: '/api/seckill/goods' }, 200);
  });

  it("the operator's routes are 503, then answer", async () => {
    // Shoppers here read their orders and retry faster than the default limits allow.
    await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
    const { goodsId } = await createGoods({ stock: 5 });
    const now = Date.now();
    const goods = { activityId: 2001, title: 'Outage phone', priceCents: 100, stock: 3, startAt: now - 1000, endAt: now + 3600_000 };
    await downThenBack({ path: '/admin/goods', method: 'POST', headers: ADMIN, json: goods }, 201);
    const at = `/admin/goods/${goodsId}`;
    await downThenBack({ path: at, method: 'PUT', headers: ADMIN, json: { perUserLimit: 2 } }, 200);
    await downThenBack({ path: `${at}/allowlist`, method: 'PUT', headers: ADMIN, json: { add: ['outage-listed'] } }, 200);
    await downThenBack({ path: `${at}/prewarm`, method: 'POST', headers: ADMIN }, 200);
    await downThenBack({ path: `${at}/pause`, method: 'POST', headers: ADMIN }, 200);
    await downThenBack({ path: `${at}/resume`, method: 'POST', headers: ADMIN }, 200);
    await downThenBack({ path: `${at}/stats`, headers: ADMIN }, 200);
    await downThenBack({ path: `/admin/reconcile?goodsId=${goodsId}`, method: 'POST', headers: ADMIN }, 200);
    await downThenBack({ path: '/admin/dead-letters', headers: ADMIN }, 200);
    await downThenBack({ path: '/admin/dead-letters/redrive', method: 'POST', headers: ADMIN, json: { goodsId } }, 200);
    // An id Postgres does not have: back, the route reads it and says so.
    await downThenBack({ path: '/admin/dead-letters/987654321/redrive', method: 'POST', headers: ADMIN }, 404);
    await downThenBack({ path: '/admin/webhooks', headers: ADMIN }, 200);
    const hooks = { url: 'http://127.0.0.1:1/hooks', secret: 'a-test-secret-0123456789', events: ['order.paid'] };
    await downThenBack({ path: '/admin/webhooks', method: 'PUT', headers: ADMIN, json: hooks }, 200);
    await downThenBack({ path: '/admin/webhooks', method: 'DELETE', headers: ADMIN }, 200);
    await downThenBack({ path: '/admin/webhooks/deliveries', headers: ADMIN }, 200);
    await downThenBack({ path: '/admin/webhooks/deliveries/evt_987654321-1_paid/redeliver', method: 'POST', headers: ADMIN }, 404);
    // The scrape still answers without Postgres: its counters, and a gauge that says the rest is missing.
    const scrape = await call('/admin/metrics', { headers: ADMIN, env: postgresDown });
    expect(scrape.status).toBe(200);
    const scraped = await scrape.text();
    expect(scraped).toMatch(/^seckill_metrics_gauges_up 0$/m);
    // The refusals above are counted as what they answered, not as internal errors.
    expect(scraped).toMatch(
      /^seckill_http_requests_total\{route="\/admin\/goods\/:goodsId\/stats",method="GET",outcome="unavailable"\} 1$/m,
    );
    expect(scraped).not.toMatch(/outcome="internal"/);
  });

  it("a shopper's orders, payments and the payment webhook are 503, then answer", async () => {
    const { goodsId } = await createGoods({ stock: 4, priceCents: 700 });
    const paid = await buyOrder('outage-payer', goodsId);
    const cancelled = await buyOrder('outage-canceller', goodsId);
    const headers = bearer(paid.jwt);
    await downThenBack({ path: `/api/orders/${paid.orderId}`, headers }, 200);
    await downThenBack({ path: `/api/seckill/goods/${goodsId}/eligibility`, headers }, 200);
    const pay = { path: `/api/orders/${paid.orderId}/pay`, method: 'POST', headers, json: { outcome: 'hold' } };
    const held = await json<{ paymentId: string }>(await downThenBack(pay, 200));
    // The sandbox's checkout page: Postgres away, then the payment fails there (the order stays unpaid).
    await downThenBack(
      { path: `/api/payments/sandbox/${held.paymentId}/complete`, method: 'POST', headers, json: { outcome: 'fail' } },
      200,
    );
    const again = await json<{ paymentId: string }>(await call(pay.path, pay));
    const event = {
      eventId: `evt_outage_${Date.now()}`,
      paymentId: again.paymentId,
      orderId: paid.orderId,
      status: 'SUCCEEDED',
      amountCents: 700,
    };
    const raw = JSON.stringify(event);
    const signature = await hmacHex(env.PAYMENT_WEBHOOK_SECRET, raw);
    const callback = {
      path: '/api/payments/callback',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-signature': signature },
      body: raw,
    };
    expect(await json(await downThenBack(callback, 200))).toMatchObject({ outcome: expect.any(String), orderStatus: 'PAID' });
    await downThenBack({ path: `/api/orders/${cancelled.orderId}/cancel`, method: 'POST', headers: bearer(cancelled.jwt) }, 200);
    expect((await stats(goodsId)).orders).toMatchObject({ PAID: 1, CANCELLED: 1 });
  });

  it("an allowlist sale's token, queue and live channel are 503 where they ask Postgres, then answer", async () => {
    const { goodsId } = await createRulesGoods({ stock: 3, eligibility: 'allowlist' });
    expect((await changeAllowlist(goodsId, { add: ['outage-invited'] })).status).toBe(200);
    const jwt = await devToken('outage-invited');
    // The challenge is spent before Postgres is asked, and the 503 gives it back: the same
    // answer passes once Postgres answers, and only once.
    const answer = await solvedChallenge(jwt, goodsId);
    await expectUnavailable(await redeem(jwt, goodsId, answer, postgresDown));
    expect((await redeem(jwt, goodsId, answer)).status).toBe(200);
    const replay = await redeem(jwt, goodsId, answer);
    expect(replay.status).toBe(403);
    expect((await json<{ error: { code: string } }>(replay)).error.code).toBe('CAPTCHA_FAILED');
    await downThenBack({ path: `/api/seckill/goods/${goodsId}/queue`, method: 'POST', headers: bearer(jwt) }, 200);
    const live = {
      path: `/api/seckill/goods/${goodsId}/live?join=1`,
      headers: { upgrade: 'websocket', 'sec-websocket-protocol': `seckill-live, jwt.${jwt}` },
    };
    const opened = await downThenBack(live, 101);
    opened.webSocket?.accept();
    opened.webSocket?.close();
  });
});

describe('with a Postgres that takes statements and never answers', () => {
  /** The answer to `ask` with Postgres hung, and how long it took. */
  async function timed(path: string, init: RequestInit = {}): Promise<{ res: Response; ms: number }> {
    const started = Date.now();
    const res = await call(path, { ...init, env: postgresHung });
    return { res, ms: Date.now() - started };
  }

  it("a client's deadline is each statement's own: one sent after the first deadline has passed goes through", async () => {
    // The driver spreads the client's fetch options into each statement's fetch (db/client.ts):
    // were the deadline's signal made once, every statement after it would be aborted at once.
    const db = httpDb(dbOptions(getConfig(env)), 300);
    expect(await db.execute(sql`SELECT 1 AS one`)).toMatchObject({ rows: [{ one: 1 }] });
    await sleep(400);
    expect(await db.execute(sql`SELECT 2 AS two`)).toMatchObject({ rows: [{ two: 2 }] });
  });

  it("a shopper's order read is 503 after the shopper's statement deadline, where it waited for good", async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const bought = await buyOrder('hung-reader', goodsId);
    const { res, ms } = await timed(`/api/orders/${bought.orderId}`, { headers: bearer(bought.jwt) });
    await expectUnavailable(res);
    expect(ms).toBeGreaterThanOrEqual(SHOPPER_STATEMENT_MS - 100);
    expect(ms).toBeLessThan(SHOPPER_STATEMENT_MS + 3_000);
    expect((await call(`/api/orders/${bought.orderId}`, { headers: bearer(bought.jwt) })).status).toBe(200);
  }, 30_000);

  it("an isolate's goods list past its age answers a challenge after the renewal's deadline, from the list it has", async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const jwt = await devToken('hung-challenger');
    // The list is read with the goods in it, then grows old enough that the next request renews it.
    expect((await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) })).status).toBe(200);
    await sleep(GOODS_TTL_MS + 100);
    const { res, ms } = await timed(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(ms).toBeLessThan(SHOPPER_STATEMENT_MS + 3_000);
    // The requests behind the renewing one answer from the list at once.
    const next = await timed(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) });
    expect(next.res.status).toBe(200);
    expect(next.ms).toBeLessThan(1_000);
  }, 30_000);
});

describe('with an object reset as the call reaches it', () => {
  it("the goods' stats are 503, then the same figures", async () => {
    const { goodsId } = await createGoods({ stock: 6 });
    const before = await stats(goodsId);
    const taken = askObjectReset(resetName(goodsId, { stock: 0 }));
    await expectUnavailable(await call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN }));
    expect(taken()).toBe(true);
    expect(await stats(goodsId)).toEqual(before);
  });

  it('a goods whose object resets as it is created is created once, its objects made on first use', async () => {
    const { goodsId: last } = await createGoods({ stock: 1 });
    // The next ids this file's database gives (a database of its own: nothing else makes goods in it meanwhile).
    const asked = [1, 2, 3].map((n) => askObjectReset(resetName(last + n, { stock: 0 })));
    const now = Date.now();
    const goods = { activityId: 2002, title: 'Reset at birth', priceCents: 100, stock: 2, startAt: now - 1000, endAt: now + 3600_000 };
    const res = await call('/admin/goods', { method: 'POST', headers: ADMIN, json: goods });
    const taken = asked.map((withdraw) => withdraw());
    // The row is in Postgres: answered as created (a 503 would have the operator make it twice), not pre-warmed.
    expect(res.status, await res.clone().text()).toBe(201);
    const created = await json<{ goodsId: number; prewarmed?: boolean; remaining: number }>(res);
    expect(created).toMatchObject({ prewarmed: false, remaining: 2 });
    expect(taken[created.goodsId - last - 1]).toBe(true);
    const listed = await json<{ goodsId: number; title: string }[]>(await call('/api/seckill/goods'));
    expect(listed.filter((g) => g.title === goods.title).map((g) => g.goodsId)).toEqual([created.goodsId]);
    // Its object loads the sale from Postgres on the first purchase, and sells.
    await buyOrder('reset-at-birth', created.goodsId);
    expect(await stats(created.goodsId)).toMatchObject({ doRemaining: 1, dbStock: 1, consistent: true });
  });

  it('pause and resume are 503, then take effect; the stock is kept', async () => {
    const { goodsId } = await createGoods({ stock: 6 });
    const pause = () => call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN });
    let taken = askObjectReset(resetName(goodsId, { stock: 0 }));
    await expectUnavailable(await pause());
    expect(taken()).toBe(true);
    const paused = await pause();
    expect(paused.status).toBe(200);
    expect(await json(paused)).toEqual({ goodsId, paused: true, remaining: 6 });
    const resume = () => call(`/admin/goods/${goodsId}/resume`, { method: 'POST', headers: ADMIN });
    taken = askObjectReset(resetName(goodsId, { stock: 0 }));
    await expectUnavailable(await resume());
    expect(taken()).toBe(true);
    expect(await json(await resume())).toEqual({ goodsId, paused: false, remaining: 6 });
    expect((await stockObject(goodsId).snapshot())?.paused).toBe(false);
  });

  it('an allowlist change is 503, then made once', async () => {
    const { goodsId } = await createRulesGoods({ stock: 3, eligibility: 'allowlist', shards: 2 });
    expect(await json(await changeAllowlist(goodsId, { add: ['reset-a'] }))).toEqual({ count: 1 });
    const taken = askObjectReset(resetName(goodsId, { stock: 1 }));
    await expectUnavailable(await changeAllowlist(goodsId, { add: ['reset-b', 'reset-c'] }));
    expect(taken()).toBe(true);
    // Safe to repeat: Postgres and the shard that took it already hold part of the change.
    const again = await changeAllowlist(goodsId, { add: ['reset-b', 'reset-c'] });
    expect(again.status).toBe(200);
    expect(await json(again)).toEqual({ count: 3 });
  });

  it('the runtime limits are 503 to read and to change, then kept', async () => {
    const read = () => call('/admin/limits', { headers: ADMIN });
    const before = await json<Record<string, unknown>>(await read());
    let taken = askObjectReset(LIMITS_RESET_NAME);
    await expectUnavailable(await read());
    expect(taken()).toBe(true);
    expect(await json(await read())).toEqual(before);
    const change = () => call('/admin/limits', { method: 'PUT', headers: ADMIN, json: { banSeconds: 601 } });
    taken = askObjectReset(LIMITS_RESET_NAME);
    await expectUnavailable(await change());
    expect(taken()).toBe(true);
    expect((await change()).status).toBe(200);
    expect(await json(await read())).toMatchObject({ ...before, banSeconds: 601, updatedAt: expect.any(String) });
    await setLimits({ banSeconds: 600 });
  });

  it('the ban list and a lift are 503, then answer', async () => {
    const list = () => call('/admin/limits/bans', { headers: ADMIN });
    let taken = askObjectReset(GUARD_LIST_RESET_NAME);
    await expectUnavailable(await list());
    expect(taken()).toBe(true);
    expect((await list()).status).toBe(200);
    const lift = () => call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { userId: 'outage-banned' } });
    taken = askObjectReset(guardResetName('user:outage-banned'));
    await expectUnavailable(await lift());
    expect(taken()).toBe(true);
    expect(await json(await lift())).toEqual({ ids: ['user:outage-banned', 'anon:outage-banned'], lifted: false });
  });
});

describe('with an object that stops answering', () => {
  it("with a stock shard held, the goods' stats are 503 and a reconciliation run reports the goods failed, each within 3 s; then both as before", async () => {
    const { goodsId } = await createGoods({ stock: 6, shards: 2 });
    const before = await stats(goodsId);
    const { reopened } = await holdObject(goodsStock(env, { id: goodsId, locationHint: null, shards: 2 }, 1), 8_000);
    const started = Date.now();
    const [held, report] = await Promise.all([call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN }), reconcileNow(goodsId)]);
    // Their 3 s for the goods' objects, not the 8 s the shard is held.
    expect(Date.now() - started).toBeLessThan(6_000);
    await expectUnavailable(held);
    expect(report.goods).toEqual([
      expect.objectContaining({
        goodsId,
        consistent: false,
        discrepancies: [{ kind: 'reconcile_failed', message: 'its stock shards did not answer within 3000 ms' }],
      }),
    ]);
    await reopened;
    // The figures, not the counts since the objects last started (the runtime may reset a held one).
    const figures = ({ doRemaining, dbStock, orders, shards, consistent }: Awaited<ReturnType<typeof stats>>) => ({
      doRemaining,
      dbStock,
      orders,
      shards,
      consistent,
    });
    expect(figures(await stats(goodsId))).toEqual(figures(before));
    expect((await reconcileNow(goodsId)).goods).toEqual([expect.objectContaining({ goodsId, consistent: true, discrepancies: [] })]);
  });

  it("the stats answer without the waiting room's figures when its coordinator is held", async () => {
    const { goodsId } = await createQueuedGoods({ stock: 4, queue: { mode: 'always', admitPerSecond: 10 } });
    const before = await stats(goodsId);
    expect(before.queue).toMatchObject({ mode: 'always' });
    const { reopened } = await holdObject(roomHub(env, { id: goodsId, locationHint: null }), 8_000);
    const started = Date.now();
    const res = await call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN });
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ ...before, queue: null });
    await reopened;
    expect((await stats(goodsId)).queue).toMatchObject({ mode: 'always' });
  });
});

describe("a room object's call that never answers", () => {
  /** A one-shard room goods with a shopper in line: its shard and coordinator hold its state. */
  async function roomWithShopper(name: string): Promise<number> {
    const { goodsId } = await createQueuedGoods({ stock: 4, queue: { mode: 'always', admitPerSecond: 10, shards: 1 } });
    const { jwt } = await shopper(name);
    expect((await join(jwt, goodsId)).status).toBe(200);
    return goodsId;
  }

  /** The objects' env, but with every `method` call of one namespace's objects left unanswered. */
  function silentEnv(binding: 'WAITING_ROOM' | 'GOODS_STOCK', method: string) {
    const ns = env[binding];
    return {
      ...env,
      [binding]: { idFromName: (name: string) => ns.idFromName(name), get: () => ({ [method]: () => new Promise(() => {}) }) },
    };
  }

  it('a shard gives up a report its coordinator never answers after REPORT_DEADLINE_MS, and its next tick reports', async () => {
    const goodsId = await roomWithShopper('silent-coordinator');
    // A coordinator whose every call hangs: what a reset of the room's objects once left one
    // shard with (its line stood still for three minutes).
    const silent = silentEnv('WAITING_ROOM', 'report');
    type Role = { env: unknown; reporting: boolean; ticking: boolean; reportedAt: number; tick(): Promise<void> };
    const outcome = await runInDurableObject(roomShard(env, { id: goodsId, locationHint: null }, 0), async (instance) => {
      const role = (instance as unknown as { shardRole: Role }).shardRole;
      while (role.reporting || role.ticking) {
        await sleep(10);
      }
      const real = role.env;
      role.env = silent;
      const started = Date.now();
      await role.tick();
      const tookMs = Date.now() - started;
      const stillReporting = role.reporting;
      role.env = real;
      const before = role.reportedAt;
      await role.tick();
      return { tookMs, stillReporting, reportedAgain: role.reportedAt > before };
    });
    expect(outcome.stillReporting).toBe(false);
    expect(outcome.tookMs).toBeGreaterThanOrEqual(REPORT_DEADLINE_MS - 50);
    expect(outcome.tookMs).toBeLessThan(REPORT_DEADLINE_MS + 5_000);
    expect(outcome.reportedAgain).toBe(true);
  });

  it("an isolate gives up a note of an `auto` room's arrivals its shard never answers, and notes again", async () => {
    const { goodsId } = await createQueuedGoods({ stock: 4, queue: { mode: 'auto', admitPerSecond: 10, shards: 1 } });
    const row = await getGoods(getConfig(env), goodsId);
    const silent = silentEnv('WAITING_ROOM', 'noteArrivals') as unknown as Env;
    const started = Date.now();
    // No answer about the line yet: this request notes the arrivals and waits for the answer.
    expect(await lineIsOn(silent, row, Date.now(), undefined)).toBe(false);
    const tookMs = Date.now() - started;
    expect(tookMs).toBeGreaterThanOrEqual(UPKEEP_CALL_MS - 50);
    expect(tookMs).toBeLessThan(UPKEEP_CALL_MS + 3_000);
    // Not left sending: the next request asks the shard again, which answers this time.
    const answers: boolean[] = [];
    const noteArrivals = async () => {
      answers.push(true);
      return { active: true };
    };
    const answering = { ...env, WAITING_ROOM: { idFromName: (n: string) => n, get: () => ({ noteArrivals }) } };
    expect(await lineIsOn(answering as unknown as Env, row, Date.now(), undefined)).toBe(true);
    expect(answers).toHaveLength(1);
  }, 30_000);

  it('the coordinator gives up a stock read that never answers after 1.5 s: its decision admits by the rate alone', async () => {
    const goodsId = await roomWithShopper('silent-stock');
    const silent = silentEnv('GOODS_STOCK', 'snapshot');
    type Hub = { env: unknown; goods: unknown; readStock(goods: unknown): Promise<unknown> };
    const outcome = await runInDurableObject(roomHub(env, { id: goodsId, locationHint: null }), async (instance) => {
      const hub = (instance as unknown as { hubRole: Hub }).hubRole;
      const real = hub.env;
      hub.env = silent;
      const started = Date.now();
      const stock = await hub.readStock(hub.goods);
      hub.env = real;
      return { stock, tookMs: Date.now() - started, after: await hub.readStock(hub.goods) };
    });
    expect(outcome.stock).toBeUndefined();
    expect(outcome.tookMs).toBeGreaterThanOrEqual(1_450);
    expect(outcome.tookMs).toBeLessThan(6_000);
    expect(outcome.after).toMatchObject({ remaining: 4 });
  });
});

describe('a bug is not an outage', () => {
  it("an error the object's own code throws passes objectCall as it is (a 500), and a reset is UNAVAILABLE", async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const stub = stockObject(goodsId) as unknown as { changeAllowlist(add: unknown, remove: unknown): Promise<unknown> };
    const bug = await objectCall('test.call_failed', {}, 'retry', () => stub.changeAllowlist(null, null)).catch((e: unknown) => e);
    expect(bug).toBeInstanceOf(TypeError);
    expect(bug).toMatchObject({ remote: true });
    const taken = askObjectReset(resetName(goodsId, { stock: 0 }));
    const reset = await objectCall('test.call_failed', {}, 'retry', () => stockObject(goodsId).snapshot()).catch((e: unknown) => e);
    expect(taken()).toBe(true);
    expect(reset).toBeInstanceOf(AppError);
    expect(reset).toMatchObject({ code: 'UNAVAILABLE', headers: { 'retry-after': '1' } });
  });
});
