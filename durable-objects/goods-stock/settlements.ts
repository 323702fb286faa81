import type { FailReason, Settlement } from '../../workers/kernel/contract';
import { log } from '../../workers/kernel/log';
import { sleep } from '../../workers/kernel/sleep';
import { count } from '../../workers/metrics/registry';
import type { MirrorSync } from '../../workers/mirror/sync';
import { refuseOne, releaseOne, returnRefused } from './ledger';
import type { Sale, StockStorage } from './storage';

// What Postgres made of reservations, applied inside the caller's synchronous transaction, and
// the Redis mirror told of each change (it writes after the commit).

export type SettleCounts = { confirmed: number; released: number; refused: number };

/**
 * Settlements applied in one transaction at most. A consumer batch settles up to 2,000 orders in
 * one call, and applying them all at once held the object for 25 ms (on this project's bench
 * machine), every reservation that arrived meanwhile waiting behind it; in parts of this size,
 * with the object free for others between them, none waits more than a few ms.
 */
export const SETTLE_PART = 250;

/**
 * Applies `settlements` SETTLE_PART at a time, each part by `applyPart` (its own transaction),
 * letting the object's other calls run between parts; the counts of all parts. Each part stands
 * on its own: settling is idempotent, so a call cut off between parts is settled again whole by
 * its retry.
 */
export async function settleInParts(settlements: Settlement[], applyPart: (part: Settlement[]) => SettleCounts): Promise<SettleCounts> {
  const counts: SettleCounts = { confirmed: 0, released: 0, refused: 0 };
  for (let at = 0; at < settlements.length; at += SETTLE_PART) {
    if (at > 0) {
      await sleep(0);
    }
    const part = applyPart(settlements.slice(at, at + SETTLE_PART));
    counts.confirmed += part.confirmed;
    counts.released += part.released;
    counts.refused += part.refused;
  }
  return counts;
}

/**
 * Gives a reservation's units back (cancelled, timed out, or refused by Postgres) and tells the
 * mirror; false when there was nothing (left) to release.
 */
export function releaseAndMirror(
  store: StockStorage,
  sale: Sale | undefined,
  mirror: MirrorSync,
  requestId: string,
  reason: FailReason,
  now: number,
): boolean {
  const released = sale && releaseOne(store, sale, requestId, reason, now);
  if (!sale || !released) {
    return false;
  }
  mirror.noteUser(released.userId, released.stillHolds);
  mirror.noteStock(sale.remaining);
  if (released.wasQueued) {
    mirror.noteResult({ requestId, userId: released.userId, value: `FAIL:${reason}` });
  }
  return true;
}

/**
 * Puts up to `units` held-aside units back on sale (reconciliation's decision) and tells the
 * mirror, only while the stock is still `expectedRemaining`, what the decision was made on;
 * otherwise returns 0 and the next run decides again. How many it returned.
 */
export function returnRefusedAndMirror(
  store: StockStorage,
  sale: Sale | undefined,
  mirror: MirrorSync,
  units: number,
  expectedRemaining: number,
): number {
  if (!sale || sale.remaining !== expectedRemaining) {
    return 0;
  }
  const returned = returnRefused(store, sale, units);
  if (returned > 0) {
    log.warn('goods_stock.refused_returned', { goodsId: sale.goodsId, units: returned, heldAside: sale.refused });
    mirror.noteStock(sale.remaining);
  }
  return returned;
}

/**
 * Confirmed orders, failures that give the units back, or a SOLD_OUT from Postgres, whose units
 * are held aside (see refuseOne). A settled reservation's outbox row goes: nothing sends it again.
 * Applied in order; each run of confirmations between the others goes in one statement.
 */
export function applySettlements(
  store: StockStorage,
  sale: Sale | undefined,
  mirror: MirrorSync,
  settlements: Settlement[],
  now: number,
): SettleCounts {
  const counts: SettleCounts = { confirmed: 0, released: 0, refused: 0 };
  // The run of confirmations so far: order id by request id.
  let run = new Map<string, string>();
  const confirmRun = () => {
    for (const { requestId, userId } of store.confirmMany([...run.keys()], now)) {
      counts.confirmed++;
      mirror.noteResult({ requestId, userId, value: `SUCCESS:${run.get(requestId)}` });
    }
    run = new Map();
  };
  for (const s of settlements) {
    if (s.ok) {
      run.set(s.requestId, s.orderId);
      continue;
    }
    confirmRun();
    if (s.reason === 'SOLD_OUT' && sale) {
      const shopper = refuseOne(store, sale, s.requestId, now);
      if (shopper !== undefined) {
        counts.refused++;
        mirror.noteUser(shopper.userId, shopper.stillHolds);
        mirror.noteResult({ requestId: s.requestId, userId: shopper.userId, value: 'FAIL:SOLD_OUT' });
      }
    } else if (releaseAndMirror(store, sale, mirror, s.requestId, s.reason, now)) {
      counts.released++;
    }
  }
  confirmRun();
  return counts;
}

/** Units Postgres refused (it had less stock than this object): an alarm for the operator, and a count. */
export function reportRefused(sale: Sale, units: number): void {
  log.error('goods_stock.units_refused', { goodsId: sale.goodsId, units, heldAside: sale.refused, remaining: sale.remaining });
  count('seckill_units_refused_total', { goods_id: String(sale.goodsId) }, units);
}
