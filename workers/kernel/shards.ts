import type { StockSnapshot as Snapshot } from './contract';

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

const minOf = (values: (number | null)[]): number | null => {
  const present = values.filter((v): v is number => v !== null);
  return present.length === 0 ? null : Math.min(...present);
};

/**
 * The goods' snapshot from its shards' (shard 0 first; a shard not made yet holds nothing):
 * units, backlog and counts add up, the oldest ages are the oldest of any shard, the settings
 * are shard 0's. Undefined when shard 0 has no sale yet.
 */
export function sumSnapshots(shards: (Snapshot | undefined)[]): Snapshot | undefined {
  const [first] = shards;
  if (!first) {
    return undefined;
  }
  const all = shards.filter((s): s is Snapshot => s !== undefined);
  if (all.length === 1) {
    return first;
  }
  const sum = (pick: (s: Snapshot) => number) => all.reduce((n, s) => n + pick(s), 0);
  const {
    goodsRemaining: _estimate,
    poolCalls: _calls,
    shard: _shard,
    free: _free,
    admittedQueued: _admittedQueued,
    admittedConfirmed: _admittedConfirmed,
    ...settings
  } = first;
  // The room's counts only when every shard keeps them (a shard of an earlier build does not).
  const counted = all.every((s) => s.admittedQueued !== undefined && s.admittedConfirmed !== undefined);
  return {
    ...settings,
    remaining: sum((s) => s.remaining),
    queued: sum((s) => s.queued),
    confirmed: sum((s) => s.confirmed),
    ...(counted ? { admittedQueued: sum((s) => s.admittedQueued ?? 0), admittedConfirmed: sum((s) => s.admittedConfirmed ?? 0) } : {}),
    refused: sum((s) => s.refused),
    outboxPending: sum((s) => s.outboxPending),
    reserveRequests: sum((s) => s.reserveRequests),
    heldResultReads: sum((s) => s.heldResultReads ?? 0),
    poolCalls: sum((s) => s.poolCalls ?? 0),
    oldestQueuedAt: minOf(all.map((s) => s.oldestQueuedAt)),
    oldestOutboxAt: minOf(all.map((s) => s.oldestOutboxAt)),
    mirrorStaleSince: minOf(all.map((s) => s.mirrorStaleSince)),
    shards: shards.length,
  };
}

/** Each shard's stock as the stats list it (a shard not made yet holds nothing). */
export function shardStocks(shards: (Snapshot | undefined)[]): ShardStock[] {
  return shards.map((s, shard) => ({ shard, remaining: s?.remaining ?? 0, queued: s?.queued ?? 0, confirmed: s?.confirmed ?? 0 }));
}
