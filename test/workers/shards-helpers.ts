import { env } from 'cloudflare:test';
import { expect } from 'vitest';
import { goodsStock } from '../../durable-objects/routing';
import type { StockSnapshot } from '../../workers/kernel/contract';
import { shardOf } from '../../workers/kernel/shards';
import { ADMIN, bearer, call, devToken, json, pool, purchaseToken, type stats } from './helpers';

// What the stock-shards test files share: a goods over several stock objects, shoppers who land
// on a chosen shard, a sale where they all buy at once, and the totals across the shards.
export const SHARDS = 8;

export type ShardedStats = Awaited<ReturnType<typeof stats>> & {
  shards: { shard: number; remaining: number; queued: number; confirmed: number }[];
  poolCalls: number;
};

export async function shardedStats(goodsId: number): Promise<ShardedStats> {
  const res = await call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN });
  expect(res.status).toBe(200);
  return json<ShardedStats>(res);
}

/** `n` user ids that all land on `shard` of `shards` (a prefix keeps each test's shoppers apart). */
export function usersOn(prefix: string, shard: number, shards: number, n: number): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < n; i++) {
    const id = `${prefix}-${i}`;
    if (shardOf(id, shards) === shard) {
      out.push(id);
    }
  }
  return out;
}

/** Every shopper gets a token first, then all of them try to buy at once (`together` at a time): the answers' statuses. */
export async function sale(goodsId: number, users: string[], together = 24): Promise<{ userId: string; status: number; code?: string }[]> {
  const ready = await pool(users.length, 16, async (i) => {
    const userId = users[i] ?? '';
    const jwt = await devToken(userId);
    return { userId, jwt, ...(await purchaseToken(jwt, goodsId)) };
  });
  return pool(ready.length, together, async (i) => {
    const s = ready[i];
    if (!s) {
      throw new Error('missing shopper');
    }
    const res = await call(`/api/seckill/do/${s.path}`, { method: 'POST', headers: bearer(s.jwt), json: { goodsId, token: s.token } });
    const body = await json<{ error?: { code: string } }>(res);
    return { userId: s.userId, status: res.status, code: body.error?.code };
  });
}

export async function shardSnapshots(goodsId: number): Promise<(StockSnapshot | undefined)[]> {
  const goods = { id: goodsId, locationHint: null };
  return Promise.all(Array.from({ length: SHARDS }, (_, k) => goodsStock(env, goods, k).snapshot()));
}

export function expectOneOrderEach(orders: { userId: string }[]) {
  expect(new Set(orders.map((o) => o.userId)).size).toBe(orders.length);
}
