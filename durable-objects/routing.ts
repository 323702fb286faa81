// The one place that maps a goods, a client key or a role to its Durable Object. Callers never
// build ids themselves, so hot goods can later be sharded across several objects here alone.

/** The stock object of a goods. */
export function goodsStock(env: Env, goodsId: number, locationHint?: DurableObjectLocationHint) {
  const id = env.GOODS_STOCK.idFromName(`goods:${goodsId}`);
  return locationHint ? env.GOODS_STOCK.get(id, { locationHint }) : env.GOODS_STOCK.get(id);
}

/** Guard objects hold single-use markers and exact limits, sharded by key. */
export const GUARD_SHARDS = 16;

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
  return env.EDGE_GUARD.get(env.EDGE_GUARD.idFromName(name));
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
  return env.EDGE_GUARD.get(env.EDGE_GUARD.idFromName('config:limits'));
}

/** The admission gate of a goods, placed near the goods' stock object when it has a hint. */
export function admissionGate(env: Env, goodsId: number, locationHint?: DurableObjectLocationHint) {
  const id = env.EDGE_GUARD.idFromName(`gate:${goodsId}`);
  return locationHint ? env.EDGE_GUARD.get(id, { locationHint }) : env.EDGE_GUARD.get(id);
}

/** The one object that holds the metrics totals of every isolate. */
export function metricsHub(env: Env) {
  return env.METRICS.get(env.METRICS.idFromName('metrics'));
}
