// The one place that maps a goods to its Durable Objects. Callers never build ids
// themselves, so hot goods can later be sharded across several objects here alone.

/** The stock object of a goods. */
export function goodsStock(env: Env, goodsId: number, locationHint?: DurableObjectLocationHint) {
  const id = env.GOODS_STOCK.idFromName(`goods:${goodsId}`);
  return locationHint ? env.GOODS_STOCK.get(id, { locationHint }) : env.GOODS_STOCK.get(id);
}

/** Guard objects hold single-use markers and exact limits, sharded by key. */
export const GUARD_SHARDS = 16;

/** The name of the guard shard that owns `key`. */
export function guardShardName(key: string): string {
  let h = 0;
  for (let i = 0; i < key.length; i++) {
    h = (h * 31 + key.charCodeAt(i)) | 0;
  }
  return `guard:${Math.abs(h) % GUARD_SHARDS}`;
}

export function edgeGuard(env: Env, key: string) {
  return env.EDGE_GUARD.get(env.EDGE_GUARD.idFromName(guardShardName(key)));
}
