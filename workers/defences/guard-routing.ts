import { edgeGuard, guardShardByName, guardShardNames } from '../routing';

// Which EdgeGuard instance does what. The class plays three roles, each in its own instances:
// key shards (single-use markers, rate windows, bans; see edgeGuard() in ../routing), the one
// record of runtime limits, and one admission gate per goods.

/** The EdgeGuard shard that owns a client key (`ip:…`, `user:…`). */
export function guardShard(env: Env, key: string) {
  return edgeGuard(env, key);
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

/** Every key shard, for operator views that span them (listing bans). Names match edgeGuard(). */
export function allGuardShards(env: Env) {
  return guardShardNames().map((name) => guardShardByName(env, name));
}
