import { goodsStock } from '../../durable-objects/routing';
import type { GoodsPlacement, ReserveItem, ReserveOutcome } from '../kernel/contract';
import { GroupCommit, type WaitUntil } from './group-commit';

/**
 * The edge's one way into a goods' stock object for purchases: group commit (see
 * group-commit.ts). The reservations this isolate makes for one goods while a call to its
 * object is on the way go together in the next `reserveMany` call, ONE SQLite transaction.
 */

/** Largest batch in one call (one transaction); bounded so one call stays short. */
export const MAX_BATCH = 128;
/** Batches of one goods in flight at once from one isolate. */
const MAX_IN_FLIGHT = 2;
/** A waiting request gives up (503 BUSY) after this long; a retry with its key is safe. */
const WAIT_LIMIT_MS = 10_000;

/** The first call of a batch is its sender's: its `env` makes the stub, in its own request. */
type Call = { env: Env; goods: GoodsPlacement; item: ReserveItem };

const reservations = new GroupCommit<Call, ReserveOutcome>({
  maxBatch: MAX_BATCH,
  maxInFlight: MAX_IN_FLIGHT,
  waitLimitMs: WAIT_LIMIT_MS,
  send: (_lane, calls) => {
    const [first] = calls;
    if (!first) {
      return Promise.resolve([]);
    }
    return goodsStock(first.env, first.goods).reserveMany(
      first.goods.id,
      calls.map((c) => c.item),
    );
  },
});

/** Reserves one unit for `item`, batched with whatever else this isolate is reserving. */
export function reserve(env: Env, goods: GoodsPlacement, item: ReserveItem, waitUntil?: WaitUntil): Promise<ReserveOutcome> {
  return reservations.run(String(goods.id), { env, goods, item }, waitUntil);
}
