// Sale rules on a goods spread over stock shards: a shopper's limit is held on the shard they
// always land on, a purchase of several units takes them from the pool or the other shards
// before it is refused (and then whole, with the goods' units left), the rules and the
// allowlist reach every shard, and every invariant holds in units summed over the shards.
import { env } from 'cloudflare:test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { goodsStock } from '../../durable-objects/routing';
import { shardOf } from '../../workers/kernel/shards';
import { ADMIN, bearer, call, devToken, grantInFlight, json, reconcileNow, setLimits, settled, tokenFor } from './helpers';
import {
  answerOf,
  changeAllowlist,
  createRulesGoods,
  finalResult,
  liveUnitsByUser,
  purchaseUnits,
  shopperWithTokens,
} from './rules-helpers';
import { usersOn } from './shards-helpers';

const SHARDS = 4;

beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});

/** `perShard` shoppers on each shard, shard by shard interleaved. */
function usersOnEveryShard(prefix: string, perShard: number): string[] {
  const byShard = Array.from({ length: SHARDS }, (_, k) => usersOn(`${prefix}${k}`, k, SHARDS, perShard));
  return Array.from({ length: perShard * SHARDS }, (_, i) => byShard[i % SHARDS]?.[Math.floor(i / SHARDS)] ?? '');
}

type ShardStats = { shards: { shard: number; remaining: number; queued: number; confirmed: number }[] };

async function shardStats(goodsId: number): Promise<ShardStats> {
  return json<ShardStats>(await call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN }));
}

describe(`sale rules on ${SHARDS} stock shards`, () => {
  it('perUserLimit 3 under concurrent purchases of 1 and 2 units: nobody holds more than 3', async () => {
    const { goodsId } = await createRulesGoods({ stock: 60, perUserLimit: 3, shards: SHARDS });
    const shoppers = await Promise.all(usersOnEveryShard('lim', 2).map((u) => shopperWithTokens(u, goodsId, 4)));
    const quantities = [2, 1, 2, 1];
    const answers = await Promise.all(
      shoppers.flatMap((s) =>
        s.tokens.map((t, i) =>
          purchaseUnits(s.jwt, goodsId, t, quantities[i] ?? 1).then(async (res) => ({ s, q: quantities[i] ?? 1, a: await answerOf(res) })),
        ),
      ),
    );
    const accepted = new Map<string, number>();
    for (const { s, q, a } of answers) {
      if (a.status === 202) {
        accepted.set(s.userId, (accepted.get(s.userId) ?? 0) + q);
      } else {
        expect(a).toMatchObject({ status: 409, code: 'LIMIT_REACHED' });
      }
    }
    // Every shopper got something and nobody more than the limit, on whichever shard they landed.
    expect(accepted.size).toBe(shoppers.length);
    expect([...accepted.values()].every((n) => n >= 2 && n <= 3)).toBe(true);
    const sold = [...accepted.values()].reduce((a, b) => a + b, 0);
    const s = await settled(goodsId);
    expect(s).toMatchObject({
      totalStock: 60,
      doRemaining: 60 - sold,
      dbStock: 60 - sold,
      orders: { PENDING_PAYMENT: sold },
      consistent: true,
    });
    const units = await liveUnitsByUser(goodsId);
    expect([...units.values()].every((n) => n <= 3)).toBe(true);
    expect(units).toEqual(accepted);
  });

  it('quantity 2 racing the last units across shards: every unit sold, refusals whole with the goods-wide units left', async () => {
    // 7 units, purchases of 2: three win, and every refusal is whole and says the goods' units left
    // over every shard (1, wherever it sits; a unit moving between shards at that instant is not
    // counted); that unit is then sold to a shopper of any shard, never stranded.
    const { goodsId } = await createRulesGoods({ stock: 7, perUserLimit: 2, shards: SHARDS });
    const shoppers = await Promise.all(usersOnEveryShard('race', 3).map((u) => shopperWithTokens(u, goodsId, 1)));
    const answers = await Promise.all(
      shoppers.map((s) => purchaseUnits(s.jwt, goodsId, s.tokens[0] as { token: string; path: string }, 2).then(answerOf)),
    );
    const won = answers.filter((a) => a.status === 202);
    expect(won).toHaveLength(3);
    const refused = answers.filter((x) => x.status !== 202);
    for (const a of refused) {
      expect(a).toMatchObject({ status: 410, code: 'SOLD_OUT' });
      expect(a.remaining ?? 0).toBeLessThan(2);
    }
    // Most refusals count the stray unit (a shard's own figure alone would miss it on 3 of 4 shards).
    expect(refused.filter((a) => a.remaining === 1).length).toBeGreaterThan(0);
    for (const [i, a] of answers.entries()) {
      if (a.status === 202) {
        expect(await finalResult(shoppers[i]?.jwt ?? '', a.requestId ?? '')).toMatchObject({ status: 'SUCCESS' });
      }
    }
    // The last unit, bought from the shard the fewest winners came from: never stranded.
    const last = await shopperWithTokens(usersOn('race-last', SHARDS - 1, SHARDS, 1)[0] ?? '', goodsId, 2);
    expect((await purchaseUnits(last.jwt, goodsId, last.tokens[0] as { token: string; path: string }, 1)).status).toBe(202);
    expect(await answerOf(await purchaseUnits(last.jwt, goodsId, last.tokens[1] as { token: string; path: string }, 1))).toMatchObject({
      status: 410,
      code: 'SOLD_OUT',
    });
    const s = await settled(goodsId);
    expect(s).toMatchObject({ totalStock: 7, doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 7 }, consistent: true });
    expect((await shardStats(goodsId)).shards.reduce((n, x) => n + x.remaining, 0)).toBe(0);
  });

  it('a purchase of 2 waits for a unit on its way to another shard, and gets it with the last other unit', async () => {
    // Two units: one leased to whichever shard asked first, the other granted by shard 0 to
    // shard 1 and not arrived yet. A shopper of shard 2 asking for both is not refused while the
    // second is on its way: the pool takes it back once it lands, and the shopper gets both.
    const { goodsId } = await createRulesGoods({ stock: 2, perUserLimit: 2, shards: SHARDS });
    const inFlight = await grantInFlight(goodsId, 1, 1);
    const shopper = await shopperWithTokens(usersOn('in-flight-two', 2, SHARDS, 1)[0] ?? '', goodsId, 1);
    const answer = purchaseUnits(shopper.jwt, goodsId, shopper.tokens[0] as { token: string; path: string }, 2).then(answerOf);
    await new Promise((r) => setTimeout(r, 300));
    await inFlight.land();
    expect(await answer).toMatchObject({ status: 202 });
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 2 }, consistent: true });
  });

  it('an allowlisted sharded goods refuses outsiders at the object on every shard', async () => {
    const { goodsId } = await createRulesGoods({ stock: 20, perUserLimit: 2, shards: SHARDS });
    // The rule switched after creation reaches every shard, like the list.
    const put = await call(`/admin/goods/${goodsId}`, { method: 'PUT', headers: ADMIN, json: { eligibility: 'allowlist' } });
    expect(await json(put)).toMatchObject({ eligibility: 'allowlist', shards: SHARDS });
    const insiders = usersOnEveryShard('al-in', 1);
    const gone = usersOnEveryShard('al-gone', 1);
    expect(await json(await changeAllowlist(goodsId, { add: [...insiders, ...gone] }))).toEqual({ count: 2 * SHARDS });
    const goods = { id: goodsId, locationHint: null };
    for (let k = 0; k < SHARDS; k++) {
      expect(await goodsStock(env, goods, k).changeAllowlist([], [])).toEqual({ count: 2 * SHARDS });
    }
    // Tokens minted while listed, used after being taken off the list: each shard refuses.
    const goneTokens = await Promise.all(
      gone.map(async (u) => {
        const jwt = await devToken(u);
        return { jwt, token: await tokenFor(jwt, goodsId) };
      }),
    );
    expect(await json(await changeAllowlist(goodsId, { remove: gone }))).toEqual({ count: SHARDS });
    for (const [i, t] of goneTokens.entries()) {
      expect(await answerOf(await purchaseUnits(t.jwt, goodsId, t.token, 1)), `shard ${shardOf(gone[i] ?? '', SHARDS)}`).toMatchObject({
        status: 403,
        code: 'NOT_ELIGIBLE',
      });
    }
    for (const u of insiders) {
      const jwt = await devToken(u);
      expect((await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), 2)).status).toBe(202);
    }
    const s = await settled(goodsId);
    expect(s).toMatchObject({
      doRemaining: 20 - 2 * SHARDS,
      dbStock: 20 - 2 * SHARDS,
      orders: { PENDING_PAYMENT: 2 * SHARDS },
      consistent: true,
    });
  });

  it('holds every invariant in units after a sharded mixed sale with cancels', async () => {
    const STOCK = 24;
    const { goodsId } = await createRulesGoods({ stock: STOCK, perUserLimit: 3, shards: SHARDS });
    const users = usersOnEveryShard('mix', 3);
    const bought = await Promise.all(
      users.map(async (u, i) => {
        const jwt = await devToken(u);
        const q = (i % 3) + 1;
        const a = await answerOf(await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), q));
        return { u, jwt, q, a };
      }),
    );
    const accepted = bought.filter((b) => b.a.status === 202);
    const refused = bought.filter((b) => b.a.status !== 202);
    for (const r of refused) {
      expect(r.a.code).toBe('SOLD_OUT');
    }
    const orders = await Promise.all(accepted.map(async (b) => ({ ...b, result: await finalResult(b.jwt, b.a.requestId ?? '') })));
    const sold = accepted.reduce((n, b) => n + b.q, 0);
    expect(sold).toBeLessThanOrEqual(STOCK);
    // Cancel the orders of three units: each one's units go back whole to its shard.
    const cancels = orders.filter((o) => o.q === 3);
    expect(cancels).toHaveLength(SHARDS);
    for (const c of cancels) {
      expect((await call(`/api/orders/${c.result.orderId}/cancel`, { method: 'POST', headers: bearer(c.jwt) })).status).toBe(200);
    }
    const cancelled = cancels.reduce((n, c) => n + c.q, 0);
    // New shoppers on every shard buy what came back, some of it on shards other than its own.
    const again = usersOnEveryShard('mix-again', 2);
    const rebought: number[] = await Promise.all(
      again.map(async (u) => {
        const jwt = await devToken(u);
        const a = await answerOf(await purchaseUnits(jwt, goodsId, await tokenFor(jwt, goodsId), 2));
        if (a.status === 202) {
          expect(await finalResult(jwt, a.requestId ?? '')).toMatchObject({ status: 'SUCCESS' });
        } else {
          expect(a.code).toBe('SOLD_OUT');
        }
        return a.status === 202 ? 2 : 0;
      }),
    );
    const live = sold - cancelled + rebought.reduce((a, b) => a + b, 0);
    const end = await settled(goodsId);
    expect(end).toMatchObject({
      totalStock: STOCK,
      doRemaining: STOCK - live,
      dbStock: STOCK - live,
      orders: { PENDING_PAYMENT: live, CANCELLED: cancelled },
      consistent: true,
    });
    if (end.mirrorStock !== null) {
      expect(end.mirrorStock).toBe(end.doRemaining);
    }
    // The shards add up, in units.
    const perShard = (await shardStats(goodsId)).shards;
    expect(perShard).toHaveLength(SHARDS);
    expect(perShard.reduce((n, x) => n + x.remaining, 0)).toBe(STOCK - live);
    // Never part-filled: each live order holds the units its shopper asked for.
    const units = await liveUnitsByUser(goodsId);
    const asked = new Map<string, number>([
      ...accepted.filter((b) => !cancels.some((c) => c.u === b.u)).map((b): [string, number] => [b.u, b.q]),
      ...again.flatMap((u, i): [string, number][] => (rebought[i] ? [[u, 2]] : [])),
    ]);
    expect(units).toEqual(asked);
    expect([...units.values()].reduce((a, b) => a + b, 0)).toBe(live);
    const report = await reconcileNow(goodsId);
    expect(report.goods[0], JSON.stringify(report.goods[0])).toMatchObject({
      goodsId,
      doRemaining: STOCK - live,
      dbStock: STOCK - live,
      liveOrders: live,
      consistent: true,
    });
  });
});
