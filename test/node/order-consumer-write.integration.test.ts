// The order consumer's write (db/orders.ts writeOrders -> the Postgres function
// seckill_write_orders, migrations/0001 to 0006), statement by statement against a
// migrated database: new orders, redeliveries, a shopper's second order, the row-by-row
// fallback when Postgres has less stock, an unknown goods, and concurrent writers. Runs against
// the embedded PGlite, and also against a fresh database on TEST_DATABASE_URL's server when set.
import { randomBytes } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type WriteResult, writeOrders } from '../../db/orders';
import { startTestServices } from '../../scripts/lib/test-services.ts';
import type { OrderMessage } from '../../workers/kernel/contract';

const SERVER_URL = process.env.TEST_DATABASE_URL;
if (!SERVER_URL) {
  console.warn(
    'order-consumer-write.integration: the real-PostgreSQL half is skipped, set TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres to run it',
  );
}

type Services = Awaited<ReturnType<typeof startTestServices>>;

function writeSuite(label: string, start: () => Promise<Services>) {
  describe(`seckill_write_orders on ${label}`, () => {
    let services: Services;
    let pool: pg.Pool;
    let db: ReturnType<typeof drizzle>;
    const run = randomBytes(3).toString('hex');
    let seq = 0;

    beforeAll(async () => {
      services = await start();
      pool = new pg.Pool({ connectionString: services.databaseUrl, max: 4 });
      // The pool's connections close after pool.end() resolves, and the database is dropped
      // right after: a connection still closing then hears that the server hung up.
      pool.on('error', () => {});
      db = drizzle({ client: pool });
    });
    afterAll(async () => {
      await pool?.end();
      await services?.close();
    });

    async function goods(stock: number, totalStock = Math.max(stock, 10)): Promise<number> {
      const { rows } = await pool.query<{ id: string }>(
        `INSERT INTO seckill_goods (activity_id, title, price_cents, total_stock, stock, start_at, end_at)
         VALUES (7, 'Write test', 990, $1, $2, now() - interval '1 minute', now() + interval '1 hour') RETURNING id`,
        [totalStock, stock],
      );
      return Number(rows[0]?.id);
    }

    function message(goodsId: number, userId = `u-${run}-${++seq}`): OrderMessage {
      seq++;
      return {
        v: 1,
        kind: 'reserve',
        requestId: `${goodsId}.${run}${String(seq).padStart(16, '0')}`,
        orderId: `${goodsId}-${run}-${seq}`,
        orderNo: `SK${goodsId}${run}${seq}`,
        userId,
        goodsId,
        activityId: 7,
        priceCents: 990,
        payTimeoutSeconds: 600,
        reservedAt: 1_790_000_000_123 + seq,
      };
    }

    async function stockOf(goodsId: number): Promise<number> {
      const { rows } = await pool.query<{ stock: number }>('SELECT stock FROM seckill_goods WHERE id = $1', [goodsId]);
      return rows[0]?.stock ?? -1;
    }

    async function ordersOf(goodsId: number) {
      const { rows } = await pool.query<{ id: string; request_id: string; user_id: string; reserved_at: Date; pay_deadline: Date }>(
        'SELECT id, request_id, user_id, reserved_at, pay_deadline FROM seckill_order WHERE goods_id = $1 ORDER BY id',
        [goodsId],
      );
      return rows;
    }

    async function logOf(messages: OrderMessage[]) {
      const { rows } = await pool.query<{ message_id: string; status: number; detail: string }>(
        'SELECT message_id, status, detail FROM mq_consume_log WHERE message_id = ANY($1) ORDER BY message_id',
        [messages.map((m) => `order:${m.requestId}`)],
      );
      return rows;
    }

    const created = (m: OrderMessage): WriteResult => ({ requestId: m.requestId, ok: true, orderId: m.orderId, created: true });
    const existing = (m: OrderMessage, orderId = m.orderId): WriteResult => ({ requestId: m.requestId, ok: true, orderId, created: false });
    const failed = (m: OrderMessage, reason: 'SOLD_OUT' | 'ALREADY_PURCHASED'): WriteResult => ({
      requestId: m.requestId,
      ok: false,
      reason,
    });

    it('makes every order of a fresh batch, takes the stock once and logs each message', async () => {
      const goodsId = await goods(5);
      const batch = [message(goodsId), message(goodsId), message(goodsId)];
      const now = 1_790_000_100_000;
      expect(await writeOrders(db, goodsId, batch, now)).toEqual(batch.map(created));
      expect(await stockOf(goodsId)).toBe(2);
      const orders = await ordersOf(goodsId);
      expect(orders.map((o) => o.request_id).sort()).toEqual(batch.map((m) => m.requestId).sort());
      const first = orders.find((o) => o.id === batch[0]?.orderId);
      expect(first?.reserved_at.getTime()).toBe(batch[0]?.reservedAt);
      // The payment window starts when the order exists.
      expect(first?.pay_deadline.getTime()).toBe(now + 600_000);
      expect(await logOf(batch)).toEqual(
        batch
          .map((m) => ({ message_id: `order:${m.requestId}`, status: 0, detail: m.orderId }))
          .sort((a, b) => (a.message_id < b.message_id ? -1 : 1)),
      );
    });

    it('makes one order from a message delivered twice, in one batch or in two', async () => {
      const goodsId = await goods(5);
      const a = message(goodsId);
      expect(await writeOrders(db, goodsId, [a, a])).toEqual([created(a), created(a)]);
      expect(await writeOrders(db, goodsId, [a])).toEqual([existing(a)]);
      const b = message(goodsId);
      // A redelivery beside a new message: only the new one takes stock.
      expect(await writeOrders(db, goodsId, [a, b])).toEqual([existing(a), created(b)]);
      expect(await ordersOf(goodsId)).toHaveLength(2);
      expect(await stockOf(goodsId)).toBe(3);
    });

    it('reports the order made earlier when a redelivery carries other ids for the same request', async () => {
      const goodsId = await goods(5);
      const a = message(goodsId);
      await writeOrders(db, goodsId, [a]);
      const again: OrderMessage = { ...a, orderId: `${a.orderId}-other`, orderNo: `${a.orderNo}-other` };
      expect(await writeOrders(db, goodsId, [again])).toEqual([existing(again, a.orderId)]);
      expect(await stockOf(goodsId)).toBe(4);
    });

    it('refuses a second live order for a shopper without taking stock, and allows one after a cancel', async () => {
      const goodsId = await goods(5);
      const first = message(goodsId, `twice-${run}`);
      const second = message(goodsId, `twice-${run}`);
      const other = message(goodsId);
      expect(await writeOrders(db, goodsId, [first])).toEqual([created(first)]);
      expect(await writeOrders(db, goodsId, [second, other])).toEqual([failed(second, 'ALREADY_PURCHASED'), created(other)]);
      expect(await stockOf(goodsId)).toBe(3);
      expect(await logOf([second])).toEqual([{ message_id: `order:${second.requestId}`, status: 1, detail: 'ALREADY_PURCHASED' }]);
      await pool.query('UPDATE seckill_order SET status = 2 WHERE id = $1', [first.orderId]);
      const third = message(goodsId, `twice-${run}`);
      expect(await writeOrders(db, goodsId, [third])).toEqual([created(third)]);
    });

    it('falls back to row by row when Postgres has less stock: the first rows that fit land, the rest are SOLD_OUT', async () => {
      const goodsId = await goods(3, 10);
      const holder = message(goodsId, `holder-${run}`);
      await writeOrders(db, goodsId, [holder]);
      const [n1, n2, n3, n4] = [message(goodsId), message(goodsId), message(goodsId), message(goodsId)] as const;
      const secondForHolder = message(goodsId, `holder-${run}`);
      expect(await writeOrders(db, goodsId, [n1, holder, n2, secondForHolder, n3, n4])).toEqual([
        created(n1),
        existing(holder),
        created(n2),
        failed(secondForHolder, 'ALREADY_PURCHASED'),
        failed(n3, 'SOLD_OUT'),
        failed(n4, 'SOLD_OUT'),
      ]);
      expect(await stockOf(goodsId)).toBe(0);
      expect((await ordersOf(goodsId)).map((o) => o.id).sort()).toEqual([holder.orderId, n1.orderId, n2.orderId].sort());
      expect(await logOf([n3])).toEqual([{ message_id: `order:${n3.requestId}`, status: 1, detail: 'SOLD_OUT' }]);
    });

    it('answers SOLD_OUT to every new message when Postgres has no stock, and still finds redeliveries', async () => {
      const goodsId = await goods(1, 10);
      const a = message(goodsId);
      await writeOrders(db, goodsId, [a]);
      const [late1, late2] = [message(goodsId), message(goodsId)] as const;
      expect(await writeOrders(db, goodsId, [late1, late2, a])).toEqual([
        failed(late1, 'SOLD_OUT'),
        failed(late2, 'SOLD_OUT'),
        existing(a),
      ]);
      expect(await stockOf(goodsId)).toBe(0);
      expect(await ordersOf(goodsId)).toHaveLength(1);
    });

    it('keeps a refused request refused when its message comes again, even once stock is back', async () => {
      const goodsId = await goods(1, 10);
      const [first, late] = [message(goodsId), message(goodsId)] as const;
      expect(await writeOrders(db, goodsId, [first, late])).toEqual([created(first), failed(late, 'SOLD_OUT')]);
      // A shopper cancels: Postgres has a unit again. The refused request gave its unit back to
      // the sale when it was refused, so its redelivery must not become an order now.
      await pool.query('UPDATE seckill_order SET status = 2 WHERE id = $1', [first.orderId]);
      await pool.query('UPDATE seckill_goods SET stock = stock + 1 WHERE id = $1', [goodsId]);
      const fresh = message(goodsId);
      expect(await writeOrders(db, goodsId, [late, fresh])).toEqual([failed(late, 'SOLD_OUT'), created(fresh)]);
      expect(await writeOrders(db, goodsId, [late])).toEqual([failed(late, 'SOLD_OUT')]);
      expect(await stockOf(goodsId)).toBe(0);
      const holder = message(goodsId, `again-${run}`);
      const second = message(goodsId, `again-${run}`);
      await pool.query('UPDATE seckill_goods SET stock = 2 WHERE id = $1', [goodsId]);
      expect(await writeOrders(db, goodsId, [holder, second])).toEqual([created(holder), failed(second, 'ALREADY_PURCHASED')]);
      await pool.query('UPDATE seckill_order SET status = 2 WHERE id = $1', [holder.orderId]);
      expect(await writeOrders(db, goodsId, [second])).toEqual([failed(second, 'ALREADY_PURCHASED')]);
    });

    it('writes nothing at all for an unknown goods: the statement fails and can be retried', async () => {
      const bad = message(999_999_999);
      await expect(writeOrders(db, 999_999_999, [bad])).rejects.toMatchObject({ cause: { code: '23503' } });
      expect(await logOf([bad])).toEqual([]);
    });

    it('never oversells under concurrent writers with overlapping messages, and makes one order per request', async () => {
      const goodsId = await goods(50, 100);
      const all = Array.from({ length: 80 }, () => message(goodsId));
      // Three consumers, each with a window of the messages; neighbours overlap by 20.
      const windows = [all.slice(0, 40), all.slice(20, 60), all.slice(40, 80)];
      const results = (await Promise.all(windows.map((w) => writeOrders(db, goodsId, w)))).flat();
      expect(await stockOf(goodsId)).toBe(0);
      const orders = await ordersOf(goodsId);
      expect(orders).toHaveLength(50);
      expect(new Set(orders.map((o) => o.request_id)).size).toBe(50);
      // Every answer agrees with the database: ok means that very order exists.
      const byRequest = new Map(orders.map((o) => [o.request_id, o.id]));
      for (const r of results) {
        if (r.ok) {
          expect(byRequest.get(r.requestId)).toBe(r.orderId);
        } else {
          expect(r.reason).toBe('SOLD_OUT');
          expect(byRequest.has(r.requestId)).toBe(false);
        }
      }
      expect(results.filter((r) => r.ok && r.created)).toHaveLength(50);
    });

    it('takes its locks in one order, so two writers of the same messages in opposite orders never deadlock', async () => {
      // The function on its own (writeOrders would run it again after a deadlock): each pair
      // writes one set of messages, one writer in the queue's order and one reversed, as a
      // redelivery beside its original can arrive. Locks taken in input order meet in the middle.
      for (let pair = 0; pair < 8; pair++) {
        const goodsId = await goods(200, 200);
        const batch = Array.from({ length: 100 }, () => message(goodsId));
        const write = (messages: OrderMessage[]) =>
          pool.query('SELECT * FROM seckill_write_orders($1::bigint, $2::jsonb, now())', [goodsId, JSON.stringify(messages)]);
        const settled = await Promise.allSettled([write(batch), write([...batch].reverse())]);
        const codes = settled.flatMap((s) => (s.status === 'rejected' ? [(s.reason as { code?: string }).code] : []));
        expect(codes).toEqual([]);
        expect(await ordersOf(goodsId)).toHaveLength(100);
        expect(await stockOf(goodsId)).toBe(100);
      }
    });

    it('answers an empty batch without a statement', async () => {
      expect(await writeOrders(db, 1, [])).toEqual([]);
    });
  });
}

describe('embedded PostgreSQL (PGlite)', () => {
  writeSuite('PGlite', () => startTestServices());
});

describe.skipIf(!SERVER_URL)('real PostgreSQL (TEST_DATABASE_URL)', () => {
  writeSuite('a fresh database', () => startTestServices({ databaseUrl: SERVER_URL }));
});
