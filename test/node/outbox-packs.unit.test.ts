// The goods' object sends its outbox as order packs: every due row goes, in order, each once,
// and no pack or sendBatch passes the queue's limits (100 messages and 256 KB a sendBatch,
// 128 KB a message), whatever the rows' sizes.
import { describe, expect, it } from 'vitest';
import { sendsOf } from '../../durable-objects/goods-stock/packs';
import { OrderPack, PACK_ORDERS_MAX } from '../../workers/kernel/contract';

type Row = { seq: number; body: string };

function rows(n: number, bodyBytes: (i: number) => number): Row[] {
  return Array.from({ length: n }, (_, i) => ({ seq: i + 1, body: 'x'.repeat(bodyBytes(i)) }));
}

function check(input: Row[]) {
  const sends = sendsOf(input);
  expect(sends.flatMap((s) => s.rows.map((r) => r.seq))).toEqual(input.map((r) => r.seq));
  for (const send of sends) {
    expect(send.packs.flat()).toEqual(send.rows);
    expect(send.packs.length).toBeGreaterThan(0);
    expect(send.packs.length).toBeLessThanOrEqual(100);
    const bytes = send.rows.reduce((n, r) => n + r.body.length, 0);
    expect(bytes + send.packs.length * 64).toBeLessThan(256 * 1024);
    for (const pack of send.packs) {
      expect(pack.length).toBeGreaterThan(0);
      expect(pack.length).toBeLessThanOrEqual(PACK_ORDERS_MAX);
      expect(pack.reduce((n, r) => n + r.body.length + 1, 64)).toBeLessThan(128 * 1024);
    }
  }
  return sends;
}

describe('order packs from the outbox', () => {
  it('sends nothing for no rows, and one pack for a few', () => {
    expect(sendsOf([])).toEqual([]);
    const sends = check(rows(7, () => 400));
    expect(sends).toHaveLength(1);
    expect(sends[0]?.packs.map((p) => p.length)).toEqual([7]);
  });

  it('fills packs up to their order count, and one sendBatch while the bytes allow', () => {
    const sends = check(rows(1000, () => 400));
    expect(sends.flatMap((s) => s.packs.map((p) => p.length))).toEqual(Array(10).fill(100));
    // 400 KB of bodies: more than one sendBatch can carry.
    expect(sends.length).toBeGreaterThan(1);
  });

  it('keeps packs and sendBatches within the byte limits for large rows', () => {
    check(rows(1000, (i) => 200 + ((i * 7919) % 2000)));
    const big = check(rows(50, () => 30_000));
    expect(big.flatMap((s) => s.packs).every((p) => p.length === 1)).toBe(true);
  });

  it('makes packs the consumer accepts: one goods, 1 to PACK_ORDERS_MAX orders', () => {
    const order = (n: number, goodsId = 5) => ({
      v: 1,
      kind: 'reserve',
      requestId: `${goodsId}.${String(n).padStart(22, 'p')}`,
      orderId: `${goodsId}-${n}`,
      orderNo: `SK-${n}`,
      userId: `u-${n}`,
      goodsId,
      activityId: 1,
      priceCents: 100,
      payTimeoutSeconds: 900,
      reservedAt: 1,
    });
    const pack = (orders: unknown[]) => ({ v: 1, kind: 'reserve-pack', goodsId: 5, orders });
    expect(OrderPack.safeParse(pack([order(1), order(2)])).success).toBe(true);
    expect(OrderPack.safeParse(pack([])).success).toBe(false);
    expect(OrderPack.safeParse(pack([order(1), order(2, 6)])).success).toBe(false);
    expect(OrderPack.safeParse(pack(Array.from({ length: PACK_ORDERS_MAX + 1 }, (_, i) => order(i + 1)))).success).toBe(false);
  });
});
