import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { SCHEMA_VERSION } from '../../durable-objects/goods-stock/storage';
import type { ReserveItem } from '../../workers/kernel/contract';
import { createGoods, stockObject } from './helpers';

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

function storedVersion(stub: ReturnType<typeof stockObject>): Promise<number> {
  return runInDurableObject(
    stub,
    (_instance, state) => state.storage.sql.exec<{ value: number }>("SELECT value FROM meta WHERE key = 'schema'").one().value,
  );
}

describe('the goods object schema', () => {
  it('is at this build version for a new object', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    expect(SCHEMA_VERSION).toBe(2);
    expect(await storedVersion(stockObject(goodsId))).toBe(SCHEMA_VERSION);
  });

  it('opens an object an older build made: version 1, mirror_state created outside the gate', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
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
});
