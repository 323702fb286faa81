import { allStockShards, goodsStock, stockShardCount } from '../../durable-objects/routing';
import type { GoodsInit, GoodsPlacement, StockSnapshot } from '../kernel/contract';
import { type ShardStock, shardStocks, sumSnapshots } from '../kernel/shards';
import { within } from '../kernel/within';

// A goods' stock across its shards, for the callers that want the goods as a whole: stats,
// gauges, reconciliation, pre-warm and the operator's switches. A one-shard goods is one call,
// exactly as before.

/**
 * What a read of the goods' shards met when they did not all answer within its `withinMs`: the
 * reader goes on without them (the calls go on too; their answers are dropped).
 */
export class ShardsLate extends Error {
  constructor(ms: number) {
    super(`its stock shards did not answer within ${ms} ms`);
    this.name = 'ShardsLate';
  }
}

/**
 * Every shard's snapshot (undefined for a shard not made yet), shard 0 first; with `withinMs`, a
 * ShardsLate rejection once that long has passed without all of them, so that a read for an
 * operator or a page is never held by a shard that stopped answering.
 */
export function shardSnapshots(env: Env, goods: GoodsPlacement, withinMs?: number): Promise<(StockSnapshot | undefined)[]> {
  const all = Promise.all(allStockShards(env, goods).map((stub) => stub.snapshot()));
  return withinMs === undefined ? all : within(all, withinMs, () => new ShardsLate(withinMs));
}

/** The goods' snapshot summed over its shards, and each shard's figures (`withinMs` as shardSnapshots'). */
export async function goodsSnapshot(
  env: Env,
  goods: GoodsPlacement,
  withinMs?: number,
): Promise<{ total: StockSnapshot | undefined; shards: ShardStock[] }> {
  const all = await shardSnapshots(env, goods, withinMs);
  return { total: sumSnapshots(all), shards: shardStocks(all) };
}

/**
 * Creates or refreshes every shard: shard 0 first (it takes the stock from Postgres, and gives
 * back what shards of an older count held), then the others, which take their first lease.
 */
export async function initShards(env: Env, goods: GoodsPlacement, init: GoodsInit): Promise<StockSnapshot> {
  const first = await goodsStock(env, goods, 0).init(init, 0);
  const n = stockShardCount(goods);
  if (n <= 1) {
    return first;
  }
  const rest = await Promise.all(Array.from({ length: n - 1 }, (_, i) => goodsStock(env, goods, i + 1).init(init, i + 1)));
  // Shard 0 as it is after the leases went out.
  const zero = await goodsStock(env, goods, 0).snapshot();
  return sumSnapshots([zero ?? first, ...rest]) ?? first;
}

/** Pauses or resumes every shard; undefined when shard 0 has no sale yet (the caller initialises). */
export async function pauseShards(env: Env, goods: GoodsPlacement, paused: boolean): Promise<StockSnapshot | undefined> {
  const all = await Promise.all(allStockShards(env, goods).map((stub) => stub.setPaused(paused)));
  return all[0] ? sumSnapshots(all) : undefined;
}

/** Ids per RPC to a goods' object: one transaction each, well inside an RPC's size. */
const ALLOWLIST_RPC_CHUNK = 10_000;

/**
 * Adds and removes shoppers of the allowlist every shard keeps (a shopper's shard checks its own
 * copy where the unit is taken), the shards side by side, each in chunks.
 */
export async function allowlistShards(env: Env, goods: GoodsPlacement, add: string[], remove: string[]): Promise<void> {
  await Promise.all(
    allStockShards(env, goods).map(async (stub) => {
      for (let i = 0; i < Math.max(add.length, remove.length); i += ALLOWLIST_RPC_CHUNK) {
        await stub.changeAllowlist(add.slice(i, i + ALLOWLIST_RPC_CHUNK), remove.slice(i, i + ALLOWLIST_RPC_CHUNK));
      }
    }),
  );
}
