import { createExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { expect } from 'vitest';
import type { Db } from '../../db/client';
import { withDb } from '../../db/client';
import worker from '../../workers/index';

export const ADMIN = { authorization: `Bearer ${env.ADMIN_TOKEN}` };
const BASE = 'https://seckill.test';

/** Calls the Worker under test (its default export's fetch, inside workerd). */
export async function call(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set('content-type', 'application/json');
    body = JSON.stringify(init.json);
  }
  // The Worker's own fetch handler, called in-process: the test harness' self binding slows
  // down with every request it carries, which a sale of a thousand shoppers makes visible.
  return worker.fetch(new Request(`${BASE}${path}`, { ...init, headers, body }), env, createExecutionContext());
}

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
  const ch = await json<{ challengeId: string; prompt: string }>(
    await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) }),
  );
  const [a, b] = ch.prompt.match(/\d+/g)?.map(Number) ?? [];
  const res = await call(`/api/seckill/goods/${goodsId}/token`, {
    method: 'POST',
    headers: bearer(jwt),
    json: { challengeId: ch.challengeId, answer: String((a ?? 0) + (b ?? 0)) },
  });
  expect(res.status).toBe(200);
  return json(res);
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
    orders: Record<string, number>;
    queued: number;
    outboxPending: number;
    consistent: boolean;
  }>(res);
}

/** Polls `check` until it returns a value (the queue consumer works on its own clock). */
export async function eventually<T>(check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`condition not met within ${timeoutMs} ms`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits until every reservation of a goods became an order (or failed) and the stats settle. */
export function settled(goodsId: number, timeoutMs = 30_000) {
  return eventually(async () => {
    const s = await stats(goodsId);
    return s.queued === 0 && s.outboxPending === 0 && s.consistent ? s : undefined;
  }, timeoutMs);
}
