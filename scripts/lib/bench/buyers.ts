// Purchase requests for autocannon from shoppers the bench made, and the 202s they got.

import { timeOrderedKey } from '../../../workers/kernel/time-order.ts';
import type { PhaseRequest } from './cannon.ts';
import type { ReadyUser } from './mint.ts';

/** The purchase route as the Worker's metrics name it (its pattern, never the hidden path). */
export const PURCHASE_ROUTE = '/api/seckill/do/:path';

/** One purchase per shopper, in order; `used` says how many were sent. */
export function purchaseRequests(shoppers: ReadyUser[], goodsId: number, keyed: boolean) {
  let i = 0;
  return {
    next(): PhaseRequest {
      // Never reached: a phase sends at most as many requests as there are shoppers.
      const s = shoppers[Math.min(i++, shoppers.length - 1)];
      if (!s) {
        throw new Error('a purchase phase needs at least one shopper');
      }
      const headers: Record<string, string> = { authorization: `Bearer ${s.jwt}`, 'content-type': 'application/json' };
      if (keyed) {
        headers['idempotency-key'] = timeOrderedKey();
      }
      return { method: 'POST', path: `/api/seckill/do/${s.path}`, headers, body: JSON.stringify({ goodsId, token: s.token }) };
    },
    get used() {
      return i;
    },
  };
}

/** Collects the request ids of 202 answers. */
export function acceptedCollector(into: Set<string>) {
  return (status: number, body: string | undefined) => {
    if (status === 202) {
      const id = /"requestId":"([^"]+)"/.exec(body ?? '')?.[1];
      if (id) {
        into.add(id);
      }
    }
  };
}
