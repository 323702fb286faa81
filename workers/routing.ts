// The one place that maps a goods to its Durable Objects. Callers never build ids
// themselves, so hot goods can later be sharded across several objects here alone.

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

/** The guard shard that owns `key`. */
export function edgeGuard(env: Env, key: string) {
  return guardShardByName(env, guardShardName(key));
}
