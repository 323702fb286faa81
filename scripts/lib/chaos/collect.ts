// The end state of each goods, read once everything is quiet: the admin stats (the object's
// view beside Postgres' and the mirror's), Postgres itself (orders, dead letters, the cron's
// last reconciliation) and Redis itself (the seed's keys and their types). Plain data for
// verdict.ts.
import ioredis from 'ioredis';
import pg from 'pg';
import type { AdminApi } from '../load/admin.ts';
import type { Stats } from '../load/contract.ts';

// ioredis is CommonJS; its default export carries the class (see redis-rest-bridge.ts).
const { Redis } = ioredis as unknown as typeof import('ioredis');

export type OrderRow = { id: string; requestId: string; userId: string; status: number };
export type RedisResultKey = { type: string; value: string | null };

export type GoodsFacts = {
  goodsId: number;
  stats: Stats | undefined;
  orders: OrderRow[];
  deadLetters: { total: number; open: number };
  /** The cron's latest reconciliation of this goods. */
  reconciliation: { runAt: number; consistent: boolean; kinds: string[] } | undefined;
  /** What Redis holds under the seed's keys; undefined when Redis did not answer. */
  redis:
    | {
        stock: string | null;
        users: string[];
        /** By request id: the key's type (`string` in the seed, `none` when absent) and its result value. */
        results: Record<string, RedisResultKey>;
      }
    | undefined;
};

type ReconRow = { goods_id: string; run_at: Date; consistent: boolean; discrepancies: unknown };

/** Reads every goods' end state. */
export async function collectFacts({
  admin,
  databaseUrl,
  redisUrl,
  goods,
}: {
  admin: AdminApi;
  databaseUrl: string;
  /** Undefined when the run went without the Redis mirror: nothing is read from Redis. */
  redisUrl: string | undefined;
  goods: { goodsId: number; requestIds: string[] }[];
}): Promise<GoodsFacts[]> {
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  const redis = redisUrl ? new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null }) : undefined;
  redis?.on('error', () => {});
  const redisUp = redis
    ? await redis.connect().then(
        () => true,
        () => false,
      )
    : false;
  try {
    const facts: GoodsFacts[] = [];
    for (const g of goods) {
      const stats = await admin.stats(g.goodsId).catch(() => undefined);
      const orders = await db.query<{ id: string; request_id: string; user_id: string; status: number }>(
        'SELECT id, request_id, user_id, status FROM seckill_order WHERE goods_id = $1',
        [g.goodsId],
      );
      const dead = await db.query<{ total: number; open: number }>(
        'SELECT count(*)::int AS total, (count(*) FILTER (WHERE redriven_at IS NULL))::int AS open FROM dead_letter WHERE goods_id = $1',
        [g.goodsId],
      );
      const recon = await db.query<ReconRow>(
        'SELECT goods_id, run_at, consistent, discrepancies FROM reconciliation_report WHERE goods_id = $1 ORDER BY run_at DESC LIMIT 1',
        [g.goodsId],
      );
      const last = recon.rows[0];
      const kinds = Array.isArray(last?.discrepancies) ? last.discrepancies.map((d: { kind?: unknown }) => String(d.kind)) : [];
      facts.push({
        goodsId: g.goodsId,
        stats,
        orders: orders.rows.map((r) => ({ id: r.id, requestId: r.request_id, userId: r.user_id, status: r.status })),
        deadLetters: dead.rows[0] ?? { total: 0, open: 0 },
        reconciliation: last ? { runAt: last.run_at.getTime(), consistent: last.consistent, kinds } : undefined,
        redis: redis && redisUp ? await readRedis(redis, g.goodsId, g.requestIds) : undefined,
      });
    }
    return facts;
  } finally {
    await db.end();
    redis?.disconnect();
  }
}

async function readRedis(redis: InstanceType<typeof Redis>, goodsId: number, requestIds: string[]): Promise<GoodsFacts['redis']> {
  const stock = await redis.get(`seckill:stock:${goodsId}`);
  const users = await redis.smembers(`seckill:users:${goodsId}`);
  const results: Record<string, RedisResultKey> = {};
  for (const id of requestIds) {
    const key = `seckill:result:${id}`;
    const type = await redis.type(key);
    // The seed's tools GET a plain string; a hash (this mirror before the seed's types were kept) keeps it in `result`.
    const value = type === 'string' ? await redis.get(key) : type === 'hash' ? await redis.hget(key, 'result') : null;
    results[id] = { type, value };
  }
  return { stock, users, results };
}
