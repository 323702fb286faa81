// Stock shards of a hot goods: which shard a shopper lands on, and which shard an order came
// from. Pure, so the edge, the objects, the consumer and the tools agree without a lookup.

/** Most shards one goods may have. */
export const MAX_STOCK_SHARDS = 64;

/**
 * Order sequences of shard k start at k * SHARD_SEQ_SPAN + 1, so order ids of different shards
 * never collide and shard 0 keeps the sequence a one-shard goods has always had. An order id's
 * shard is read back from its sequence (`{goodsId}-{seq}`).
 */
export const SHARD_SEQ_SPAN = 10_000_000_000;

/** 32-bit FNV-1a of a string: a stable, well-spread hash for picking shards. */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  }
  return h >>> 0;
}

/** The shard (0..shards-1) a user id always lands on. */
export function shardOf(userId: string, shards: number): number {
  return shards <= 1 ? 0 : fnv1a(userId) % shards;
}

/** The stock shard that made an order (`{goodsId}-{seq}`); 0 for anything else. */
export function shardOfOrderId(orderId: string): number {
  const seq = Number(orderId.slice(orderId.indexOf('-') + 1));
  return Number.isSafeInteger(seq) && seq > 0 ? Math.min(MAX_STOCK_SHARDS - 1, Math.floor(seq / SHARD_SEQ_SPAN)) : 0;
}

/** The first order sequence of shard `shard`. */
export function firstSeqOf(shard: number): number {
  return shard * SHARD_SEQ_SPAN + 1;
}

/**
 * The lease a shard holds at a time: half the stock spread over the shards, the other half
 * left in the pool for whoever sells fastest. At least one unit.
 */
export function leaseChunk(totalStock: number, shards: number): number {
  return Math.max(1, Math.ceil(totalStock / (2 * Math.max(1, shards))));
}

/** A stock figure per shard, as the stats report it. */
export type ShardStock = { shard: number; remaining: number; queued: number; confirmed: number };
