// The HTTP contract from Node, for setting up and checking what the browser tests do.
import { expect } from 'vitest';
import type { Stack } from './browser-stack';

export type GoodsView = { goodsId: number; totalStock: number; remaining: number; status: string; serverTime: string };
export type Stats = {
  totalStock: number;
  doRemaining: number | null;
  dbStock: number;
  orders: Record<string, number>;
  consistent: boolean;
};

async function call<T>(
  stack: Stack,
  path: string,
  init: RequestInit & { json?: unknown; auth?: string } = {},
): Promise<{ status: number; body: T }> {
  const headers = new Headers(init.headers);
  if (init.json !== undefined) {
    headers.set('content-type', 'application/json');
  }
  if (init.auth) {
    headers.set('authorization', `Bearer ${init.auth}`);
  }
  const res = await fetch(`${stack.baseUrl}${path}`, {
    ...init,
    headers,
    body: init.json === undefined ? init.body : JSON.stringify(init.json),
  });
  return { status: res.status, body: (await res.json()) as T };
}

/** Creates a sale through the admin API (on sale now unless told otherwise). */
export async function createGoods(
  stack: Stack,
  options: {
    title?: string;
    stock?: number;
    startAt?: number;
    endAt?: number;
    priceCents?: number;
    imageUrl?: string;
    queue?: { mode: 'off' | 'auto' | 'always'; admitPerSecond?: number; preQueueSeconds?: number };
    perUserLimit?: number;
    eligibility?: 'open' | 'allowlist';
    shards?: number;
  } = {},
): Promise<GoodsView> {
  const now = Date.now();
  const res = await call<GoodsView>(stack, '/admin/goods', {
    method: 'POST',
    auth: stack.adminToken,
    json: {
      activityId: 7,
      title: options.title ?? 'Aurora X phone, 256 GB',
      priceCents: options.priceCents ?? 199_900,
      stock: options.stock ?? 1,
      startAt: options.startAt ?? now - 1000,
      endAt: options.endAt ?? now + 3600_000,
      ...(options.imageUrl ? { imageUrl: options.imageUrl } : {}),
      ...(options.queue ? { queue: options.queue } : {}),
      ...(options.perUserLimit ? { perUserLimit: options.perUserLimit } : {}),
      ...(options.eligibility ? { eligibility: options.eligibility } : {}),
      ...(options.shards ? { shards: options.shards } : {}),
    },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

export async function devToken(stack: Stack, userId: string): Promise<string> {
  const res = await call<{ token: string }>(stack, '/api/dev/token', { method: 'POST', json: { userId } });
  expect(res.status).toBe(200);
  return res.body.token;
}

/** Answers a goods' challenge as the shopper `jwt` and asks for a purchase token: the token route's answer. */
async function takeToken(stack: Stack, jwt: string, goodsId: number) {
  const challenge = await call<{ challengeId: string; prompt: string }>(stack, `/api/seckill/goods/${goodsId}/challenge`, {
    method: 'POST',
    auth: jwt,
  });
  expect(challenge.status).toBe(200);
  const [a = 0, b = 0] = challenge.body.prompt.match(/\d+/g)?.map(Number) ?? [];
  return call<{ token: string; path: string; error?: { code: string } }>(stack, `/api/seckill/goods/${goodsId}/token`, {
    method: 'POST',
    auth: jwt,
    json: { challengeId: challenge.body.challengeId, answer: String(a + b) },
  });
}

/** Buys one unit as `userId` through the API and waits for the order: another shopper, off-screen. */
export async function buyViaApi(stack: Stack, userId: string, goodsId: number): Promise<{ orderId: string }> {
  const jwt = await devToken(stack, userId);
  const ticket = await takeToken(stack, jwt, goodsId);
  expect(ticket.status).toBe(200);
  const queued = await call<{ requestId: string }>(stack, `/api/seckill/do/${ticket.body.path}`, {
    method: 'POST',
    auth: jwt,
    json: { goodsId, token: ticket.body.token },
  });
  expect(queued.status, JSON.stringify(queued.body)).toBe(202);
  return eventually(async () => {
    const result = await call<{ status: string; orderId?: string }>(stack, `/api/seckill/result/${queued.body.requestId}`, { auth: jwt });
    expect(result.body.status).toBe('SUCCESS');
    return { orderId: String(result.body.orderId) };
  });
}

/** Puts shoppers on an allowlist goods' list. */
export async function allowShoppers(stack: Stack, goodsId: number, userIds: string[]): Promise<void> {
  const res = await call<{ count: number }>(stack, `/admin/goods/${goodsId}/allowlist`, {
    method: 'PUT',
    auth: stack.adminToken,
    json: { add: userIds },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/** Asks for a purchase token as `userId` through the API: the status and error code it gets. */
export async function askToken(stack: Stack, userId: string, goodsId: number): Promise<{ status: number; code?: string }> {
  const ticket = await takeToken(stack, await devToken(stack, userId), goodsId);
  return { status: ticket.status, code: ticket.body.error?.code };
}

/** Joins a goods' waiting room as `userId` through the API: a shopper ahead in line, off-screen. */
export async function joinQueue(stack: Stack, userId: string, goodsId: number): Promise<{ state: string; position: number }> {
  const jwt = await devToken(stack, userId);
  const res = await call<{ state: string; position: number }>(stack, `/api/seckill/goods/${goodsId}/queue`, { method: 'POST', auth: jwt });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

/** Any admin route, with the admin token. */
export async function adminCall<T>(
  stack: Stack,
  path: string,
  init: RequestInit & { json?: unknown } = {},
): Promise<{ status: number; body: T }> {
  return call<T>(stack, path, { ...init, auth: stack.adminToken });
}

export async function goods(stack: Stack, goodsId: number): Promise<GoodsView> {
  const res = await call<GoodsView>(stack, `/api/seckill/goods/${goodsId}`);
  expect(res.status).toBe(200);
  return res.body;
}

export async function stats(stack: Stack, goodsId: number): Promise<Stats> {
  const res = await call<Stats>(stack, `/admin/goods/${goodsId}/stats`, { auth: stack.adminToken });
  expect(res.status).toBe(200);
  return res.body;
}

/** The stats once `check` passes on them (the order consumer works asynchronously). */
export function statsWhen(stack: Stack, goodsId: number, check: (s: Stats) => void): Promise<Stats> {
  return eventually(async () => {
    const s = await stats(stack, goodsId);
    check(s);
    return s;
  });
}

export async function limits(stack: Stack): Promise<{ perIpPerSecond: number; perUserPerSecond: number }> {
  const res = await call<{ perIpPerSecond: number; perUserPerSecond: number }>(stack, '/admin/limits', { auth: stack.adminToken });
  expect(res.status).toBe(200);
  return res.body;
}

/** Retries `check` until it passes (the queue consumer works asynchronously), up to `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) {
        throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}
