import { type GoodsPlacement, LocationHint } from '../workers/kernel/contract';
import { watchedStub } from '../workers/kernel/object-calls';
import { fnv1a, shardOf } from '../workers/kernel/shards';

// The one place that maps a goods, a client key or a role to its Durable Object. Callers never
// build ids themselves; a hot goods' stock shards are picked here alone.
// A goods' objects are addressed with its placement (the goods row fits), so the location hint
// applies whichever call happens to create the object first.

/** The goods' location hint, when it holds a valid one. */
function hintOf(goods: GoodsPlacement): DurableObjectLocationHint | undefined {
  const parsed = LocationHint.safeParse(goods.locationHint);
  return parsed.success ? parsed.data : undefined;
}

/** The stub of `name`; dev builds can count and delay its calls (workers/kernel/object-calls.ts). */
function named<T extends Rpc.DurableObjectBranded | undefined>(ns: DurableObjectNamespace<T>, name: string, goods?: GoodsPlacement) {
  const id = ns.idFromName(name);
  const locationHint = goods ? hintOf(goods) : undefined;
  const stub = locationHint ? ns.get(id, { locationHint }) : ns.get(id);
  if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
    return watchedStub(name, stub);
  }
  return stub;
}

function placed<T extends Rpc.DurableObjectBranded | undefined>(ns: DurableObjectNamespace<T>, name: string, goods: GoodsPlacement) {
  return named(ns, name, goods);
}

/** The name of a goods' stock shard: shard 0 is the object a one-shard goods has always had. */
const stockName = (goodsId: number, shard: number) => (shard === 0 ? `goods:${goodsId}` : `goods:${goodsId}:shard:${shard}`);

/**
 * A stock shard of a goods (shard 0 by default): the one seam where a goods maps to its
 * objects. Shard 0 also holds the goods' pool (durable-objects/goods-stock/lease-pool.ts).
 */
export function goodsStock(env: Env, goods: GoodsPlacement, shard = 0) {
  return placed(env.GOODS_STOCK, stockName(goods.id, shard), goods);
}

/** How many stock shards a goods has (1 when its row does not say). */
export function stockShardCount(goods: GoodsPlacement): number {
  return Math.max(1, goods.shards ?? 1);
}

/** The stock shard a shopper always lands on: a stable hash of the user id. */
export function stockShardOf(goods: GoodsPlacement, userId: string): number {
  return shardOf(userId, stockShardCount(goods));
}

/** Every stock shard of a goods, shard 0 first. */
export function allStockShards(env: Env, goods: GoodsPlacement) {
  return Array.from({ length: stockShardCount(goods) }, (_, shard) => goodsStock(env, goods, shard));
}

/** Guard objects hold single-use markers and exact limits, sharded by key. */
export const GUARD_SHARDS = 128;

const shardName = (i: number) => `guard:${i}`;

/** The name of the guard shard that owns `key`. */
export function guardShardName(key: string): string {
  let h = 0;
  for (let i = 0; i < key.length; i++) {
    h = (h * 31 + key.charCodeAt(i)) | 0;
  }
  return shardName(Math.abs(h) % GUARD_SHARDS);
}

/** Every guard shard's name. */
export function guardShardNames(): string[] {
  return Array.from({ length: GUARD_SHARDS }, (_, i) => shardName(i));
}

/** The guard shard called `name` (see guardShardName). */
export function guardShardByName(env: Env, name: string) {
  return named(env.EDGE_GUARD, name);
}

/** The guard shard that owns a client key (`ip:…`, `user:…`, `challenge:…`). */
export function guardShard(env: Env, key: string) {
  return guardShardByName(env, guardShardName(key));
}

/** Every guard shard, for operator views that span them (listing bans). */
export function allGuardShards(env: Env) {
  return guardShardNames().map((name) => guardShardByName(env, name));
}

/** The one object holding the runtime limits. */
export function limitsStore(env: Env) {
  return named(env.LIMITS_STORE, 'limits');
}

/** Read-only copies of the runtime limits that the isolates read, so the store itself hears from a few copies, not the fleet. */
export const LIMITS_REPLICAS = 16;

/** Limits copy `i` (the isolates spread over them by name; the store pushes every change to each). */
export function limitsReplica(env: Env, i: number) {
  const n = ((Math.floor(i) % LIMITS_REPLICAS) + LIMITS_REPLICAS) % LIMITS_REPLICAS;
  return named(env.LIMITS_STORE, `limits:replica:${n}`);
}

/** Every limits copy (the store's pushes). */
export function allLimitsReplicas(env: Env) {
  return Array.from({ length: LIMITS_REPLICAS }, (_, i) => limitsReplica(env, i));
}

/** The EdgeGuard instance that held the runtime limits before the limits store (read once by the store). */
export function legacyLimitsHolder(env: Env) {
  return named(env.EDGE_GUARD, 'config:limits');
}

/** The admission gate of a goods, placed near the goods' stock object. */
export function admissionGate(env: Env, goods: GoodsPlacement) {
  return placed(env.ADMISSION_GATE, `gate:${goods.id}`, goods);
}

/**
 * Metrics totals are spread over this many objects: an isolate ships its deltas to one of them
 * (chosen once per isolate), and a scrape sums them all, so no object hears from the whole fleet.
 */
export const METRICS_SHARDS = 32;

/** Metrics shard `i` (0 keeps the name of the single object earlier builds used, so its totals carry on). */
export function metricsShard(env: Env, i: number) {
  const shard = ((Math.floor(i) % METRICS_SHARDS) + METRICS_SHARDS) % METRICS_SHARDS;
  return named(env.METRICS, shard === 0 ? 'metrics' : `metrics:${shard}`);
}

/** Every metrics shard, for the scrape that sums them. */
export function allMetricsShards(env: Env) {
  return Array.from({ length: METRICS_SHARDS }, (_, i) => metricsShard(env, i));
}

// The waiting room (durable-objects/waiting-room/): per goods, `queue.shards` (ROOM_SHARDS when
// unset) shard objects that shoppers talk to, and one coordinator that only the shards talk to.
// One class plays both roles; the name says which.

/** The shard of a room of `shards` a shopper always lands on: FNV-1a of the user id. */
export function roomShardOf(userId: string, shards: number): number {
  return fnv1a(userId) % shards;
}

/** Shard `shard` of a goods' waiting room, placed near the goods' stock object. */
export function roomShard(env: Env, goods: GoodsPlacement, shard: number) {
  return placed(env.WAITING_ROOM, `room:${goods.id}:${shard}`, goods);
}

/** The coordinator of a goods' waiting room (only the room's shards and the stats call it). */
export function roomHub(env: Env, goods: GoodsPlacement) {
  return placed(env.WAITING_ROOM, `room:${goods.id}:hub`, goods);
}
