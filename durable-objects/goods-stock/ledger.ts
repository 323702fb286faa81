import type { FailReason, OrderMessage, ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';
import { SHARD_SEQ_SPAN } from '../../workers/kernel/shards';
import type { BatchWrites, ReserveStore } from './reserve-store';
import { decide, orderNumber, quantityOf, type ReservationView } from './rules';
import type { Sale, StockStorage } from './storage';

// Applying the rules' decisions to storage, inside a synchronous transaction (a reservation
// batch's is commitReservations). The in-memory sale moves with the rows; the caller writes
// its counters once per batch.

/** A batch's one synchronous transaction (reserveBatch, and the stock row when it took units). */
export function commitReservations(
  storage: DurableObjectStorage,
  rows: { reservations: ReserveStore; stock: StockStorage },
  sale: Sale,
  items: ReserveItem[],
  soldOutKnown: boolean,
) {
  const now = Date.now();
  return storage.transactionSync(() => {
    const outcomes = reserveBatch(rows.reservations, sale, items, now, soldOutKnown);
    const accepted = outcomes.filter((o) => o.ok && !o.replay).length;
    if (accepted > 0) {
      rows.stock.saveStock(sale);
    }
    return { sale, now, outcomes, accepted };
  });
}

/**
 * A batch of reservations, decided in arrival order as if one at a time: each decision sees
 * what the ones before it in the batch wrote (a spent token, a shopper's units, a keyed answer),
 * but the rows are read once up front and written once at the end (reserve-store.ts). Runs
 * inside the caller's transaction; the in-memory sale moves with the decisions.
 *
 * `soldOutKnown` false: the shard is short after asks that could not reach every unit of the
 * goods, so a shopper its stock cannot cover is told BUSY (retry), with the token unspent and
 * nothing kept for the key, rather than SOLD_OUT.
 */
export function reserveBatch(store: ReserveStore, sale: Sale, items: ReserveItem[], now: number, soldOutKnown = true): ReserveOutcome[] {
  const read = store.read(items, sale.eligibility === 'allowlist');
  const writes: BatchWrites = { spentTokens: [], reservations: [], holders: [], outbox: [] };
  const view: ReservationView = {
    sale,
    prior: (id) => read.priors.get(id),
    tokenUsed: (t) => read.usedTokens.has(t),
    userUnits: (u) => read.units.get(u) ?? 0,
    allowed: (u) => read.allowed.has(u),
  };
  const spend = (item: ReserveItem) => {
    if (!read.usedTokens.has(item.tokenId)) {
      read.usedTokens.add(item.tokenId);
      writes.spentTokens.push(item);
    }
  };
  const outcomes = items.map((item): ReserveOutcome => {
    const decision = decide(view, item, now);
    if (decision.kind === 'replay') {
      return decision.orderId
        ? { ok: true, requestId: item.requestId, orderId: decision.orderId, replay: true }
        : { ok: false, requestId: item.requestId, reason: decision.reason ?? 'BUSY', replay: true };
    }
    if (decision.kind === 'reject' && decision.reason === 'SOLD_OUT' && !soldOutKnown) {
      return { ok: false, requestId: item.requestId, reason: 'BUSY', replay: false };
    }
    if (decision.kind === 'reject') {
      if (decision.spendToken) {
        spend(item);
      }
      // An invalid token proves nothing about the shopper and costs no write: a retry with the same
      // key and token is refused the same way, and a flood of forged tokens cannot fill storage.
      if (item.keyed && decision.reason !== 'TOKEN_INVALID') {
        writes.reservations.push({
          requestId: item.requestId,
          userId: item.userId,
          orderId: null,
          reason: decision.reason,
          keyed: true,
          quantity: 1,
          admitted: false,
        });
        read.priors.set(item.requestId, { orderId: null, reason: decision.reason, released: true });
      }
      const left = decision.remaining === undefined ? {} : { remaining: decision.remaining };
      return { ok: false, requestId: item.requestId, reason: decision.reason, replay: false, ...left };
    }
    spend(item);
    const message = accept(sale, item, now);
    const quantity = message.quantity ?? 1;
    writes.reservations.push({
      requestId: item.requestId,
      userId: item.userId,
      orderId: message.orderId,
      reason: null,
      keyed: item.keyed,
      quantity,
      admitted: item.admitted === true,
    });
    writes.holders.push({ userId: item.userId, requestId: item.requestId, units: quantity });
    writes.outbox.push(message);
    read.units.set(item.userId, (read.units.get(item.userId) ?? 0) + quantity);
    if (item.keyed) {
      read.priors.set(item.requestId, { orderId: message.orderId, reason: null, released: false });
    }
    return { ok: true, requestId: item.requestId, orderId: message.orderId, replay: false };
  });
  store.write(writes, now);
  return outcomes;
}

/**
 * A stock shard's refusals of several units say how many the goods has left over all of its
 * shards (`goodsLeft`, asked only when there is such a refusal), not the shard's own: the
 * shopper may still buy that many, and the edge does not take the goods for sold out.
 */
export async function refusalsInGoodsUnits(
  items: ReserveItem[],
  outcomes: ReserveOutcome[],
  goodsLeft: () => Promise<number>,
): Promise<ReserveOutcome[]> {
  const whole = (o: ReserveOutcome, i: number) => !o.ok && !o.replay && o.reason === 'SOLD_OUT' && quantityOf(items[i] ?? {}) > 1;
  if (!outcomes.some(whole)) {
    return outcomes;
  }
  const left = await goodsLeft();
  return outcomes.map((o, i) => {
    if (o.ok || !whole(o, i)) {
      return o;
    }
    const { remaining: _own, ...rest } = o;
    return left > 0 ? { ...rest, remaining: left } : rest;
  });
}

/** Takes an accepted reservation's units from the sale; its order message. */
function accept(sale: Sale, item: ReserveItem, now: number): OrderMessage {
  const seq = sale.nextSeq++;
  const quantity = quantityOf(item);
  sale.remaining -= quantity;
  return orderMessage(sale, { ...item, quantity }, seq, now);
}

/** The order message of the reservation with sequence `seq`, accepted at `at`; the same whenever it is built. */
function orderMessage(sale: Sale, r: { requestId: string; userId: string; quantity: number }, seq: number, at: number): OrderMessage {
  // Fields beyond the first format only when they differ from its defaults: a one-unit,
  // per-goods order's message is what it always was.
  const rules = {
    ...(r.quantity !== 1 ? { quantity: r.quantity } : {}),
    ...(sale.limitScope !== 'goods' ? { limitScope: sale.limitScope } : {}),
    ...(sale.perUserLimit !== 1 ? { perUserLimit: sale.perUserLimit } : {}),
  };
  return {
    v: 1,
    kind: 'reserve',
    requestId: r.requestId,
    orderId: `${sale.goodsId}-${seq}`,
    orderNo: orderNumber(sale.goodsId, seq, at),
    userId: r.userId,
    goodsId: sale.goodsId,
    activityId: sale.activityId,
    priceCents: sale.priceCents,
    payTimeoutSeconds: sale.payTimeoutSeconds,
    reservedAt: at,
    ...rules,
    // A stock shard other than 0 numbers its orders from shard * SHARD_SEQ_SPAN (kernel/shards.ts).
    ...(seq > SHARD_SEQ_SPAN ? { shard: Math.floor(seq / SHARD_SEQ_SPAN) } : {}),
  };
}

/**
 * Gives back the outbox rows of unsettled reservations an older build deleted once the queue
 * took them, so they are sent again until they settle. Runs once, when such an object upgrades.
 */
export function restoreUnsettled(store: StockStorage, sale: Sale, now: number): number {
  const rows = store.unsettledWithoutOutbox();
  for (const r of rows) {
    const seq = Number(r.order_id.slice(r.order_id.indexOf('-') + 1));
    store.restoreOutbox(
      orderMessage(sale, { requestId: r.request_id, userId: r.user_id, quantity: r.quantity }, seq, r.created_at),
      r.created_at,
      now,
    );
  }
  return rows.length;
}

/** What a release gave back: whose units, whether it was still waiting for Postgres, and whether the shopper still holds some. */
export type Released = { userId: string; wasQueued: boolean; stillHolds: boolean };

/**
 * Gives a reservation's unit back (cancelled, timed out, or refused by Postgres). Idempotent:
 * undefined when there is nothing (left) to release.
 */
export function releaseOne(store: StockStorage, sale: Sale, requestId: string, reason: FailReason, now: number): Released | undefined {
  const row = store.reservation(requestId);
  if (!row || row.released === 1 || row.order_id === null) {
    return undefined;
  }
  const held = store.markReleased(row, reason, now);
  sale.remaining = Math.min(sale.totalStock, sale.remaining + row.quantity);
  store.saveRemaining(sale.remaining);
  return { userId: row.user_id, wasQueued: row.status === 'QUEUED', stillHolds: held > 0 };
}

/**
 * Postgres refused a queued reservation for want of stock (it holds less than this object): the
 * reservation fails SOLD_OUT and its shopper may try again, but the unit is held aside, not put
 * back on sale, or every next buyer would be accepted and refused the same way. Reconciliation
 * returns held units once Postgres has room. The refused shopper (and whether they still hold
 * units), or undefined when there was nothing queued to refuse.
 */
export function refuseOne(store: StockStorage, sale: Sale, requestId: string, now: number): Omit<Released, 'wasQueued'> | undefined {
  const row = store.reservation(requestId);
  if (!row || row.released === 1 || row.order_id === null || row.status !== 'QUEUED') {
    return undefined;
  }
  const held = store.markReleased(row, 'SOLD_OUT', now);
  sale.refused += row.quantity;
  store.saveRefused(sale);
  return { userId: row.user_id, stillHolds: held > 0 };
}

/** Puts up to `units` held-aside units back on sale; how many it returned. */
export function returnRefused(store: StockStorage, sale: Sale, units: number): number {
  const n = Math.max(0, Math.min(units, sale.refused, sale.totalStock - sale.remaining));
  if (n > 0) {
    sale.refused -= n;
    sale.remaining += n;
    store.saveRefused(sale);
  }
  return n;
}
