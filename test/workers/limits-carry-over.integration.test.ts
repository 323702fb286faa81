import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it } from 'vitest';
import { legacyLimitsHolder } from '../../durable-objects/routing';
import { DEFAULT_LIMITS } from '../../workers/kernel/limits';

// Builds before the limits store kept the runtime limits in EdgeGuard('config:limits'), in its
// `setting` table. A store with no record of its own copies that record once.

/** A limits store instance of its own, so each case starts with no record. */
function freshStore(name: string) {
  return env.LIMITS_STORE.get(env.LIMITS_STORE.idFromName(`carry-over:${name}`));
}

function setLegacy(value: string, updatedAt: number): Promise<void> {
  return runInDurableObject(legacyLimitsHolder(env), (_instance, state) => {
    state.storage.sql.exec('CREATE TABLE IF NOT EXISTS setting (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at INTEGER NOT NULL)');
    state.storage.sql.exec("INSERT OR REPLACE INTO setting (key, value, updated_at) VALUES ('limits', ?, ?)", value, updatedAt);
  });
}

afterEach(async () => {
  await runInDurableObject(legacyLimitsHolder(env), (_instance, state) => {
    state.storage.sql.exec('DROP TABLE IF EXISTS setting');
  });
});

describe('the limits store', () => {
  it('carries the limits over from the older EdgeGuard record, once', async () => {
    const at = Date.UTC(2026, 10, 1);
    await setLegacy(JSON.stringify({ ...DEFAULT_LIMITS, perIpPerSecond: 42, admissionByGoods: { '7': 5 } }), at);
    const store = freshStore('once');
    const first = await store.getLimits();
    expect(first.limits).toMatchObject({ perIpPerSecond: 42, admissionByGoods: { '7': 5 } });
    expect(first.updatedAt).toBe(new Date(at).toISOString());
    // The copy is the store's own now: a later change of the old record is not read again.
    await setLegacy(JSON.stringify({ ...DEFAULT_LIMITS, perIpPerSecond: 99 }), at + 1000);
    await runInDurableObject(store, (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
    expect((await freshStore('once').getLimits()).limits.perIpPerSecond).toBe(42);
  });

  it('keeps a change made on top of the carried record', async () => {
    await setLegacy(JSON.stringify({ ...DEFAULT_LIMITS, perUserPerSecond: 9 }), Date.now());
    const store = freshStore('patched');
    const changed = await store.setLimits({ perIpPerSecond: 11 });
    expect(changed.limits).toMatchObject({ perUserPerSecond: 9, perIpPerSecond: 11 });
  });

  it('starts from the defaults when there was no older record, and does not look again', async () => {
    const store = freshStore('none');
    expect(await store.getLimits()).toEqual({ limits: DEFAULT_LIMITS, updatedAt: null });
    await setLegacy(JSON.stringify({ ...DEFAULT_LIMITS, perIpPerSecond: 55 }), Date.now());
    await runInDurableObject(store, (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
    expect((await freshStore('none').getLimits()).limits.perIpPerSecond).toBe(DEFAULT_LIMITS.perIpPerSecond);
  });
});
