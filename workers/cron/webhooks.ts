import type { Db } from '../../db/client';
import { overdueDeliveries } from '../../db/webhooks';
import { enqueueDeliveries } from '../edge/webhooks';

/** A pending delivery this long past its due time has lost its queue message. */
export const DELIVERY_RESEND_GRACE_MS = 60_000;

/**
 * The webhooks' safety net, every minute: puts back on the queue the pending deliveries whose
 * message was lost (a failed send after the commit, a consumer that gave up, an isolate that
 * died mid-attempt). Returns how many it sent.
 */
export async function resendOverdueDeliveries(env: Env, db: Db, now: number): Promise<number> {
  const ids = await overdueDeliveries(db, now, DELIVERY_RESEND_GRACE_MS);
  await enqueueDeliveries(env, ids);
  return ids.length;
}
