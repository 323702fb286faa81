// What the sale-rules tests share: goods made with rules, purchases of several units, the
// allowlist route, and every shopper's units in Postgres.
import { sql as raw } from 'drizzle-orm';
import { expect } from 'vitest';
import { ADMIN, bearer, call, createGoods, devToken, json, sql, tokenFor } from './helpers';

export type RulesOptions = {
  stock?: number;
  priceCents?: number;
  activityId?: number;
  perUserLimit?: number;
  limitScope?: 'goods' | 'activity';
  eligibility?: 'open' | 'allowlist';
  payTimeoutSeconds?: number;
  /** The waiting room's settings, as POST /admin/goods takes them. */
  queue?: { mode: 'off' | 'auto' | 'always'; admitPerSecond?: number };
  /** Stock shards (absent: one). */
  shards?: number;
  /** When the sale starts (absent: a second ago). */
  startAt?: number;
};

let activitySeq = 0;

/** An activity id no other test of this run uses (the activity rule spans every goods of one). */
export function freshActivity(): number {
  activitySeq++;
  return 700_000 + (Date.now() % 100_000) * 10 + activitySeq;
}

/** Creates a goods on sale now with the given rules, and checks the answer echoes them. */
export async function createRulesGoods(options: RulesOptions = {}): Promise<{ goodsId: number; totalStock: number }> {
  const now = Date.now();
  const rules = {
    ...(options.perUserLimit !== undefined ? { perUserLimit: options.perUserLimit } : {}),
    ...(options.limitScope !== undefined ? { limitScope: options.limitScope } : {}),
    ...(options.eligibility !== undefined ? { eligibility: options.eligibility } : {}),
    ...(options.queue !== undefined ? { queue: options.queue } : {}),
    ...(options.shards !== undefined ? { shards: options.shards } : {}),
  };
  if (Object.keys(rules).length === 0 && options.activityId === undefined) {
    return createGoods(options);
  }
  const res = await call('/admin/goods', {
    method: 'POST',
    headers: ADMIN,
    json: {
      activityId: options.activityId ?? 2001,
      title: 'Rules phone',
      priceCents: options.priceCents ?? 100,
      stock: options.stock ?? 10,
      startAt: options.startAt ?? now - 1000,
      endAt: now + 3600_000,
      ...(options.payTimeoutSeconds ? { payTimeoutSeconds: options.payTimeoutSeconds } : {}),
      ...rules,
    },
  });
  expect(res.status).toBe(201);
  const body = await json<{ goodsId: number; totalStock: number; perUserLimit: number; limitScope: string; eligibility: string }>(res);
  expect(body).toMatchObject({
    perUserLimit: options.perUserLimit ?? 1,
    limitScope: options.limitScope ?? 'goods',
    eligibility: options.eligibility ?? 'open',
  });
  return body;
}

/** Sends a purchase of `quantity` units with a token already in hand. */
export function purchaseUnits(jwt: string, goodsId: number, t: { token: string; path: string }, quantity: number): Promise<Response> {
  return call(`/api/seckill/do/${t.path}`, { method: 'POST', headers: bearer(jwt), json: { goodsId, token: t.token, quantity } });
}

/** A purchase's answer: the status, and the code and body of a refusal. */
export async function answerOf(res: Response): Promise<{ status: number; code?: string; remaining?: number; requestId?: string }> {
  const body = await json<{ requestId?: string; error?: { code: string; remaining?: number } }>(res);
  return {
    status: res.status,
    ...(body.error ? { code: body.error.code } : {}),
    ...(body.error?.remaining !== undefined ? { remaining: body.error.remaining } : {}),
    ...(body.requestId ? { requestId: body.requestId } : {}),
  };
}

/** A shopper with `n` purchase tokens for a goods (each purchase spends one). */
export async function shopperWithTokens(userId: string, goodsId: number, n: number) {
  const jwt = await devToken(userId);
  const tokens: { token: string; path: string }[] = [];
  for (let i = 0; i < n; i++) {
    tokens.push(await tokenFor(jwt, goodsId));
  }
  return { userId, jwt, tokens };
}

/** PUT /admin/goods/:goodsId/allowlist. */
export function changeAllowlist(goodsId: number, change: { add?: unknown; remove?: unknown }): Promise<Response> {
  return call(`/admin/goods/${goodsId}/allowlist`, { method: 'PUT', headers: ADMIN, json: change });
}

/** Units of live (pending or paid) orders per shopper of a goods, as Postgres holds them. */
export async function liveUnitsByUser(goodsId: number): Promise<Map<string, number>> {
  const { rows } = await sql((db) =>
    db.execute(raw`SELECT user_id, sum(quantity)::int AS units FROM seckill_order
      WHERE goods_id = ${goodsId} AND status IN (0, 1) GROUP BY user_id`),
  );
  return new Map(rows.map((r) => [String(r.user_id), Number(r.units)]));
}

/** The final answer of a purchase (SUCCESS or FAIL), polled from the result route. */
export async function finalResult(jwt: string, requestId: string): Promise<{ status: string; orderId?: string; reason?: string }> {
  for (let i = 0; i < 600; i++) {
    const r = await json<{ status: string; orderId?: string; reason?: string }>(
      await call(`/api/seckill/result/${requestId}`, { headers: bearer(jwt) }),
    );
    if (r.status !== 'QUEUED') {
      return r;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${requestId} stayed QUEUED`);
}
