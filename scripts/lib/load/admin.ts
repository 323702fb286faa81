// The admin API as the load tools use it: create a sale, raise and restore the edge limits,
// read a goods' stats until the pipeline is at rest.
import { type CreateGoodsRequest, errorOf, type Goods, type Limits, read, type Stats } from './contract.ts';
import type { Answer, HttpClient } from './http-client.ts';

/** Limits that let one load generator (one IP) through; per-shopper limits stay as they are. */
export const LOAD_TEST_LIMITS = { perIpPerSecond: 1_000_000, banThreshold: 100_000_000 };

export type AdminApi = ReturnType<typeof adminApi>;
/** Shopper ids per allowlist request (the route takes up to 200,000). */
const ALLOWLIST_PUT_IDS = 50_000;
export type AtRest = { stats: Stats | undefined; atRest: boolean };
export type StatsCheck = { name: string; ok: boolean; detail: string; oversold?: number };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The admin API of the deployment behind `http`, with the admin `token`. */
export function adminApi(http: HttpClient, token: string) {
  const headers = { authorization: `Bearer ${token}` };

  /** The answer's body read by `parse`, or an Error naming `what` went wrong. */
  function expectOk<T>(answer: Answer, what: string, parse: (json: unknown) => T | undefined): T {
    if (answer.status < 200 || answer.status >= 300) {
      const detail = errorOf(answer.json)?.message ?? answer.error ?? answer.body.slice(0, 200);
      throw new Error(`${what}: HTTP ${answer.status} ${detail}`);
    }
    const body = parse(answer.json);
    if (body === undefined) {
      throw new Error(`${what}: HTTP ${answer.status} with an answer of another shape: ${answer.body.slice(0, 200)}`);
    }
    return body;
  }

  const api = {
    /** Creates a goods on sale from now for an hour; returns the created goods. */
    async createGoods({
      stock,
      title = 'Load test',
      priceCents = 100,
      activityId = 9001,
      startAt,
      endAt,
      settings,
      perUserLimit,
      eligibility,
    }: {
      stock: number;
      title?: string;
      priceCents?: number;
      activityId?: number;
      startAt?: number;
      endAt?: number;
      /** The contract additions' settings (`shards`, `queue`, ...), sent as given. */
      settings?: Partial<CreateGoodsRequest> & { shards?: number };
      perUserLimit?: number;
      eligibility?: 'open' | 'allowlist';
    }): Promise<Goods> {
      const now = Date.now();
      const json: CreateGoodsRequest & { shards?: number } = {
        ...settings,
        activityId,
        title,
        priceCents,
        stock,
        startAt: startAt ?? now - 1000,
        endAt: endAt ?? now + 3600_000,
        ...(perUserLimit !== undefined ? { perUserLimit } : {}),
        ...(eligibility !== undefined ? { eligibility } : {}),
      };
      return expectOk(await http.post('/admin/goods', { headers, json }), 'creating the goods', read.goods);
    },
    /** Adds shoppers to a goods' allowlist, ALLOWLIST_PUT_IDS per request; how many the list holds. */
    async addToAllowlist(goodsId: number, userIds: string[]): Promise<number> {
      let count = 0;
      for (let i = 0; i < userIds.length; i += ALLOWLIST_PUT_IDS) {
        const json = { add: userIds.slice(i, i + ALLOWLIST_PUT_IDS) };
        const answer = await http.put(`/admin/goods/${goodsId}/allowlist`, { headers, json });
        count = expectOk(answer, `loading the allowlist of goods ${goodsId}`, read.allowlist).count;
      }
      return count;
    },
    async getLimits(): Promise<Limits> {
      const { updatedAt: _updatedAt, ...limits } = expectOk(
        await http.get('/admin/limits', { headers }),
        'reading the limits',
        read.limits,
      );
      return limits;
    },
    async setLimits(patch: Limits): Promise<Limits> {
      return expectOk(await http.put('/admin/limits', { headers, json: patch }), 'changing the limits', read.limits);
    },
    async stats(goodsId: number): Promise<Stats> {
      return expectOk(await http.get(`/admin/goods/${goodsId}/stats`, { headers }), `reading the stats of goods ${goodsId}`, read.stats);
    },
    async metrics(): Promise<string> {
      const answer = await http.get('/admin/metrics', { headers });
      // Prometheus text, not JSON: only the status is checked.
      expectOk({ ...answer, json: undefined }, 'reading the metrics', () => true);
      return answer.body;
    },
    /**
     * Polls the stats until nothing is in flight (no queued reservation, empty outbox) and they
     * stop changing, or until the timeout; returns the last stats and whether they came to rest.
     */
    async waitAtRest(
      goodsId: number,
      { timeoutMs = 60_000, intervalMs = 250, until }: { timeoutMs?: number; intervalMs?: number; until?: (stats: Stats) => boolean } = {},
    ): Promise<AtRest> {
      const deadline = Date.now() + timeoutMs;
      let last: Stats | undefined;
      for (;;) {
        try {
          last = await api.stats(goodsId);
        } catch (error) {
          if (Date.now() > deadline) {
            throw error;
          }
        }
        const quiet = last && last.queued === 0 && last.outboxPending === 0 && (!until || until(last));
        if (quiet && last?.consistent) {
          return { stats: last, atRest: true };
        }
        if (Date.now() > deadline) {
          return { stats: last, atRest: Boolean(quiet) };
        }
        await sleep(intervalMs);
      }
    },
  };
  return api;
}

/** Units of the live orders (the ones holding stock) in a stats answer, which counts units. */
export function liveOrders(stats: Stats): number {
  return (stats.orders.PENDING_PAYMENT ?? 0) + (stats.orders.PAID ?? 0);
}

/**
 * The invariants of DESIGN.md as the stats show them at rest:
 * doRemaining + live == totalStock, dbStock == doRemaining, mirror == object (when on),
 * nothing left in flight. Returns named checks, each `{ name, ok, detail }`.
 */
export function statsChecks(stats: Stats, atRest: boolean): StatsCheck[] {
  const live = liveOrders(stats);
  const oversold = Math.max(0, live - stats.totalStock);
  return [
    {
      name: 'at rest',
      ok: atRest && stats.queued === 0 && stats.outboxPending === 0,
      detail: `queued ${stats.queued}, outbox ${stats.outboxPending}`,
    },
    {
      name: 'no oversell',
      ok: oversold === 0 && stats.doRemaining !== null && stats.doRemaining >= 0,
      detail: `${live} live orders for ${stats.totalStock} units`,
      oversold,
    },
    {
      name: 'stock adds up',
      ok: stats.doRemaining !== null && stats.doRemaining + live === stats.totalStock,
      detail: `object ${stats.doRemaining} + live orders ${live} = ${(stats.doRemaining ?? 0) + live} (total ${stats.totalStock})`,
    },
    {
      name: 'Postgres agrees',
      ok: stats.dbStock === stats.doRemaining,
      detail: `dbStock ${stats.dbStock}, object ${stats.doRemaining}`,
    },
    {
      name: 'mirror agrees',
      ok: stats.mirror === 'off' || stats.mirror === 'unreachable' || stats.mirrorStock === stats.doRemaining,
      detail: stats.mirror === 'ok' ? `mirror ${stats.mirrorStock}` : `mirror ${stats.mirror}`,
    },
    { name: 'stats consistent', ok: stats.consistent === true, detail: `consistent: ${stats.consistent}` },
    { name: 'no dead letters', ok: (stats.deadLetters ?? 0) === 0, detail: `${stats.deadLetters ?? 0} open` },
  ];
}
