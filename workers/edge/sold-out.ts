// The sold-out fast path: once a goods' object has said SOLD_OUT (or a snapshot showed no
// stock), this isolate answers 410 on its own for SOLD_OUT_TRUST_MS. Then it lets exactly one
// request through to ask again, so a unit returned by a cancelled or timed-out order is sold
// again within a few seconds, while the flood behind a sold-out sale never reaches the object.

/** How long an isolate trusts a SOLD_OUT it has seen. */
export const SOLD_OUT_TRUST_MS = 2_000;

const soldOutUntil = new Map<number, number>();

/**
 * True when the isolate may answer SOLD_OUT without asking the object. When the trust has just
 * run out, the first caller gets false (it goes and asks) and the entry is extended, so the
 * callers right behind it still get true.
 */
export function knownSoldOut(goodsId: number, now = Date.now()): boolean {
  const until = soldOutUntil.get(goodsId);
  if (until === undefined) {
    return false;
  }
  if (now < until) {
    return true;
  }
  soldOutUntil.set(goodsId, now + SOLD_OUT_TRUST_MS);
  return false;
}

/** Whether a fresh SOLD_OUT is known, without taking the re-check turn (for routes that never reach the object). */
export function soldOutNow(goodsId: number, now = Date.now()): boolean {
  return (soldOutUntil.get(goodsId) ?? 0) > now;
}

/** Records that the object answered SOLD_OUT (or showed no stock left). */
export function markSoldOut(goodsId: number, now = Date.now()): void {
  soldOutUntil.set(goodsId, now + SOLD_OUT_TRUST_MS);
}

/** Records that the goods has stock (a reservation succeeded, or a unit came back here). */
export function markInStock(goodsId: number): void {
  soldOutUntil.delete(goodsId);
}

/** Feeds the fast path from what a stock object (or the mirror) just said about the goods' stock. */
export function noteStock(goodsId: number, stock: { remaining: number } | undefined): void {
  if (stock?.remaining === 0) {
    markSoldOut(goodsId);
  } else if (stock && stock.remaining > 0) {
    markInStock(goodsId);
  }
}
