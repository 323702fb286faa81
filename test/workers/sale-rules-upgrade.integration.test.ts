// A goods' object made by the build before sale rules (schema version 3) opens under version 4:
// its sale keeps one unit per shopper, open to all, and its reservations and holders count one
// unit each, so releases and the per-shopper check work on what it held before.
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { SCHEMA_VERSION } from '../../durable-objects/goods-stock/storage';
import type { ReserveItem } from '../../workers/kernel/contract';
import { createGoods, settled, stockObject } from './helpers';

function item(goodsId: number, userId: string, n = 1): ReserveItem {
  return {
    requestId: `${goodsId}.${`${userId}${n}`.padEnd(22, 'v')}`,
    userId,
    tokenId: `upgrade-token-${userId}-${n}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: false,
  };
}

describe('the goods object schema, version 3 to 4', () => {
  it('opens a version 3 object: one unit per holder and per reservation, releases give one back', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const stub = stockObject(goodsId);
    const held = item(goodsId, 'v3holder');
    expect((await stub.reserveMany(goodsId, [held]))[0]).toMatchObject({ ok: true });
    await settled(goodsId);
    // Storage as version 3 left it: none of the sale-rules columns, no allowlist.
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      sql.exec("UPDATE meta SET value = 3 WHERE key = 'schema'");
      for (const [table, column] of [
        ['sale', 'per_user_limit'],
        ['sale', 'limit_scope'],
        ['sale', 'eligibility'],
        ['reservation', 'quantity'],
        ['holder', 'units'],
      ]) {
        sql.exec(`ALTER TABLE ${table} DROP COLUMN ${column}`);
      }
      sql.exec('DROP TABLE allowlist');
    });
    await runInDurableObject(stub, (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
    const fresh = stockObject(goodsId);
    expect(await fresh.snapshot()).toMatchObject({ remaining: 2 });
    const version = await runInDurableObject(
      fresh,
      (_instance, state) => state.storage.sql.exec<{ value: number }>("SELECT value FROM meta WHERE key = 'schema'").one().value,
    );
    expect(version).toBe(SCHEMA_VERSION);
    // The shopper still holds their unit: a second purchase is refused as before.
    expect((await fresh.reserveMany(goodsId, [item(goodsId, 'v3holder', 2)]))[0]).toMatchObject({ ok: false, reason: 'ALREADY_PURCHASED' });
    // Released, the unit comes back (one, not more) and the shopper may buy again.
    expect(await fresh.release(held.requestId, 'CANCELLED')).toEqual({ released: true, remaining: 3 });
    expect((await fresh.reserveMany(goodsId, [item(goodsId, 'v3holder', 3)]))[0]).toMatchObject({ ok: true });
    expect((await fresh.snapshot())?.remaining).toBe(2);
  });
});
