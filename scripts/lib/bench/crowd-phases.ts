// The bench's phases of what a crowd does beside buying: reloading the goods page, joining an
// allowlist goods' line, and a shopper's journey one route at a time under the crowd. Each
// returns its numbers (and, where it buys, the goods whose invariants bench.ts checks).

import { round } from '../load/metrics.ts';
import { challengeAnswer } from '../load/shoppers.ts';
import type { PhaseRequest, PhaseResult } from './cannon.ts';
import { type BenchContext, type CheckedGoods, saleGoods } from './context.ts';
import { byClass, countCalls } from './objects.ts';

export type GoodsPagePhase = PhaseResult & {
  /** The goods' stock shards: without the mirror, a page read asks each of them. */
  shards: number;
  /** Stock object calls per page view (the stock figure kept in the isolate and the data center). */
  stockCallsPerView: number;
};

/** Shoppers waiting on a goods page: its one-goods read, again and again, the sale on. */
export async function goodsPagePhase(c: BenchContext, shards: number): Promise<GoodsPagePhase> {
  const durationS = Math.min(c.o.durationS, 5);
  c.say(`Goods page: GET /api/seckill/goods/:goodsId of a goods of ${shards} shards for ${durationS} s...`);
  const goods = await saleGoods(c, 'goods page', 1_000, { shards });
  const counted = await countCalls(c.calls, () => c.phase({ path: `/api/seckill/goods/${goods.goodsId}`, durationS }));
  const stockCalls = byClass(counted.counts).GoodsStock?.calls ?? 0;
  return { ...counted.result, shards, stockCallsPerView: round(stockCalls / Math.max(1, counted.result.requests), 4) };
}

/** Joins of one allowlist goods by its invited shoppers: what the join's eligibility check costs Postgres. */
export type AllowlistJoins = PhaseResult & {
  /** `goods`: the list answered from the isolate's copy; `activity`: from it and the copy of the activity's holders. */
  limitScope: 'goods' | 'activity';
  invited: number;
  /** SQL-over-HTTP requests a join, at the local bridge (every one the Worker sent, the goods list's renewals among them). */
  sqlPerJoin: number;
};

/** Shoppers an allowlist goods of the joins phase invites (each joins every few seconds at most). */
const INVITED = 20_000;

/**
 * The waiting room's join (`POST .../queue`, the room off) of an allowlist goods by its invited
 * shoppers, twice on the same machine: an `activity`-scoped goods, whose rule the isolate's copy
 * of the activity's holders answers beside its copy of the list (each renewed in the background,
 * the holders' every second), and a `goods`-scoped one, answered from the list's copy alone; the
 * Postgres requests a join counted at the SQL bridge (one a shopper where the rules' statement answers).
 */
export async function allowlistJoinPhases(c: BenchContext): Promise<AllowlistJoins[]> {
  const durationS = Math.min(c.o.durationS, 5);
  const users = await c.minter.users('invited', INVITED);
  const out: AllowlistJoins[] = [];
  for (const limitScope of ['activity', 'goods'] as const) {
    c.say(
      `Allowlist joins (${limitScope}-scoped): POST /api/seckill/goods/:goodsId/queue by ${INVITED} invited shoppers for ${durationS} s...`,
    );
    const goods = await saleGoods(c, `allowlist joins, ${limitScope}`, 1_000, { eligibility: 'allowlist', limitScope });
    await c.admin.addToAllowlist(
      goods.goodsId,
      users.map((u) => u.userId),
    );
    const { result, sqlPerRequest } = await shoppersInTurn(c, durationS, users, 'POST', `/api/seckill/goods/${goods.goodsId}/queue`);
    out.push({ ...result, limitScope, invited: INVITED, sqlPerJoin: sqlPerRequest });
  }
  return out;
}

/** Page loads of a per-goods sale under way: what telling each shopper the units they hold costs Postgres. */
export type EligibilityViews = PhaseResult & {
  shoppers: number;
  /** SQL-over-HTTP requests a page load, at the local bridge (one a shopper where the statement answers). */
  sqlPerView: number;
};

/**
 * The page's eligibility (`GET .../eligibility`: may the shopper buy, and how many units they
 * hold) of a sale of three units a shopper under way, by INVITED shoppers in turn: answered from
 * the isolate's copy of who holds how many (renewed every second in the background), where each
 * load had been a Postgres statement.
 */
export async function eligibilityViewsPhase(c: BenchContext): Promise<EligibilityViews> {
  const durationS = Math.min(c.o.durationS, 5);
  c.say(`Page eligibility: GET /api/seckill/goods/:goodsId/eligibility of a sale under way by ${INVITED} shoppers for ${durationS} s...`);
  const goods = await saleGoods(c, 'page eligibility', 1_000, { perUserLimit: 3 });
  const users = await c.minter.users('viewer', INVITED);
  const { result, sqlPerRequest } = await shoppersInTurn(c, durationS, users, 'GET', `/api/seckill/goods/${goods.goodsId}/eligibility`);
  return { ...result, shoppers: INVITED, sqlPerView: sqlPerRequest };
}

/** A phase of one route asked by the shoppers in turn, with the SQL-over-HTTP requests it cost a request at the bridge. */
async function shoppersInTurn(
  c: BenchContext,
  durationS: number,
  users: readonly { jwt: string }[],
  method: PhaseRequest['method'],
  path: string,
): Promise<{ result: PhaseResult; sqlPerRequest: number }> {
  let i = 0;
  const next = (): PhaseRequest => {
    const u = users[i++ % users.length] as { jwt: string };
    return { method, path, headers: { authorization: `Bearer ${u.jwt}` } };
  };
  const sqlBefore = await c.sqlRequests();
  const result = await c.phase({ next, durationS });
  const sql = (await c.sqlRequests()) - sqlBefore;
  return { result, sqlPerRequest: round(sql / Math.max(1, result.requests), 4) };
}

/** One route of a shopper's journey, measured at load on its own. */
export type RoutePhase = PhaseResult & { route: string };

export type JourneyRoutes = {
  routes: RoutePhase[];
  /** The routes' CPU a request summed: what one shopper's journey costs the Worker under a crowd. */
  cpuUsPerJourney: number | null;
};

/** Shoppers of the journey-by-route phases: at most this many, and no more than the floor serves in the time. */
const ROUTE_SHOPPERS = 20_000;

/**
 * A shopper's journey one route at a time, each route under the bench's connections for at most
 * 3 s with every request a new shopper's: the challenge (`POST .../challenge`), the token with
 * the challenge's answer, the purchase with that token, and the result read once (no wait), each
 * step's shoppers those the step before answered; the reads once the orders are written. The
 * CPU a request of each route (workerd's processes, from /proc, the purchase's with the orders'
 * writing as it goes on beside it), where the journeys walk measures a whole journey at rest.
 */
export async function journeyRoutesPhase(c: BenchContext, floorRps: number): Promise<{ result: JourneyRoutes; goods: CheckedGoods[] }> {
  const durationS = Math.min(c.o.durationS, 3);
  const shoppers = Math.min(ROUTE_SHOPPERS, Math.ceil(floorRps * durationS));
  c.say(`A journey by route: challenge, token, purchase and result read, each for ${durationS} s at most...`);
  const goods = await saleGoods(c, 'journey by route', 2_000_000);
  const users = await c.minter.users('route', shoppers);
  const auth = (jwt: string) => ({ authorization: `Bearer ${jwt}` });
  const routes: RoutePhase[] = [];
  const step = async <T>(route: string, items: T[], request: (item: T) => PhaseRequest, answer: (item: T, body: string) => void) => {
    let i = 0;
    const itemOf = new Map<PhaseRequest, T>();
    const result = await c.phase({
      durationS,
      maxRequests: items.length,
      next: () => {
        // Past the last item (a phase of fewer items than connections), the last again.
        const item = items[Math.min(i++, items.length - 1)] as T;
        const req = request(item);
        itemOf.set(req, item);
        return req;
      },
      onAnswer: (status, body, req) => {
        const item = req ? itemOf.get(req) : undefined;
        if (status < 300 && item !== undefined) {
          answer(item, body);
        }
      },
    });
    routes.push({ ...result, route });
  };

  const challenged: { jwt: string; challenge: unknown }[] = [];
  await step(
    'POST .../challenge',
    users,
    (u) => ({ method: 'POST', path: `/api/seckill/goods/${goods.goodsId}/challenge`, headers: auth(u.jwt) }),
    (u, body) => challenged.push({ jwt: u.jwt, challenge: JSON.parse(body) }),
  );
  const answered: { jwt: string; body: string }[] = [];
  for (const ch of challenged) {
    const a = await challengeAnswer(ch.challenge);
    if (a.body) {
      answered.push({ jwt: ch.jwt, body: JSON.stringify(a.body) });
    }
  }
  const issued: { jwt: string; token: string; path: string }[] = [];
  await step(
    'POST .../token',
    answered,
    (a) => ({
      method: 'POST',
      path: `/api/seckill/goods/${goods.goodsId}/token`,
      headers: { ...auth(a.jwt), 'content-type': 'application/json' },
      body: a.body,
    }),
    (a, body) => {
      const t = JSON.parse(body) as { token: string; path: string };
      issued.push({ jwt: a.jwt, token: t.token, path: t.path });
    },
  );
  const accepted = new Set<string>();
  const bought: { jwt: string; requestId: string }[] = [];
  await step(
    'POST /api/seckill/do/:path',
    issued,
    (t) => ({
      method: 'POST',
      path: `/api/seckill/do/${t.path}`,
      headers: { ...auth(t.jwt), 'content-type': 'application/json' },
      body: JSON.stringify({ goodsId: goods.goodsId, token: t.token }),
    }),
    (t, body) => {
      const requestId = (JSON.parse(body) as { requestId: string }).requestId;
      accepted.add(requestId);
      bought.push({ jwt: t.jwt, requestId });
    },
  );
  // The reads once the orders are written: their CPU is theirs, not the consumer's as it drains.
  await c.admin.waitAtRest(goods.goodsId, { timeoutMs: 120_000 });
  await step(
    'GET .../result/:requestId',
    bought,
    (b) => ({ method: 'GET', path: `/api/seckill/result/${b.requestId}`, headers: auth(b.jwt) }),
    () => undefined,
  );
  const cpu = routes.map((r) => r.cpuUsPerRequest);
  const cpuUsPerJourney = cpu.every((x) => x !== null) ? cpu.reduce<number>((sum, x) => sum + (x ?? 0), 0) : null;
  return { result: { routes, cpuUsPerJourney }, goods: [{ name: 'journey by route', goodsId: goods.goodsId, accepted }] };
}
