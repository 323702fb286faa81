import { createExecutionContext, createMessageBatch, getQueueResult, runInDurableObject, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { Redis } from '@upstash/redis/cloudflare';
import { sql as drizzleSql, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, expect, vi } from 'vitest';
import type { Db } from '../../db/client';
import { withDb } from '../../db/client';
import { seckillGoods } from '../../db/schema';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import type { LeaseRow } from '../../durable-objects/goods-stock/lease-store';
import { goodsStock } from '../../durable-objects/routing';
import worker from '../../workers/index';
import { hmacHex } from '../../workers/kernel/crypto';
import { DEFAULT_LIMITS } from '../../workers/kernel/limits';
import { consumeTimeouts } from '../../workers/queue/timeouts';

export const ADMIN = { authorization: `Bearer ${env.ADMIN_TOKEN}` };
const BASE = 'https://seckill.test';

/** The test env with the same database under a URL of `name`'s own: the edge's copies of it are under keys no other file reads. */
export function ownEnv(name: string): Env {
  return { ...env, DATABASE_URL: `${env.DATABASE_URL}${env.DATABASE_URL.includes('?') ? '&' : '?'}application_name=${name}` } as Env;
}

/** Holds an object's input gate shut for `ms` (its calls wait, as on an object that stopped answering), and the promise of its opening again. */
export async function holdObject(stub: DurableObjectStub, ms: number): Promise<{ reopened: Promise<unknown> }> {
  const reopened = runInDurableObject(stub, (_instance, state) =>
    state.blockConcurrencyWhile(() => new Promise((resolve) => setTimeout(resolve, ms))),
  );
  // The gate shuts as the call reaches the object.
  await new Promise((resolve) => setTimeout(resolve, 300));
  // On a busy machine the runtime may reset the held object instead ("blockConcurrencyWhile()
  // ... waited for too long"): either way it answers again afterwards, which is what follows.
  return { reopened: reopened.catch(() => undefined) };
}

/** Calls the Worker with `workerEnv`, and waits for what the request left running (a copy's load). */
export async function callAndWait(
  workerEnv: Env,
  path: string,
  init: { method?: string; headers?: Record<string, string>; json?: unknown } = {},
) {
  const ctx = createExecutionContext();
  const headers = new Headers(init.headers);
  if (init.json !== undefined) {
    headers.set('content-type', 'application/json');
  }
  const body = init.json === undefined ? undefined : JSON.stringify(init.json);
  const res = await worker.fetch(new Request(`${BASE}${path}`, { method: init.method ?? 'GET', headers, body }), workerEnv, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

/** Calls the Worker under test (its default export's fetch, inside workerd), with the test env or `init.env`. */
export async function call(path: string, init: RequestInit & { json?: unknown; env?: Env } = {}): Promise<Response> {
  const { json: payload, env: workerEnv = env, ...rest } = init;
  const headers = new Headers(rest.headers);
  let body = rest.body;
  if (payload !== undefined) {
    headers.set('content-type', 'application/json');
    body = JSON.stringify(payload);
  }
  // The Worker's own fetch handler, called in-process: the test harness' self binding slows
  // down with every request it carries, which a sale of a thousand shoppers makes visible.
  const res = await worker.fetch(new Request(`${BASE}${path}`, { ...rest, headers, body }), workerEnv, createExecutionContext());
  if (path === '/admin/goods' && rest.method === 'POST' && res.status === 201) {
    const { goodsId } = (await res.clone().json()) as { goodsId?: unknown };
    if (typeof goodsId === 'number') {
      madeHere.push(goodsId);
    }
  }
  return res;
}

/** The goods this file made through the admin API: they end with the file (below). */
const madeHere: number[] = [];

// The goods of a file that is done end, as a sale does, in the database the files share, two
// days back: out of the goods list (a day) and the operators' scope (an hour). Its other files
// read the goods on sale (the list every few seconds; a metrics scrape wakes a stock object for
// each, and a local runtime makes each new object slower than the last), and the run's hundreds
// made a file's first scrape take 10-14 s.
afterAll(async () => {
  if (madeHere.length > 0) {
    const past = Date.now() - 2 * 24 * 3600_000;
    await sql((db) =>
      db
        .update(seckillGoods)
        .set({ startAt: new Date(past - 60_000), endAt: new Date(past) })
        .where(inArray(seckillGoods.id, madeHere.splice(0))),
    );
  }
});

export async function json<T = Record<string, unknown>>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

/** Runs `work` against the test database, as the Worker reaches it. */
export function sql<T>(work: (db: Db) => Promise<T>): Promise<T> {
  return withDb({ databaseUrl: env.DATABASE_URL, wsProxy: env.PG_WS_PROXY || undefined, max: 1 }, work);
}

export type GoodsOptions = {
  stock?: number;
  startAt?: number;
  endAt?: number;
  payTimeoutSeconds?: number;
  priceCents?: number;
  /** Stock shards (absent: the default, one). */
  shards?: number;
};

/** Creates a goods on sale now (or as given) through the admin API. */
export async function createGoods(options: GoodsOptions = {}): Promise<{ goodsId: number; totalStock: number }> {
  const now = Date.now();
  const res = await call('/admin/goods', {
    method: 'POST',
    headers: ADMIN,
    json: {
      activityId: 2001,
      title: 'Test phone',
      priceCents: options.priceCents ?? 100,
      stock: options.stock ?? 10,
      startAt: options.startAt ?? now - 1000,
      endAt: options.endAt ?? now + 3600_000,
      ...(options.payTimeoutSeconds ? { payTimeoutSeconds: options.payTimeoutSeconds } : {}),
      ...(options.shards ? { shards: options.shards } : {}),
    },
  });
  expect(res.status).toBe(201);
  return json(res);
}

export async function devToken(userId: string): Promise<string> {
  const res = await call('/api/dev/token', { method: 'POST', json: { userId } });
  expect(res.status).toBe(200);
  return (await json<{ token: string }>(res)).token;
}

export function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

/** Solves the built-in challenge ("a + b = ?") and exchanges it for a purchase token and path. */
export async function purchaseToken(jwt: string, goodsId: number): Promise<{ token: string; path: string }> {
  const res = await tokenResponse(jwt, goodsId);
  expect(res.status).toBe(200);
  return json(res);
}

/** The token route's answer to a shopper who solved the goods' built-in challenge, sending `headers` (e.g. cf-connecting-ip) on both steps. */
export async function tokenResponse(jwt: string, goodsId: number, headers: Record<string, string> = {}): Promise<Response> {
  const chRes = await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: { ...headers, ...bearer(jwt) } });
  expect(chRes.status).toBe(200);
  const ch = await json<{ challengeId: string; prompt: string }>(chRes);
  const [a, b] = ch.prompt.match(/\d+/g)?.map(Number) ?? [];
  return call(`/api/seckill/goods/${goodsId}/token`, {
    method: 'POST',
    headers: { ...headers, ...bearer(jwt) },
    json: { challengeId: ch.challengeId, answer: String((a ?? 0) + (b ?? 0)) },
  });
}

/** A shopper's whole way to a purchase attempt: token, then the hidden path. */
export async function buy(
  userId: string,
  goodsId: number,
  options: { idempotencyKey?: string; jwt?: string } = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const jwt = options.jwt ?? (await devToken(userId));
  const { token, path } = await purchaseToken(jwt, goodsId);
  const headers: Record<string, string> = { ...bearer(jwt) };
  if (options.idempotencyKey) {
    headers['idempotency-key'] = options.idempotencyKey;
  }
  const res = await call(`/api/seckill/do/${path}`, { method: 'POST', headers, json: { goodsId, token } });
  return { status: res.status, body: await json(res) };
}

export async function stats(goodsId: number) {
  const res = await call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN });
  expect(res.status).toBe(200);
  return json<{
    totalStock: number;
    doRemaining: number;
    dbStock: number;
    mirrorStock: number | null;
    mirror: 'off' | 'ok' | 'missing' | 'unreachable';
    orders: Record<string, number>;
    queued: number;
    outboxPending: number;
    deadLetters: number;
    consistent: boolean;
    webhooks: { pending: number; delivered: number; failed: number };
    shards: { shard: number; remaining: number; queued: number; confirmed: number }[];
    queue: Record<string, unknown> | null;
  }>(res);
}

/**
 * How often a test polls a shopper's order: the order routes have the shopper limits (3 per
 * second per shopper by default), so a poll goes at a page's pace, not the test's.
 */
export const ORDER_POLL_MS = 400;

/** Polls `check` every `intervalMs` until it returns a value (the queue consumer works on its own clock). */
export async function eventually<T>(check: () => Promise<T | undefined | false>, timeoutMs = 30_000, intervalMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`condition not met within ${timeoutMs} ms`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Waits until every reservation of a goods became an order (or failed) and the stats settle. */
export async function settled(goodsId: number, timeoutMs = 30_000) {
  let last: Awaited<ReturnType<typeof stats>> | undefined;
  try {
    return await eventually(async () => {
      last = await stats(goodsId);
      return last.queued === 0 && last.outboxPending === 0 && last.consistent ? last : undefined;
    }, timeoutMs);
  } catch (error) {
    // Which of the stats never settled says where to look.
    throw new Error(
      `goods ${goodsId} did not settle: ${error instanceof Error ? error.message : String(error)}; last stats ${JSON.stringify(last)}`,
    );
  }
}

/** Buys one unit for `userId` and waits until its order exists in Postgres. */
export async function buyOrder(userId: string, goodsId: number): Promise<{ orderId: string; requestId: string; jwt: string }> {
  const jwt = await devToken(userId);
  const { status, body } = await buy(userId, goodsId, { jwt });
  expect(status).toBe(202);
  const requestId = String(body.requestId);
  const orderId = await eventually(async () => {
    const r = await json<{ status: string; orderId?: string }>(await call(`/api/seckill/result/${requestId}`, { headers: bearer(jwt) }));
    return r.status === 'SUCCESS' ? r.orderId : undefined;
  });
  return { orderId, requestId, jwt };
}

/**
 * A purchase attempt that may be refused at any step (challenge, token, or the purchase
 * itself): the first refusal's status and code, or 202 and the request id.
 */
export async function tryBuy(userId: string, goodsId: number): Promise<{ status: number; code?: string; requestId?: string }> {
  const jwt = await devToken(userId);
  const refused = async (res: Response) => ({ status: res.status, code: (await json<{ error?: { code?: string } }>(res)).error?.code });
  const ch = await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) });
  if (ch.status !== 200) {
    return refused(ch);
  }
  const { challengeId, prompt } = await json<{ challengeId: string; prompt: string }>(ch);
  const [a, b] = prompt.match(/\d+/g)?.map(Number) ?? [];
  const tok = await call(`/api/seckill/goods/${goodsId}/token`, {
    method: 'POST',
    headers: bearer(jwt),
    json: { challengeId, answer: String((a ?? 0) + (b ?? 0)) },
  });
  if (tok.status !== 200) {
    return refused(tok);
  }
  const { token, path } = await json<{ token: string; path: string }>(tok);
  const res = await call(`/api/seckill/do/${path}`, { method: 'POST', headers: bearer(jwt), json: { goodsId, token } });
  if (res.status !== 202) {
    return refused(res);
  }
  return { status: 202, requestId: String((await json(res)).requestId) };
}

/** A shopper's view of an order (GET /api/orders/:orderId). */
export async function orderOf(jwt: string, orderId: string) {
  const res = await call(`/api/orders/${orderId}`, { headers: bearer(jwt) });
  expect(res.status).toBe(200);
  return json<{ orderId: string; status: string; priceCents: number; payDeadline: string; paidAt?: string; closedAt?: string }>(res);
}

/** Posts a payment provider webhook, signed with the configured secret unless `signature` is given. */
export async function paymentCallback(event: unknown, options: { signature?: string; raw?: string } = {}): Promise<Response> {
  const raw = options.raw ?? JSON.stringify(event);
  const signature = options.signature ?? (await hmacHex(env.PAYMENT_WEBHOOK_SECRET, raw));
  return call('/api/payments/callback', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-signature': signature },
    body: raw,
  });
}

/**
 * Delivers the payment-timeout messages of `orders` to the timeout consumer as if the clock
 * read `now` (the real queue would deliver them at each order's deadline).
 */
export async function driveTimeouts(orders: { orderId: string; goodsId: number }[], now: number) {
  const batch = createMessageBatch(
    'seckill-order-timeouts',
    orders.map((o, i) => ({
      id: `timeout-${o.orderId}-${now}-${i}`,
      timestamp: new Date(),
      attempts: 1,
      body: { v: 1, kind: 'pay-timeout', orderId: o.orderId, goodsId: o.goodsId },
    })),
  );
  const ctx = createExecutionContext();
  await consumeTimeouts(batch, env, now);
  return getQueueResult(batch, ctx);
}

/** Changes the runtime edge limits (PUT /admin/limits) and returns the whole record. */
export async function setLimits(patch: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await call('/admin/limits', { method: 'PUT', headers: ADMIN, json: patch });
  expect(res.status).toBe(200);
  return json(res);
}

/** PUT /admin/dev/faults (workers/kernel/dev-faults.ts): switches the chaos run's faults on for the seconds given, 0 off. */
export function setFaults(body: Record<string, number>): Promise<Response> {
  return call('/admin/dev/faults', { method: 'PUT', headers: ADMIN, json: body });
}

/**
 * After each test of a file that changes the runtime limits or fakes the clock: real timers, and
 * the default limits back (they live in one object for the whole file).
 */
export async function restoreLimits(): Promise<void> {
  vi.useRealTimers();
  const { admissionByGoods: _, ...defaults } = DEFAULT_LIMITS;
  await setLimits(defaults);
}

/** Limits loose enough for a file's many requests of a few shoppers, for the whole file; the defaults after it. */
export function looseLimitsForFile(): void {
  beforeAll(async () => {
    await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
  });
  afterAll(async () => {
    await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
  });
}

/** A goods' stock object, addressed as the Worker does (a test goods has no location hint). */
export function stockObject(goodsId: number) {
  return goodsStock(env, { id: goodsId, locationHint: null });
}

/** The goods' stock object's own view; `reserveRequests` counts the reservations that reached it. */
export async function stockSnapshot(goodsId: number) {
  const snapshot = await stockObject(goodsId).snapshot();
  if (!snapshot) {
    throw new Error(`goods ${goodsId} has no stock object`);
  }
  return snapshot;
}

/** A purchase token and path for a shopper, sending `headers` (e.g. cf-connecting-ip) on both steps. */
export async function tokenFor(
  jwt: string,
  goodsId: number,
  headers: Record<string, string> = {},
): Promise<{ token: string; path: string }> {
  const res = await tokenResponse(jwt, goodsId, headers);
  expect(res.status).toBe(200);
  return json(res);
}

/** Sends one purchase with a token and its path. */
export function purchase(
  jwt: string,
  goodsId: number,
  t: { token: string; path: string },
  headers: Record<string, string> = {},
): Promise<Response> {
  return call(`/api/seckill/do/${t.path}`, { method: 'POST', headers: { ...headers, ...bearer(jwt) }, json: { goodsId, token: t.token } });
}

/** One sample of a Prometheus text exposition. */
export type PromSample = { name: string; labels: Record<string, string>; value: number };

/**
 * A strict parser of the Prometheus text format (0.0.4): every line must be a HELP, a TYPE or
 * a well-formed sample, every sample's family must have been TYPEd before it, and a family is
 * TYPEd once. Throws naming the first bad line.
 */
export function parsePrometheus(text: string): { types: Map<string, string>; samples: PromSample[] } {
  const types = new Map<string, string>();
  const samples: PromSample[] = [];
  const nameRe = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sampleRe = new RegExp(`^(${nameRe})(?:\\{(.*)\\})? (-?[0-9.e+-]+|NaN|[+-]Inf)$`);
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"(?:,|$)/y;
  const familyOf = (name: string) => {
    for (const suffix of ['_bucket', '_sum', '_count']) {
      const base = name.slice(0, -suffix.length);
      if (name.endsWith(suffix) && types.get(base) === 'histogram') {
        return base;
      }
    }
    return name;
  };
  if (!text.endsWith('\n')) {
    throw new Error('the exposition must end with a newline');
  }
  for (const [i, line] of text.slice(0, -1).split('\n').entries()) {
    const bad = (why: string) => new Error(`line ${i + 1} ${why}: ${line}`);
    if (line.startsWith('# HELP ')) {
      if (!new RegExp(`^# HELP ${nameRe} .*$`).test(line)) {
        throw bad('is not a HELP line');
      }
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const m = line.match(new RegExp(`^# TYPE (${nameRe}) (counter|gauge|histogram|summary|untyped)$`));
      if (!m?.[1] || !m[2] || types.has(m[1])) {
        throw bad('is not a TYPE line, or repeats one');
      }
      types.set(m[1], m[2]);
      continue;
    }
    const m = line.match(sampleRe);
    if (!m?.[1] || m[3] === undefined) {
      throw bad('is not a sample');
    }
    const labels: Record<string, string> = {};
    if (m[2]) {
      labelRe.lastIndex = 0;
      while (labelRe.lastIndex < m[2].length) {
        const l = labelRe.exec(m[2]);
        if (!l?.[1] || l[2] === undefined) {
          throw bad('has malformed labels');
        }
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
      }
    }
    if (!types.has(familyOf(m[1]))) {
      throw bad('has no TYPE before it');
    }
    const value = m[3] === '+Inf' ? Number.POSITIVE_INFINITY : m[3] === '-Inf' ? Number.NEGATIVE_INFINITY : Number(m[3]);
    samples.push({ name: m[1], labels, value });
  }
  return { types, samples };
}

/**
 * GET /admin/metrics, checked to be Prometheus text, parsed. A scrape that meets a metrics shard
 * later than its 3 s is 503 with Retry-After (a loaded machine's, once in a rehearsal), which a
 * Prometheus server meets by scraping again: so does this, twice at most.
 */
export async function scrape() {
  let res = await call('/admin/metrics', { headers: ADMIN });
  for (let retry = 0; retry < 2 && res.status === 503; retry++) {
    await new Promise((resolve) => setTimeout(resolve, Number(res.headers.get('retry-after') ?? '1') * 1000));
    res = await call('/admin/metrics', { headers: ADMIN });
  }
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheus(await res.text());
}

/** The value of the sample `name` whose labels include `labels` (0 when there is none). */
export function metric(scraped: { samples: PromSample[] }, name: string, labels: Record<string, string> = {}): number {
  const match = scraped.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return match.reduce((sum, s) => sum + s.value, 0);
}

/** POST /admin/reconcile (optionally for one goods) and its report. */
export async function reconcileNow(goodsId?: number) {
  const res = await call(`/admin/reconcile${goodsId === undefined ? '' : `?goodsId=${goodsId}`}`, { method: 'POST', headers: ADMIN });
  expect(res.status).toBe(200);
  return json<{
    runAt: string;
    trigger: string;
    discrepancies: number;
    actions: number;
    goods: {
      goodsId: number;
      doRemaining: number | null;
      dbStock: number;
      mirrorStock: number | null;
      liveOrders: number;
      consistent: boolean;
      discrepancies: ({ kind: string } & Record<string, unknown>)[];
      actions: ({ action: string } & Record<string, unknown>)[];
      skipped: string[];
    }[];
  }>(res);
}

/** A client of the Redis the Worker mirrors to (the tests' REST bridge), or undefined when the mirror is off. */
export function mirrorRedis(): Redis | undefined {
  const url = env.UPSTASH_REDIS_REST_URL;
  const token = env.UPSTASH_REDIS_REST_TOKEN;
  return url && token ? new Redis({ url, token, automaticDeserialization: false, enableTelemetry: false }) : undefined;
}

/**
 * Moves this database's goods ids to a random high range. Every test run starts from a fresh
 * database whose ids start at 1, but runs on one machine may share one redis-server; mirror
 * keys (seckill:stock:{id}, ...) of two runs must not collide. Never moves the sequence back.
 */
export async function spreadGoodsIds(): Promise<void> {
  const base = 1_000_000 + Math.floor(Math.random() * 1_000_000_000);
  await sql((db) =>
    db.execute(drizzleSql`SELECT setval('seckill_goods_id_seq', greatest((SELECT last_value FROM seckill_goods_id_seq), ${base}))`),
  );
}

/** Runs `work(0..n-1)` with at most `width` at once; the results in order. */
export async function pool<T>(n: number, width: number, work: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await work(i);
      }
    }),
  );
  return out;
}

/**
 * Shard `to` of a sharded goods asks shard 0 for `need` units (a dry ask) and shard 0 grants
 * `units` (all it could gather), but the answer is slow to arrive: until `land()` (the shard's
 * alarm asking again with the same id and getting the same answer) no shard counts those units.
 */
export async function grantInFlight(goodsId: number, to: number, units: number, need = units): Promise<{ land(): Promise<void> }> {
  const goods = { id: goodsId, locationHint: null };
  const shard = goodsStock(env, goods, to);
  type Leases = { row: LeaseRow; save(): void; retryPending(): Promise<void> };
  const leasesOf = (instance: GoodsStock) => (instance as unknown as { leases: Leases }).leases;
  const grantId = crypto.randomUUID();
  await runInDurableObject(shard, (instance: GoodsStock) => {
    leasesOf(instance).row.pending_grant = grantId;
    leasesOf(instance).save();
  });
  expect(await goodsStock(env, goods, 0).grant(goodsId, to, grantId, need, need, true, 0)).toEqual({ units });
  return { land: () => runInDurableObject(shard, (instance: GoodsStock) => leasesOf(instance).retryPending()) };
}

/**
 * Records every statement run on `sql` until `stop` is called: their text and cursors, whose
 * rowsRead and rowsWritten (an index entry counts as a row) are what an object's storage is
 * billed by.
 */
export function watchStatements(sql: SqlStorage): {
  statements: { query: string; cursor: SqlStorageCursor<Record<string, SqlStorageValue>> }[];
  stop: () => void;
} {
  const exec = sql.exec;
  const statements: { query: string; cursor: SqlStorageCursor<Record<string, SqlStorageValue>> }[] = [];
  sql.exec = ((query: string, ...bindings: unknown[]) => {
    const cursor = exec.call(sql, query, ...bindings);
    statements.push({ query, cursor });
    return cursor;
  }) as typeof sql.exec;
  return { statements, stop: () => (sql.exec = exec) };
}
