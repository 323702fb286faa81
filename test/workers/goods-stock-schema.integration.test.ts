import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { GoodsStock } from '../../durable-objects/goods-stock/index';
import { SCHEMA_VERSION } from '../../durable-objects/goods-stock/storage';
import type { ReserveItem } from '../../workers/kernel/contract';
import { createGoods, eventually, settled, stockObject } from './helpers';
import { createRulesGoods } from './rules-helpers';

/** A queue that refuses every send: the object's reservations wait for Postgres. */
const holdingQueue = { sendBatch: () => Promise.reject(new Error('held for the test')) } as unknown as Queue;

function item(goodsId: number, userId: string): ReserveItem {
  return {
    requestId: `${goodsId}.${userId.padEnd(22, 's')}`,
    userId,
    tokenId: `schema-token-${userId}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: false,
  };
}

/** Throws the object's instance away (storage stays) and returns a stub that makes a new one. */
async function restart(goodsId: number) {
  await runInDurableObject(stockObject(goodsId), (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
  return stockObject(goodsId);
}

/**
 * Waits until the object's mirror bookkeeping is at rest: its first write to Redis (with the
 * mirror on) ends by saving the bookkeeping, which would otherwise land over a test's edit.
 */
function mirrorAtRest(stub: ReturnType<typeof stockObject>): Promise<true> {
  return eventually(() =>
    runInDurableObject(stub, (_instance, state) => {
      const row = state.storage.sql.exec<{ stale_since: number | null }>('SELECT stale_since FROM mirror_state').toArray()[0];
      return row === undefined || row.stale_since === null;
    }),
  );
}

function storedVersion(stub: ReturnType<typeof stockObject>): Promise<number> {
  return runInDurableObject(
    stub,
    (_instance, state) => state.storage.sql.exec<{ value: number }>("SELECT value FROM meta WHERE key = 'schema'").one().value,
  );
}

describe('the goods object schema', () => {
  it('is at this build version for a new object', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    expect(SCHEMA_VERSION).toBe(6);
    expect(await storedVersion(stockObject(goodsId))).toBe(SCHEMA_VERSION);
  });

  it('opens an object an older build made: version 1, mirror_state created outside the gate', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    await mirrorAtRest(stockObject(goodsId));
    // Leave the storage as the older build did: schema version 1, and mirror_state as its mirror
    // made it on load, holding the title it kept.
    await runInDurableObject(stockObject(goodsId), (_instance, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE meta SET value = 1 WHERE key = 'schema'");
      sql.exec('DROP TABLE mirror_state');
      sql.exec('CREATE TABLE IF NOT EXISTS mirror_state (id INTEGER PRIMARY KEY CHECK (id = 1), title TEXT NOT NULL, stale_since INTEGER)');
      sql.exec("INSERT OR REPLACE INTO mirror_state (id, title, stale_since) VALUES (1, 'Kept title', NULL)");
    });
    const fresh = await restart(goodsId);
    expect((await fresh.snapshot())?.remaining).toBe(3);
    expect(await storedVersion(fresh)).toBe(SCHEMA_VERSION);
    const title = await runInDurableObject(
      fresh,
      (_instance, state) => state.storage.sql.exec<{ title: string }>('SELECT title FROM mirror_state').one().title,
    );
    expect(title).toBe('Kept title');
    const [outcome] = await fresh.reserveMany(goodsId, [item(goodsId, 'upgraded')]);
    expect(outcome).toMatchObject({ ok: true, replay: false });
  });

  it('opens a version 1 object that never had mirror_state', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    await mirrorAtRest(stockObject(goodsId));
    await runInDurableObject(stockObject(goodsId), (_instance, state) => {
      state.storage.sql.exec("UPDATE meta SET value = 1 WHERE key = 'schema'");
      state.storage.sql.exec('DROP TABLE mirror_state');
    });
    const fresh = await restart(goodsId);
    expect(await storedVersion(fresh)).toBe(SCHEMA_VERSION);
    const [outcome] = await fresh.reserveMany(goodsId, [item(goodsId, 'nomirror')]);
    expect(outcome).toMatchObject({ ok: true, replay: false });
    expect((await fresh.snapshot())?.remaining).toBe(1);
  });

  it('opens a version 2 object whose outbox forgot what it sent: the unsettled reservations are sent again', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    const stub = stockObject(goodsId);
    const lost = item(goodsId, 'forgotten');
    expect((await stub.reserveMany(goodsId, [lost]))[0]).toMatchObject({ ok: true });
    await settled(goodsId);
    const queued = item(goodsId, 'sentbefore');
    // Storage as version 2 left it: the reservation QUEUED, its outbox row deleted once the
    // queue took the message (which then got lost), no tally, no keyed column in use.
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE meta SET value = 2 WHERE key = 'schema'");
      for (const { name } of sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'trigger'").toArray()) {
        sql.exec(`DROP TRIGGER ${name}`);
      }
      sql.exec('DROP TABLE tally');
      sql.exec(
        "INSERT INTO reservation (request_id, user_id, order_id, status, created_at) VALUES (?, ?, ?, 'QUEUED', ?)",
        queued.requestId,
        queued.userId,
        `${goodsId}-2`,
        Date.now() - 60_000,
      );
      sql.exec('INSERT INTO holder (user_id, request_id) VALUES (?, ?)', queued.userId, queued.requestId);
      sql.exec('UPDATE sale SET remaining = remaining - 1, next_seq = next_seq + 1');
    });
    const fresh = await restart(goodsId);
    const snapshot = await fresh.snapshot();
    expect(snapshot).toMatchObject({ remaining: 2, queued: 1, confirmed: 1, outboxPending: 0 });
    expect(await storedVersion(fresh)).toBe(SCHEMA_VERSION);
    // The stock moved behind the mirror's back above (a real version 2 had written it): catch it up.
    await fresh.mirrorCheck(true);
    await runDurableObjectAlarm(fresh);
    const s = await settled(goodsId);
    expect(s).toMatchObject({ doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 2 } });
    expect(await fresh.result(queued.requestId)).toMatchObject({ status: 'SUCCESS', orderId: `${goodsId}-2` });
  });

  it('opens a version 4 object (sale rules, no stock shards yet): its sale and rules stay, it takes a shard place', async () => {
    const { goodsId } = await createRulesGoods({ stock: 3, perUserLimit: 2 });
    const stub = stockObject(goodsId);
    expect((await stub.reserveMany(goodsId, [{ ...item(goodsId, 'v4holder'), quantity: 2 }]))[0]).toMatchObject({ ok: true });
    await settled(goodsId);
    // Storage as version 4 left it: no lease tables.
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE meta SET value = 4 WHERE key = 'schema'");
      for (const table of ['lease_state', 'lease_grant', 'lease_reclaim', 'lease_report']) {
        sql.exec(`DROP TABLE ${table}`);
      }
    });
    const fresh = await restart(goodsId);
    expect(await fresh.snapshot()).toMatchObject({ remaining: 1 });
    expect(await storedVersion(fresh)).toBe(SCHEMA_VERSION);
    // The holder's two units still count against the limit of 2; another shopper buys the last one.
    const again = { ...item(goodsId, 'v4holder'), requestId: `${goodsId}.${'v4holder2'.padEnd(22, 's')}`, tokenId: 'schema-token-v4again' };
    expect((await fresh.reserveMany(goodsId, [again]))[0]).toMatchObject({ ok: false, reason: 'LIMIT_REACHED' });
    expect((await fresh.reserveMany(goodsId, [item(goodsId, 'v4other')]))[0]).toMatchObject({ ok: true });
    expect((await fresh.snapshot())?.remaining).toBe(0);
  });

  it('counts the reservations and orders of shoppers the waiting room let in, apart, and takes a released one back', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    const stub = stockObject(goodsId);
    // Waiting for Postgres first: the queue refuses the object's sends.
    const bindQueue = (queue: Queue) =>
      runInDurableObject(stub, (instance: GoodsStock) => {
        (instance as unknown as { env: Env }).env = { ...env, ORDER_QUEUE: queue };
      });
    await bindQueue(holdingQueue);
    const outcomes = await stub.reserveMany(goodsId, [
      { ...item(goodsId, 'let-in-1'), admitted: true },
      { ...item(goodsId, 'let-in-2'), admitted: true },
      item(goodsId, 'no-pass'),
    ]);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    expect(await stub.snapshot()).toMatchObject({ queued: 3, admittedQueued: 2, confirmed: 0, admittedConfirmed: 0 });
    await bindQueue(env.ORDER_QUEUE);
    await stub.redriveOutbox();
    await settled(goodsId);
    expect(await stub.snapshot()).toMatchObject({ queued: 0, admittedQueued: 0, confirmed: 3, admittedConfirmed: 2 });
    expect(await stub.release(item(goodsId, 'let-in-1').requestId, 'CANCELLED')).toMatchObject({ released: true });
    expect(await stub.release(item(goodsId, 'no-pass').requestId, 'CANCELLED')).toMatchObject({ released: true });
    expect(await stub.snapshot()).toMatchObject({ confirmed: 1, admittedConfirmed: 1 });
  });

  it('opens a version 5 object: its orders, made before the count, are not counted as let in; new ones are', async () => {
    const { goodsId } = await createGoods({ stock: 4 });
    const stub = stockObject(goodsId);
    expect((await stub.reserveMany(goodsId, [{ ...item(goodsId, 'v5-let-in'), admitted: true }]))[0]).toMatchObject({ ok: true });
    await settled(goodsId);
    // Storage as version 5 left it: no column for it, the tally's triggers without the count.
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE meta SET value = 5 WHERE key = 'schema'");
      for (const trigger of ['tally_reservation_insert', 'tally_reservation_update', 'tally_reservation_delete']) {
        sql.exec(`DROP TRIGGER ${trigger}`);
      }
      sql.exec('ALTER TABLE reservation DROP COLUMN admitted');
      sql.exec('ALTER TABLE tally DROP COLUMN admitted_queued');
      sql.exec('ALTER TABLE tally DROP COLUMN admitted_confirmed');
    });
    const fresh = await restart(goodsId);
    expect(await fresh.snapshot()).toMatchObject({ confirmed: 1, admittedQueued: 0, admittedConfirmed: 0 });
    expect(await storedVersion(fresh)).toBe(SCHEMA_VERSION);
    const again = { ...item(goodsId, 'v6-let-in'), admitted: true as const };
    expect((await fresh.reserveMany(goodsId, [again]))[0]).toMatchObject({ ok: true });
    await settled(goodsId);
    expect(await fresh.snapshot()).toMatchObject({ confirmed: 2, admittedConfirmed: 1 });
    // The remade triggers still keep every count: a release takes the order back out of both.
    expect(await fresh.release(again.requestId, 'CANCELLED')).toMatchObject({ released: true });
    expect(await fresh.snapshot()).toMatchObject({ remaining: 3, queued: 0, confirmed: 1, admittedQueued: 0, admittedConfirmed: 0 });
  });
});
