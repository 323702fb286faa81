import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { LimitsStore } from '../../durable-objects/limits-store/index';
import { LIMITS_REPLICAS, limitsReplica, limitsStore } from '../../durable-objects/routing';
import { currentLimits, LIMITS_TTL_MS } from '../../workers/edge/limits';
import { UPKEEP_CALL_MS } from '../../workers/kernel/within';
import { restoreLimits, setLimits } from './helpers';

// The isolates read the runtime limits from LIMITS_REPLICAS copies, not from the store: the
// store pushes every change to each copy, and a copy that missed a push re-reads the store
// within a second.

afterEach(restoreLimits);

describe('limits copies', () => {
  it('every copy has a change as soon as the store has it', async () => {
    await setLimits({ perIpPerSecond: 33 });
    const copies = await Promise.all(Array.from({ length: LIMITS_REPLICAS }, (_, i) => limitsReplica(env, i).replicaLimits()));
    expect(copies.map((c) => c.limits.perIpPerSecond)).toEqual(Array(LIMITS_REPLICAS).fill(33));
  });

  it("a copy answers with data of its own, not the store's call result, which the isolates would have to dispose", async () => {
    await setLimits({ perIpPerSecond: 34 });
    const answer = await runInDurableObject(limitsReplica(env, 3), (instance: LimitsStore) => {
      // As a copy that has nothing yet: it reads the store.
      (instance as unknown as { copy: unknown }).copy = undefined;
      return instance.replicaLimits();
    });
    expect(answer.limits.perIpPerSecond).toBe(34);
    // workerd's disposer is a symbol-keyed property (Symbol.dispose).
    expect(Object.getOwnPropertySymbols(answer).map(String)).toEqual([]);
  });

  it('a copy that missed a push serves what it has for at most a second, then re-reads the store', async () => {
    const now = Date.now();
    vi.useFakeTimers({ toFake: ['Date'], now });
    await limitsStore(env).setLimits({ perUserPerSecond: 7 });
    const stale = await limitsStore(env).getLimits();
    await limitsStore(env).setLimits({ perUserPerSecond: 8 });
    // Copy 5 missed the second push (it holds the first).
    await limitsReplica(env, 5).replicate(stale);
    expect((await limitsReplica(env, 5).replicaLimits()).limits.perUserPerSecond).toBe(7);
    vi.setSystemTime(now + 1_000);
    expect((await limitsReplica(env, 5).replicaLimits()).limits.perUserPerSecond).toBe(8);
  });
});

describe('a limits copy that never answers', () => {
  it("holds an operator's change for UPKEEP_CALL_MS at most, and the change is made", async () => {
    const store = limitsStore(env);
    const started = Date.now();
    const stored = await runInDurableObject(store, async (instance: LimitsStore) => {
      const held = instance as unknown as { env: Env };
      const real = held.env;
      const silent = { idFromName: (n: string) => n, get: () => ({ replicate: () => new Promise(() => {}) }) };
      held.env = { ...real, LIMITS_STORE: silent } as unknown as Env;
      try {
        return await instance.setLimits({ perUserPerSecond: 9 });
      } finally {
        held.env = real;
      }
    });
    const tookMs = Date.now() - started;
    expect(stored.limits.perUserPerSecond).toBe(9);
    expect(tookMs).toBeGreaterThanOrEqual(UPKEEP_CALL_MS - 50);
    expect(tookMs).toBeLessThan(UPKEEP_CALL_MS + 3_000);
    expect((await store.getLimits()).limits.perUserPerSecond).toBe(9);
  }, 30_000);
});

describe("an isolate's limits copy that never answers", () => {
  it('holds a request renewing a lapsed copy for UPKEEP_CALL_MS at most: it is served the limits it had', async () => {
    const known = await currentLimits(env);
    const silent = {
      ...env,
      LIMITS_STORE: { idFromName: (name: string) => name, get: () => ({ replicaLimits: () => new Promise(() => {}) }) },
    };
    const started = Date.now();
    // Its copy lapsed: this request renews it and waits for the copy's answer.
    const served = await currentLimits(silent as unknown as Env, undefined, Date.now() + 2 * LIMITS_TTL_MS);
    const tookMs = Date.now() - started;
    expect(served).toEqual(known);
    expect(tookMs).toBeGreaterThanOrEqual(UPKEEP_CALL_MS - 50);
    expect(tookMs).toBeLessThan(UPKEEP_CALL_MS + 3_000);
    // A copy that answers renews it again.
    expect(await currentLimits(env, undefined, Date.now() + 2 * LIMITS_TTL_MS)).toEqual(known);
  }, 30_000);
});
