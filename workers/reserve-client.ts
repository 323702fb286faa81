import { goodsStock } from './routing';
import type { ReserveItem, ReserveOutcome } from './schemas';

/**
 * The edge's one way into a goods' stock object for purchases. Kept behind this function so
 * the transport (one RPC per request, or several requests of an isolate combined into one
 * `reserveMany`) can change without touching the routes.
 */
export async function reserve(
  env: Env,
  goodsId: number,
  item: ReserveItem,
  locationHint?: DurableObjectLocationHint,
): Promise<ReserveOutcome> {
  const [outcome] = await goodsStock(env, goodsId, locationHint).reserveMany(goodsId, [item]);
  if (!outcome) {
    throw new Error('reserveMany returned no outcome');
  }
  return outcome;
}
