// The consumer reads the order messages the goods' object writes without zod (orderMessageFast,
// orderPackFast), and leaves everything else to the schemas: what it reads must be exactly what
// the schemas give, and whatever the schemas refuse it must refuse too.
import { describe, expect, it } from 'vitest';
import { OrderMessage, OrderPack } from '../../workers/kernel/contract';
import { orderMessageFast, orderPackFast, parseOrderQueueMessage } from '../../workers/kernel/order-messages';

const ORDER: OrderMessage = {
  v: 1,
  kind: 'reserve',
  requestId: '42.0mibq4ktaabcdefghijklm',
  orderId: '42-17',
  orderNo: '20261204000420000017',
  userId: 'u-17@shop.test',
  goodsId: 42,
  activityId: 7,
  priceCents: 1999,
  payTimeoutSeconds: 900,
  reservedAt: 1_796_000_000_000,
};

const ODD_VALUES: unknown[] = [
  undefined,
  null,
  0,
  -1,
  1,
  1.5,
  63,
  64,
  100,
  101,
  2 ** 53,
  '',
  '1',
  'goods',
  'activity',
  'x'.repeat(65),
  true,
  [],
  {},
];

/** Each field of the order set to each odd value, and the optional ones set to valid values. */
function variants(): unknown[] {
  const out: unknown[] = [ORDER, { ...ORDER, shard: 3, quantity: 2, limitScope: 'activity', perUserLimit: 5, extra: 'dropped' }];
  for (const field of [...Object.keys(ORDER), 'shard', 'quantity', 'limitScope', 'perUserLimit']) {
    for (const value of ODD_VALUES) {
      out.push({ ...ORDER, [field]: value });
    }
  }
  out.push(
    { ...ORDER, requestId: '42.short' },
    { ...ORDER, orderId: '42_17' },
    { ...ORDER, userId: 'has space' },
    { ...ORDER, v: 2 },
    null,
    'text',
    [ORDER],
  );
  return out;
}

describe('order messages read without zod', () => {
  it('gives what OrderMessage gives for every message it reads, and reads the ones the object writes', () => {
    let read = 0;
    for (const message of variants()) {
      const quick = orderMessageFast(message);
      const schema = OrderMessage.safeParse(message);
      if (quick) {
        read++;
        expect(schema.success, JSON.stringify(message)).toBe(true);
        expect(quick).toStrictEqual(schema.data);
      }
    }
    expect(orderMessageFast(ORDER)).toStrictEqual(ORDER);
    expect(read).toBeGreaterThan(20);
  });

  it('reads a pack of one goods as OrderPack does, and leaves a mixed, empty or oversized pack to it', () => {
    const pack = (orders: unknown[], goodsId = 42) => ({ v: 1, kind: 'reserve-pack', goodsId, orders });
    const good = pack([ORDER, { ...ORDER, requestId: '42.0mibq4ktaabcdefghijkln', orderId: '42-18', shard: 1 }]);
    expect(orderPackFast(good)).toStrictEqual(OrderPack.parse(good).orders);
    for (const bad of [
      pack([]),
      pack([ORDER, { ...ORDER, goodsId: 43 }]),
      pack([ORDER], 43),
      pack([ORDER, { ...ORDER, priceCents: -1 }]),
      pack(Array.from({ length: 101 }, () => ORDER)),
      { ...good, v: 2 },
      { ...good, orders: 'none' },
    ]) {
      expect(orderPackFast(bad)).toBeUndefined();
      expect(parseOrderQueueMessage(bad)).toEqual(OrderPack.safeParse(bad).success ? OrderPack.parse(bad).orders : null);
    }
    expect(parseOrderQueueMessage(good)).toHaveLength(2);
    expect(parseOrderQueueMessage(ORDER)).toStrictEqual([ORDER]);
    expect(parseOrderQueueMessage({ ...ORDER, userId: '' })).toBeNull();
  });
});
