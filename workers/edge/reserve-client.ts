import { goodsStock, stockShardOf } from '../../durable-objects/routing';
import type { GoodsPlacement, ReserveItem, ReserveOutcome } from '../kernel/contract';
import { GroupCommit, type WaitUntil } from './group-commit';

/**
 * The edge's one way into a goods' stock objects for purchases: group commit (see
 * group-commit.ts). The reservations this isolate makes for one stock shard while a call to it
 * is on the way go together in the next `reserveMany` call, ONE SQLite transaction. A shopper
 * always lands on the same shard (a hash of the user id), so one lane per goods and shard, and
 * the lanes of one goods share its budget of MAX_IN_FLIGHT batches (group-commit.ts).
 */

/** Largest batch in one call (one transaction); bounded so one call stays short. */
export const MAX_BATCH = 128;
/** Batches of one goods in flight at once from one isolate. */
const MAX_IN_FLIGHT = 2;
/** A waiting request gives up (503 BUSY) after this long; a retry with its key is safe. */
const WAIT_LIMIT_MS = 10_000;

/** The first call of a batch is its sender's: its `env` makes the stub, in its own request. */
type Call = { env: Env; goods: GoodsPlacement; shard: number; item: ReserveItem };

const reservations = new GroupCommit<Call, ReserveOutcome>({
  maxBatch: MAX_BATCH,
  maxInFlight: MAX_IN_FLIGHT,
  waitLimitMs: WAIT_LIMIT_MS,
  groups: { of: (lane) => lane.slice(0, lane.indexOf(':')), maxInFlight: MAX_IN_FLIGHT },
  send: (_lane, calls) => {
    const [first] = calls;
    if (!first) {
      return Promise.resolve([]);
    }
    return goodsStock(first.env, first.goods, first.shard).reserveMany(
      first.goods.id,
      calls.map((c) => c.item),
      first.shard,
    );
  },
});

/** Reserves one unit for `item`, batched with whatever else this isolate is reserving. */
export function reserve(env: Env, goods: GoodsPlacement, item: ReserveItem, waitUntil?: WaitUntil): Promise<ReserveOutcome> {
  const shard = stockShardOf(goods, item.userId);
  return reservations.run(`${goods.id}:${shard}`, { env, goods, shard, item }, waitUntil);
}
