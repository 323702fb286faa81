// The bench's invariants, per goods, once its orders have settled: the stats of DESIGN.md, and
// Postgres itself for what the stats cannot show (every 202 has its order row, nobody holds two).
import pg from 'pg';
import { type AdminApi, liveOrders, statsChecks } from '../load/admin.ts';

export type BenchCheck = { goods: string; name: string; ok: boolean; detail: string };
export type BenchInvariants = { ok: boolean; oversold: number; lost: number; duplicates: number; checks: BenchCheck[] };

/** Each goods' invariants once its orders have settled, from the stats and from Postgres. */
export async function benchInvariants({
  admin,
  databaseUrl,
  goods,
  settleTimeoutMs,
}: {
  admin: AdminApi;
  databaseUrl: string;
  goods: { name: string; goodsId: number; accepted: Set<string> }[];
  settleTimeoutMs: number;
}): Promise<BenchInvariants> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const checks: BenchCheck[] = [];
  let oversold = 0;
  let lost = 0;
  let duplicates = 0;
  try {
    for (const g of goods) {
      const { stats, atRest } = await admin.waitAtRest(g.goodsId, { timeoutMs: settleTimeoutMs });
      if (!stats) {
        throw new Error(`the stats of goods ${g.goodsId} could not be read`);
      }
      for (const c of statsChecks(stats, atRest)) {
        checks.push({ goods: g.name, name: c.name, ok: c.ok, detail: c.detail });
      }
      oversold += Math.max(0, liveOrders(stats) - stats.totalStock);
      const { rows } = await client.query<{ request_id: string }>('SELECT request_id FROM seckill_order WHERE goods_id = $1', [g.goodsId]);
      const inDb = new Set(rows.map((r) => r.request_id));
      const missing = [...g.accepted].filter((id) => !inDb.has(id)).length;
      lost += missing;
      checks.push({
        goods: g.name,
        name: 'every 202 has its order',
        ok: missing === 0,
        detail: `${g.accepted.size} answered 202, ${missing} without an order row (${inDb.size} orders)`,
      });
      const twice = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM (
           SELECT user_id FROM seckill_order WHERE goods_id = $1 AND status IN (0, 1) GROUP BY user_id HAVING count(*) > 1) t`,
        [g.goodsId],
      );
      const holdingTwo = twice.rows[0]?.n ?? 0;
      duplicates += holdingTwo;
      checks.push({
        goods: g.name,
        name: 'one live order per shopper',
        ok: holdingTwo === 0,
        detail: `${holdingTwo} shoppers with two`,
      });
    }
  } finally {
    await client.end();
  }
  return { ok: checks.every((c) => c.ok), oversold, lost, duplicates, checks };
}
