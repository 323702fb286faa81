import { findPlacements } from '../../db/goods';
import type { SqlExecutor } from '../../db/orders';
import type { GoodsPlacement } from '../kernel/contract';

// Where each goods' objects live, for the callers that know a goods only by its id (queue
// messages, orders). A goods' location hint is fixed when it is created, so a placement once
// read is kept for the isolate's life; a busy consumer asks Postgres once per goods.

const known = new Map<number, GoodsPlacement>();
const KNOWN_MAX = 10_000;

/** The placement of a goods; one without a row (or a hint) gets none, which is still a valid address. */
export async function placementOf(db: SqlExecutor, goodsId: number): Promise<GoodsPlacement> {
  const cached = known.get(goodsId);
  if (cached) {
    return cached;
  }
  const [found] = await findPlacements(db, [goodsId]);
  if (!found) {
    return { id: goodsId, locationHint: null };
  }
  if (known.size >= KNOWN_MAX) {
    known.clear();
  }
  known.set(goodsId, found);
  return found;
}
