import { ORDER_ID, OrderMessage, OrderPack, PACK_ORDERS_MAX, REQUEST_ID, USER_ID } from './contract';

// Reading the order queue's messages. The schemas are contract.ts's; the goods' object writes
// every message in one shape, which is read here without zod (see orderMessageFast), and anything
// else goes to the schemas, which keep every refusal and its reasons.

/** The orders a message of the order queue carries, in order, or null when it is neither form. */
export function parseOrderQueueMessage(body: unknown): OrderMessage[] | null {
  const kind = typeof body === 'object' && body !== null && 'kind' in body ? body.kind : undefined;
  if (kind === 'reserve-pack') {
    const quick = orderPackFast(body);
    if (quick) {
      return quick;
    }
    const pack = OrderPack.safeParse(body);
    return pack.success ? pack.data.orders : null;
  }
  const quick = orderMessageFast(body);
  if (quick) {
    return [quick];
  }
  const order = OrderMessage.safeParse(body);
  return order.success ? [order.data] : null;
}

const isInt = (value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max;
const matches = (value: unknown, pattern: RegExp): value is string => typeof value === 'string' && pattern.test(value);

/**
 * OrderMessage's value for a message as the goods' object writes it, read without zod;
 * undefined for anything else, which the schema then reads or refuses with its reasons. A
 * consumer batch holds up to 2,000 orders, and workerd's zod checks each of their 15 fields in
 * its interpreter (it may not generate code): about 5 µs an order, in one stretch on the thread
 * that also answers shoppers.
 */
export function orderMessageFast(value: unknown): OrderMessage | undefined {
  if (typeof value !== 'object' || value === null) {
    return undefined;
  }
  const m = value as Record<keyof OrderMessage, unknown>;
  const ok =
    m.v === 1 &&
    m.kind === 'reserve' &&
    matches(m.requestId, REQUEST_ID) &&
    matches(m.orderId, ORDER_ID) &&
    typeof m.orderNo === 'string' &&
    m.orderNo.length >= 1 &&
    m.orderNo.length <= 64 &&
    matches(m.userId, USER_ID) &&
    isInt(m.goodsId, 1) &&
    isInt(m.activityId, Number.MIN_SAFE_INTEGER) &&
    isInt(m.priceCents, 0) &&
    isInt(m.payTimeoutSeconds, 1) &&
    isInt(m.reservedAt, Number.MIN_SAFE_INTEGER) &&
    (m.shard === undefined || isInt(m.shard, 0, 63)) &&
    (m.quantity === undefined || isInt(m.quantity, 1, 100)) &&
    (m.limitScope === undefined || m.limitScope === 'goods' || m.limitScope === 'activity') &&
    (m.perUserLimit === undefined || isInt(m.perUserLimit, 1, 100));
  if (!ok) {
    return undefined;
  }
  // As the schema gives it: its own fields only, an optional one wherever its key is (undefined too).
  const o = value as OrderMessage;
  const out: OrderMessage = {
    v: 1,
    kind: 'reserve',
    requestId: o.requestId,
    orderId: o.orderId,
    orderNo: o.orderNo,
    userId: o.userId,
    goodsId: o.goodsId,
    activityId: o.activityId,
    priceCents: o.priceCents,
    payTimeoutSeconds: o.payTimeoutSeconds,
    reservedAt: o.reservedAt,
  };
  if ('shard' in o) {
    out.shard = o.shard;
  }
  if ('quantity' in o) {
    out.quantity = o.quantity;
  }
  if ('limitScope' in o) {
    out.limitScope = o.limitScope;
  }
  if ('perUserLimit' in o) {
    out.perUserLimit = o.perUserLimit;
  }
  return out;
}

/** OrderPack's orders for a pack as the goods' object writes it, read without zod (see orderMessageFast). */
export function orderPackFast(value: unknown): OrderMessage[] | undefined {
  const p = value as { v?: unknown; kind?: unknown; goodsId?: unknown; orders?: unknown };
  if (p.v !== 1 || p.kind !== 'reserve-pack' || !isInt(p.goodsId, 1) || !Array.isArray(p.orders)) {
    return undefined;
  }
  if (p.orders.length < 1 || p.orders.length > PACK_ORDERS_MAX) {
    return undefined;
  }
  const orders: OrderMessage[] = [];
  for (const item of p.orders) {
    const order = orderMessageFast(item);
    if (!order || order.goodsId !== p.goodsId) {
      return undefined;
    }
    orders.push(order);
  }
  return orders;
}
