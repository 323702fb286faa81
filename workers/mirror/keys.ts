// The seed's Redis key layout, kept as is so tools and dashboards written for it still read
// it. The mirror is a read cache of the goods' Durable Object: every value written here is
// copied from the object's committed state, never decided here.

/** Remaining units, a decimal integer (the object's `remaining`, written absolutely). */
export const stockKey = (goodsId: number) => `seckill:stock:${goodsId}`;
/**
 * A sharded goods' stock per shard (field = shard index): each shard writes its own field and
 * the total under stockKey in one script, so the seed's key stays the goods' total.
 */
export const stockPartsKey = (goodsId: number) => `seckill:stock:${goodsId}:shards`;
/** Goods info hash: title, priceCents, totalStock, startAt, endAt, paused, ... */
export const goodsKey = (goodsId: number) => `seckill:goods:${goodsId}`;
/** Sale start, epoch milliseconds. */
export const startKey = (goodsId: number) => `seckill:start:${goodsId}`;
/** Sale end, epoch milliseconds. */
export const endKey = (goodsId: number) => `seckill:end:${goodsId}`;
/** Set of user ids holding a live reservation or order for the goods. */
export const usersKey = (goodsId: number) => `seckill:users:${goodsId}`;
/** Scratch key a full rebuild of the users set is written to before it is renamed over. */
export const usersRebuildKey = (goodsId: number) => `seckill:users:${goodsId}:rebuild`;
/**
 * A purchase request's answer, the seed's plain string (`QUEUED`, `SUCCESS:{orderId}`,
 * `FAIL:{reason}`), so a tool written for the seed reads it with GET.
 */
export const resultKey = (requestId: string) => `seckill:result:${requestId}`;
/**
 * The user id that owns a request, beside its answer (written in the same pipeline, with the
 * same lifetime), so the result route checks ownership without asking the object.
 */
export const resultOwnerKey = (requestId: string) => `seckill:result-owner:${requestId}`;

/**
 * A QUEUED answer lives briefly: if the final answer never reaches the mirror (a lost write),
 * the key expires and readers fall back to the object instead of seeing QUEUED forever.
 */
export const QUEUED_TTL_SECONDS = 30;
/** Final answers (SUCCESS / FAIL) are kept for a day, like the object's remembered rejections. */
export const FINAL_TTL_SECONDS = 24 * 3600;

export type ResultValue = 'QUEUED' | `SUCCESS:${string}` | `FAIL:${string}`;

export type ParsedResult = { status: 'QUEUED' } | { status: 'SUCCESS'; orderId: string } | { status: 'FAIL'; reason: string };

/** Reads the seed's result string; anything else is treated as absent. */
export function parseResult(value: unknown): ParsedResult | undefined {
  if (value === 'QUEUED') {
    return { status: 'QUEUED' };
  }
  if (typeof value !== 'string') {
    return undefined;
  }
  const m = value.match(/^(SUCCESS|FAIL):(.+)$/);
  if (!m?.[2]) {
    return undefined;
  }
  return m[1] === 'SUCCESS' ? { status: 'SUCCESS', orderId: m[2] } : { status: 'FAIL', reason: m[2] };
}
