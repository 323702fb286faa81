import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import type { ReserveItem } from '../../workers/kernel/contract';
import { createGoods, eventually, settled, stockObject, watchStatements } from './helpers';

// Nothing on a hot goods' object may cost more as the sale grows: a snapshot (which goods pages
// read when the mirror is off) and an alarm with nothing due read a few rows, however many
// reservations the object holds. The counts come from counters kept with the rows.

let seq = 0;
function item(goodsId: number, userId: string, overrides: Partial<ReserveItem> = {}): ReserveItem {
  seq++;
  return {
    requestId: `${goodsId}.${String(seq).padStart(22, 'k')}`,
    userId,
    tokenId: `counter-token-${seq}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: false,
    ...overrides,
  };
}

/** A queue that takes every message and delivers none: the reservations stay unsettled. */
const blackHole = { sendBatch: async () => {} } as unknown as Queue;
const refusing = { sendBatch: () => Promise.reject(new Error('held for the test')) } as unknown as Queue;

function rebindQueue(goodsId: number, queue: Queue) {
  return runInDurableObject(stockObject(goodsId), (instance: GoodsStock) => {
    (instance as unknown as { env: Env }).env = { ...env, ORDER_QUEUE: queue };
  });
}

/** Rows read and written by the object's storage while `work` runs (every statement's cursor, summed), and its statements. */
function rowsBy<T>(
  goodsId: number,
  work: (instance: GoodsStock) => Promise<T> | T,
): Promise<{ rowsRead: number; rowsWritten: number; statements: number; value: T }> {
  return runInDurableObject(stockObject(goodsId), async (instance: GoodsStock) => {
    const watch = watchStatements((instance as unknown as { store: { sql: SqlStorage } }).store.sql);
    try {
      const value = await work(instance);
      // The mirror's bookkeeping (with the Redis mirror on) writes a row now and then, per sync, not per order.
      const own = watch.statements.filter((s) => !s.query.includes('mirror_state'));
      return {
        rowsRead: watch.statements.reduce((n, s) => n + s.cursor.rowsRead, 0),
        rowsWritten: own.reduce((n, s) => n + s.cursor.rowsWritten, 0),
        statements: watch.statements.length,
        value,
      };
    } finally {
      watch.stop();
    }
  });
}

/** A goods of `stock` units whose object holds `count` accepted reservations, none of them sent on. */
async function heldReservations(stock: number, count: number, prefix: string) {
  const { goodsId, totalStock } = await createGoods({ stock });
  const stub = stockObject(goodsId);
  await rebindQueue(goodsId, blackHole);
  const items = Array.from({ length: count }, (_, i) => item(goodsId, `${prefix}-${i}`));
  for (let i = 0; i < items.length; i += 100) {
    expect((await stub.reserveMany(goodsId, items.slice(i, i + 100))).every((o) => o.ok)).toBe(true);
  }
  return { goodsId, totalStock, stub, items };
}

async function reserveMany(goodsId: number, users: string[], overrides: (user: string) => Partial<ReserveItem> = () => ({})) {
  const stub = stockObject(goodsId);
  for (let i = 0; i < users.length; i += 100) {
    const outcomes = await stub.reserveMany(
      goodsId,
      users.slice(i, i + 100).map((u) => item(goodsId, u, overrides(u))),
    );
    expect(outcomes.every((o) => o.ok)).toBe(true);
  }
}

/** The counts the snapshot reports, recounted from every row. */
function recount(goodsId: number) {
  return runInDurableObject(stockObject(goodsId), (_i, state) => {
    const sql = state.storage.sql;
    const one = (q: string) => sql.exec<{ n: number }>(q).one().n;
    return {
      queued: one("SELECT count(*) AS n FROM reservation WHERE status = 'QUEUED' AND released = 0"),
      confirmed: one("SELECT count(*) AS n FROM reservation WHERE status = 'SUCCESS' AND released = 0"),
      admittedQueued: one("SELECT count(*) AS n FROM reservation WHERE status = 'QUEUED' AND released = 0 AND admitted = 1"),
      admittedConfirmed: one("SELECT count(*) AS n FROM reservation WHERE status = 'SUCCESS' AND released = 0 AND admitted = 1"),
      holders: one('SELECT count(*) AS n FROM holder'),
      outboxPending: one('SELECT count(*) AS n FROM outbox WHERE sends = 0'),
      outboxRows: one('SELECT count(*) AS n FROM outbox'),
      oldestQueuedAt: sql
        .exec<{ at: number | null }>("SELECT min(created_at) AS at FROM reservation WHERE status = 'QUEUED' AND released = 0")
        .one().at,
    };
  });
}

describe('the goods object counts without scanning', () => {
  it('reads the same few rows for a snapshot with 10 reservations as with 600', async () => {
    const { goodsId } = await createGoods({ stock: 1000 });
    await rebindQueue(goodsId, blackHole);
    await reserveMany(
      goodsId,
      Array.from({ length: 10 }, (_, i) => `small-${i}`),
    );
    const small = await rowsBy(goodsId, (instance) => instance.snapshot());
    await reserveMany(
      goodsId,
      Array.from({ length: 590 }, (_, i) => `large-${i}`),
    );
    const large = await rowsBy(goodsId, (instance) => instance.snapshot());
    expect(large.value).toMatchObject({ queued: 600, remaining: 400 });
    expect(small.rowsRead).toBeLessThanOrEqual(4);
    expect(large.rowsRead).toBe(small.rowsRead);

    // The alarm with nothing due (every row was sent and waits minutes for its resend) reads
    // what is due, not the 600 rows waiting. With the Redis mirror on, a write of it that failed
    // (a slow Redis) is due too, and its retry is a full rewrite that reads every holder: wait
    // for the mirror to be current as well.
    await eventually(async () => {
      const s = await stockObject(goodsId).snapshot();
      return s?.outboxPending === 0 && s.mirrorStaleSince === null ? true : undefined;
    });
    const alarm = await rowsBy(goodsId, (instance) => instance.alarm());
    expect(alarm.rowsRead).toBeLessThanOrEqual(10);
  });

  it('writes about 21 SQLite rows an order over its life, and 3 for a shopper refused sold out', async () => {
    // Rows written are what Cloudflare bills an object's storage by (an index entry is a row):
    // docs/deploying.md's cost of a sale counts with these figures.
    const { goodsId } = await createGoods({ stock: 100 });
    await rebindQueue(goodsId, { sendBatch: async () => {} } as unknown as Queue);
    const stub = stockObject(goodsId);
    const items = Array.from({ length: 100 }, (_, i) => item(goodsId, `life-${i}`));
    const reserved = await rowsBy(goodsId, (instance) => instance.reserveMany(goodsId, items));
    expect(reserved.value.every((o) => o.ok)).toBe(true);
    // The outbox's send (the alarm's flush, here at once), the consumer's settlement, and a
    // timeout for a tenth of them (their units back on sale).
    const sent = await rowsBy(goodsId, (instance) => (instance as unknown as { outbox: { flush(): Promise<void> } }).outbox.flush());
    const settledRows = await rowsBy(goodsId, (instance) =>
      instance.settle(items.map((i) => ({ requestId: i.requestId, ok: true as const, orderId: `order-${i.requestId}` }))),
    );
    const timedOut = await rowsBy(goodsId, async (instance) => {
      for (const i of items.slice(0, 10)) {
        await instance.release(i.requestId, 'CLOSED_TIMEOUT');
      }
    });
    const perOrder = {
      reserve: reserved.rowsWritten / 100,
      send: sent.rowsWritten / 100,
      settle: settledRows.rowsWritten / 100,
      timeout: timedOut.rowsWritten / 10,
    };
    expect(perOrder.reserve + perOrder.send + perOrder.settle).toBeLessThanOrEqual(21.1);
    expect(perOrder.timeout).toBeLessThanOrEqual(6);
    // Sold out: a shopper the object refuses spends their purchase token (its row and two index
    // entries) and leaves no reservation row.
    const refill = await stub.reserveMany(
      goodsId,
      Array.from({ length: 10 }, (_, i) => item(goodsId, `refill-${i}`)),
    );
    expect(refill.every((o) => o.ok)).toBe(true);
    const refused = await rowsBy(goodsId, (instance) =>
      instance.reserveMany(
        goodsId,
        Array.from({ length: 50 }, (_, i) => item(goodsId, `late-${i}`)),
      ),
    );
    expect(refused.value.every((o) => !o.ok && o.reason === 'SOLD_OUT')).toBe(true);
    expect(refused.rowsWritten).toBeLessThanOrEqual(3 * 50);
  });

  it('applies a batch of settlements in order, a run of 200 confirmations in two statements', async () => {
    const { goodsId, totalStock, stub, items } = await heldReservations(300, 205, 'settle');
    const ids = items.map((i) => i.requestId);
    const [a, b, c, d, e] = ids.slice(200) as [string, string, string, string, string];
    const run = ids.slice(0, 200).map((requestId) => ({ requestId, ok: true as const, orderId: `order-${requestId}` }));
    const settled = await rowsBy(goodsId, (instance) => instance.settle(run));
    expect(settled.value).toEqual({ confirmed: 200, released: 0, refused: 0 });
    expect(settled.statements).toBeLessThanOrEqual(6);

    // In order: a confirmed then timed out (its order stays SUCCESS, its unit comes back); b
    // timed out first, so its late confirmation confirms nothing; c twice is one confirmation;
    // d refused by Postgres; e confirmed after the others.
    const counts = await stub.settle([
      { requestId: a, ok: true, orderId: 'order-a' },
      { requestId: a, ok: false, reason: 'CLOSED_TIMEOUT' },
      { requestId: b, ok: false, reason: 'CLOSED_TIMEOUT' },
      { requestId: b, ok: true, orderId: 'order-b' },
      { requestId: c, ok: true, orderId: 'order-c' },
      { requestId: c, ok: true, orderId: 'order-c' },
      { requestId: d, ok: false, reason: 'SOLD_OUT' },
      { requestId: e, ok: true, orderId: 'order-e' },
    ]);
    expect(counts).toEqual({ confirmed: 3, released: 2, refused: 1 });
    const status = await runInDurableObject(stub, (_i, state) =>
      Object.fromEntries(
        state.storage.sql
          .exec<{ request_id: string; status: string; released: number }>(
            'SELECT request_id, status, released FROM reservation WHERE request_id IN (?, ?, ?, ?, ?)',
            a,
            b,
            c,
            d,
            e,
          )
          .toArray()
          .map((r) => [r.request_id, `${r.status}/${r.released}`]),
      ),
    );
    expect(status).toEqual({ [a]: 'SUCCESS/1', [b]: 'FAIL/1', [c]: 'SUCCESS/0', [d]: 'FAIL/1', [e]: 'SUCCESS/0' });
    const snapshot = await stub.snapshot();
    expect(await recount(goodsId)).toMatchObject({ queued: 0, confirmed: 202, outboxRows: 0 });
    expect(snapshot).toMatchObject({ queued: 0, confirmed: 202, refused: 1 });
    expect((snapshot?.remaining ?? 0) + (snapshot?.refused ?? 0) + 202).toBe(totalStock);
  });

  it('settles a consumer batch in parts, a reservation that arrives meanwhile taken between them', async () => {
    const { goodsId, totalStock, stub, items } = await heldReservations(1_100, 1_000, 'part');
    const run = items.map(({ requestId }) => ({ requestId, ok: true as const, orderId: `order-${requestId}` }));
    const late = item(goodsId, 'part-late');
    await runInDurableObject(stub, async (instance: GoodsStock) => {
      const seen: string[] = [];
      const settling = instance.settle(run).then((counts) => {
        seen.push('settled');
        return counts;
      });
      // A call that comes while the settlement runs: the object's next task. It goes in between
      // the parts; a settlement in one piece would be through before it started.
      let reserving: Promise<unknown> | undefined;
      setTimeout(() => {
        seen.push('reservation');
        reserving = instance.reserveMany(goodsId, [late]);
      }, 0);
      expect(await settling).toEqual({ confirmed: 1_000, released: 0, refused: 0 });
      expect(await reserving).toMatchObject([{ ok: true, requestId: late.requestId }]);
      expect(seen).toEqual(['reservation', 'settled']);
    });
    expect(await recount(goodsId)).toMatchObject({ queued: 1, confirmed: 1_000 });
    expect((await stub.snapshot())?.remaining).toBe(totalStock - 1_001);
  });

  it('keeps counts that agree with a full recount after accepts, settles, releases, refusals and rejections', async () => {
    const { goodsId, totalStock } = await createGoods({ stock: 12 });
    const stub = stockObject(goodsId);
    // Six become orders through the real queue and consumer, three of them of shoppers the
    // waiting room let in.
    await reserveMany(
      goodsId,
      Array.from({ length: 6 }, (_, i) => `mix-${i}`),
      (u) => (Number(u.slice(-1)) % 2 === 0 ? { admitted: true } : {}),
    );
    await settled(goodsId);
    // One is cancelled: its unit comes back.
    const [firstHolder] = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql.exec<{ request_id: string }>("SELECT request_id FROM reservation WHERE status = 'SUCCESS' LIMIT 1").toArray(),
    );
    expect(await stub.release(firstHolder?.request_id ?? '', 'CANCELLED')).toMatchObject({ released: true });
    // Three more wait, one of them never sent; then Postgres refuses one and another is released.
    await rebindQueue(goodsId, blackHole);
    const waiting = [
      item(goodsId, 'wait-a', { admitted: true }),
      item(goodsId, 'wait-b', { admitted: true }),
      item(goodsId, 'wait-c', { keyed: true, admitted: true }),
    ];
    expect((await stub.reserveMany(goodsId, waiting)).every((o) => o.ok)).toBe(true);
    // Their send goes a few milliseconds after the call (coalesced with the next calls'): the
    // black hole takes it before the queue starts refusing.
    await eventually(async () => ((await stub.snapshot())?.outboxPending === 0 ? true : undefined));
    await rebindQueue(goodsId, refusing);
    expect((await stub.reserveMany(goodsId, [item(goodsId, 'unsent')]))[0]).toMatchObject({ ok: true });
    expect(await stub.settle([{ requestId: waiting[0]?.requestId ?? '', ok: false, reason: 'SOLD_OUT' }])).toMatchObject({ refused: 1 });
    expect(await stub.release(waiting[1]?.requestId ?? '', 'CLOSED_TIMEOUT')).toMatchObject({ released: true });
    // Rejections: a second purchase (remembered, keyed), a spent token, an invalid token (keyed).
    const again = await stub.reserveMany(goodsId, [
      item(goodsId, 'mix-1', { keyed: true }),
      item(goodsId, 'wait-c', { tokenId: `counter-token-${seq}` }),
      item(goodsId, 'forged', { keyed: true, tokenExpiresAt: Date.now() - 1 }),
    ]);
    expect(again.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['ALREADY_PURCHASED', 'TOKEN_INVALID', 'TOKEN_INVALID']);

    const snapshot = await stub.snapshot();
    const counted = await recount(goodsId);
    expect(snapshot).toMatchObject({
      queued: counted.queued,
      confirmed: counted.confirmed,
      admittedQueued: counted.admittedQueued,
      admittedConfirmed: counted.admittedConfirmed,
      outboxPending: counted.outboxPending,
      oldestQueuedAt: counted.oldestQueuedAt,
      refused: 1,
    });
    expect(counted).toMatchObject({
      queued: 2,
      admittedQueued: 1,
      confirmed: 5,
      // mix-0, the first by request id and one of the room's shoppers, was the one cancelled.
      admittedConfirmed: 2,
      holders: 7,
      outboxPending: 1,
      outboxRows: 2,
    });
    // Every unit is for sale, held aside, or held by a reservation.
    expect((snapshot?.remaining ?? 0) + (snapshot?.refused ?? 0) + counted.queued + counted.confirmed).toBe(totalStock);
    const holders = await runInDurableObject(
      stub,
      (instance: GoodsStock) => (instance as unknown as { store: { tally(): { holders: number } } }).store.tally().holders,
    );
    expect(holders).toBe(counted.holders);
    // The alarm still has the unsent row to retry: it is due, the counters hold afterwards.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec('UPDATE outbox SET next_at = 0 WHERE sends = 0');
    });
    await rebindQueue(goodsId, blackHole);
    // On a busy machine the refused send's own retry can be under way when the test runs the alarm:
    // run it until the row has gone (an alarm that never comes back for it still fails here).
    await eventually(async () => {
      await runDurableObjectAlarm(stub);
      return (await stub.snapshot())?.outboxPending === 0 ? true : undefined;
    });
    expect(await stub.snapshot()).toMatchObject({ outboxPending: 0, queued: 2 });
    expect(await recount(goodsId)).toMatchObject({ outboxPending: 0, queued: 2 });
  });
});
