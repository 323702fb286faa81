// The sold-out fast path: once a goods' object has said SOLD_OUT (or a snapshot showed no
// stock), this isolate answers 410 on its own for SOLD_OUT_TRUST_MS. Then it lets exactly one
// request through to ask again, so a unit returned by a cancelled or timed-out order is sold
// again within a few seconds, while the flood behind a sold-out sale never reaches the object.
// A SOLD_OUT the object replays to a retried key (that key's answer from before) does not
// count: units may have come back since.
//
// A request with an Idempotency-Key may be owed an earlier answer (a 202 its client never
// saw), so it passes the fast path only when the object has actually answered its key: the
// object's SOLD_OUT answer lists the keyed purchases it accepted in the last few minutes, kept
// here with the sold-out memory, and this isolate remembers the keyed requests it got an answer
// for itself. A fresh key on a spent token is answered 410 here like everyone else.

/** How long an isolate trusts a SOLD_OUT it has seen. */
export const SOLD_OUT_TRUST_MS = 2_000;
/** Keyed answers this isolate remembers (a bound on memory; the oldest go first). */
const ANSWERED_MAX = 20_000;

/** The keyed purchases a goods' object accepted recently, as its SOLD_OUT answer lists them. */
export type AcceptedKeyed = { ids: readonly string[]; truncated: boolean };

type SoldOut = {
  until: number;
  /** From the object's SOLD_OUT answer; undefined when the sell-out was seen elsewhere (a stock read). */
  accepted: AcceptedKeyed | undefined;
  acceptedSet?: Set<string>;
};

const soldOut = new Map<number, SoldOut>();
/** Keyed request id -> until when this isolate lets its retries through (token lifetime + grace). */
const answered = new Map<string, number>();

/**
 * True when the isolate may answer SOLD_OUT without asking the object. When the trust has just
 * run out, the first caller gets false (it goes and asks) and the entry is extended, so the
 * callers right behind it still get true.
 */
export function knownSoldOut(goodsId: number, now = Date.now()): boolean {
  const entry = soldOut.get(goodsId);
  if (entry === undefined) {
    return false;
  }
  if (now < entry.until) {
    return true;
  }
  entry.until = now + SOLD_OUT_TRUST_MS;
  return false;
}

/** Whether a fresh SOLD_OUT is known, without taking the re-check turn (for routes that never reach the object). */
export function soldOutNow(goodsId: number, now = Date.now()): boolean {
  return (soldOut.get(goodsId)?.until ?? 0) > now;
}

/**
 * Records that the object answered SOLD_OUT (with the keyed purchases it accepted recently),
 * or that a stock read showed none left (no list: keyed requests may still ask the object).
 */
export function markSoldOut(goodsId: number, now = Date.now(), accepted?: AcceptedKeyed): void {
  soldOut.set(goodsId, { until: now + SOLD_OUT_TRUST_MS, accepted });
}

/**
 * The object replayed a key's earlier SOLD_OUT: that tells the stock as it was then (units may
 * have come back since), so it neither marks the goods sold out nor keeps the re-check turn it
 * may have taken: the next request asks the object.
 */
export function recheckSoldOut(goodsId: number): void {
  const entry = soldOut.get(goodsId);
  if (entry) {
    entry.until = 0;
  }
}

/** Records that the goods has stock (a reservation succeeded, or a unit came back here). */
export function markInStock(goodsId: number): void {
  soldOut.delete(goodsId);
}

/** Feeds the fast path from what a stock object (or the mirror) just said about the goods' stock. */
export function noteStock(goodsId: number, stock: { remaining: number } | undefined): void {
  if (stock?.remaining === 0) {
    // Keep a list the object gave while the sell-out it came with is still trusted.
    const entry = soldOut.get(goodsId);
    markSoldOut(goodsId, Date.now(), entry && entry.until > Date.now() ? entry.accepted : undefined);
  } else if (stock && stock.remaining > 0) {
    markInStock(goodsId);
  }
}

/**
 * The `acceptedKeyed` list of an object's SOLD_OUT answer. An answer without one lists nothing
 * (the object sends it with every SOLD_OUT); anything malformed is treated as truncated, so
 * keyed retries ask the object rather than be refused on a list that cannot be read.
 */
export function acceptedKeyedOf(outcome: object): AcceptedKeyed {
  const ids: unknown = 'acceptedKeyed' in outcome ? outcome.acceptedKeyed : undefined;
  const truncated = 'acceptedKeyedTruncated' in outcome && outcome.acceptedKeyedTruncated === true;
  if (ids === undefined) {
    return { ids: [], truncated };
  }
  if (!Array.isArray(ids) || !ids.every((id): id is string => typeof id === 'string')) {
    return { ids: [], truncated: true };
  }
  return { ids, truncated };
}

/** Remembers that the object answered this keyed request, so its retries until `until` are let through. */
export function rememberKeyedAnswer(requestId: string, until: number, now = Date.now()): void {
  if (answered.size >= ANSWERED_MAX) {
    for (const [id, at] of answered) {
      if (at <= now) {
        answered.delete(id);
      }
    }
    // Still full: drop the oldest (a Map iterates in insertion order).
    for (const id of answered.keys()) {
      if (answered.size < ANSWERED_MAX) {
        break;
      }
      answered.delete(id);
    }
  }
  answered.delete(requestId);
  answered.set(requestId, until);
}

/**
 * Whether a keyed purchase may go past the sold-out fast path: the goods is not known to be
 * sold out (or this request takes the re-check turn), or the object has answered this key
 * (here, or in its list of recent keyed acceptances, or its list was cut short).
 */
export function keyedMayPassSoldOut(goodsId: number, requestId: string, now = Date.now()): boolean {
  return answeredHere(requestId, now) || !knownSoldOut(goodsId, now) || mayBeAccepted(goodsId, requestId);
}

/**
 * Whether a keyed purchase is refused SOLD_OUT now, without taking the re-check turn: a fresh
 * sell-out is known and the object has not answered this key. For an answer before the body is
 * read; false sends the request on to keyedMayPassSoldOut, which may take the turn.
 */
export function keyedRefusedNow(goodsId: number, requestId: string, now = Date.now()): boolean {
  return soldOutNow(goodsId, now) && !answeredHere(requestId, now) && !mayBeAccepted(goodsId, requestId);
}

/** Whether this isolate got an answer for the key from the object and lets its retries through. */
function answeredHere(requestId: string, now: number): boolean {
  const until = answered.get(requestId);
  if (until === undefined) {
    return false;
  }
  if (until > now) {
    return true;
  }
  answered.delete(requestId);
  return false;
}

/** Whether the goods' last SOLD_OUT lists the key among its recent keyed acceptances, or cannot say. */
function mayBeAccepted(goodsId: number, requestId: string): boolean {
  const entry = soldOut.get(goodsId);
  const accepted = entry?.accepted;
  if (!entry || !accepted || accepted.truncated) {
    return true;
  }
  entry.acceptedSet ??= new Set(accepted.ids);
  return entry.acceptedSet.has(requestId);
}

/** Forgets every sold-out memory and keyed answer (tests). */
export function clearSoldOutMemory(): void {
  soldOut.clear();
  answered.clear();
}
