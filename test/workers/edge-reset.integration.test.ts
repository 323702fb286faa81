// The edge's objects reset mid-sale (POST /admin/dev/faults/reset with `edge`, the chaos run's
// phase g): every guard shard, the limits store and its copies, the goods' admission gate and
// every metrics shard lose what they held in memory (rate windows, copies, shares, unwritten
// sums), and keep what they stored: a ban is still enforced and listed, the runtime limits still
// hold, and the sale goes on.
import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AdmissionGate } from '../../durable-objects/admission-gate/index';
import type { LimitsStore } from '../../durable-objects/limits-store/index';
import {
  admissionGate,
  GUARD_SHARDS,
  guardShard,
  LIMITS_REPLICAS,
  limitsReplica,
  limitsStore,
  METRICS_SHARDS,
} from '../../durable-objects/routing';
import { askObjectReset, edgeResetName, guardResetName, resetPending } from '../../workers/kernel/dev-faults';
import { DEFAULT_LIMITS } from '../../workers/kernel/limits';
import { ADMIN, bearer, buy, call, createGoods, devToken, eventually, json, restoreLimits, setLimits } from './helpers';

const resetEdge = (goodsId: number) =>
  call('/admin/dev/faults/reset', { method: 'POST', headers: ADMIN, json: { goodsId, objects: ['edge'] } });

/** The isolates the goods' gate is sharing its rate among (its memory, lost with the instance). */
function gateIsolates(goodsId: number): Promise<number> {
  return runInDurableObject(admissionGate(env, { id: goodsId, locationHint: null }), (gate: AdmissionGate) => {
    return (gate as unknown as { shares: { isolates: number } }).shares.isolates;
  });
}

/** Whether a limits copy holds a copy in memory. */
function copyHeld(i: number): Promise<boolean> {
  return runInDurableObject(limitsReplica(env, i), (copy: LimitsStore) => (copy as unknown as { copy?: unknown }).copy !== undefined);
}

function challenge(jwt: string, goodsId: number, ip: string): Promise<Response> {
  return call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: { ...bearer(jwt), 'cf-connecting-ip': ip } });
}

afterEach(restoreLimits);

describe("the edge's objects reset", () => {
  it('takes every guard shard, limits copy and the store, the gate and every metrics shard, and the sale goes on', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    expect((await buy('edge-reset-1', goodsId)).status).toBe(202);
    // The first purchase fetched this isolate's share behind it; a copy holds the limits.
    await eventually(async () => (await gateIsolates(goodsId)) === 1);
    await limitsReplica(env, 2).replicaLimits();
    expect(await copyHeld(2)).toBe(true);

    const res = await resetEdge(goodsId);
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({
      goodsId,
      objects: ['edge'],
      reset: true,
      edge: {
        guardShards: { asked: GUARD_SHARDS, reset: GUARD_SHARDS, byTraffic: 0 },
        limits: { asked: LIMITS_REPLICAS + 1, reset: LIMITS_REPLICAS + 1, byTraffic: 0 },
        admissionGate: { asked: 1, reset: 1, byTraffic: 0 },
        metricsShards: { asked: METRICS_SHARDS, reset: METRICS_SHARDS, byTraffic: 0 },
      },
    });
    // New instances: the gate's shares and the copy's copy are gone (soft state), nothing else is.
    expect(await gateIsolates(goodsId)).toBe(0);
    expect(await copyHeld(2)).toBe(false);
    expect((await limitsReplica(env, 2).replicaLimits()).limits.perIpPerSecond).toBe(DEFAULT_LIMITS.perIpPerSecond);

    // The next shoppers buy as before; the first buyer still holds its unit.
    expect((await buy('edge-reset-2', goodsId)).status).toBe(202);
    expect((await buy('edge-reset-1', goodsId)).status).toBe(409);
    expect((await call('/admin/metrics', { headers: ADMIN })).status).toBe(200);
  });

  it('keeps a ban and the runtime limits: the ban is listed, told to another isolate and enforced, the limits read back', async () => {
    const { goodsId } = await createGoods();
    await setLimits({ banThreshold: 20, perUserPerSecond: 2 });
    const jwt = await devToken('edge-reset-banned');
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) {
      statuses.push((await challenge(jwt, goodsId, `192.0.2.${i + 1}`)).status);
    }
    vi.useRealTimers();
    expect(statuses.indexOf(403)).toBe(20);

    expect(await json(await resetEdge(goodsId))).toMatchObject({ reset: true });

    const bans = await json<{ bans: { id: string }[] }>(await call('/admin/limits/bans', { headers: ADMIN }));
    expect(bans.bans.map((b) => b.id)).toContain('user:edge-reset-banned');
    // An isolate that never saw the shopper hears of the ban from the shard's new instance.
    const policy = { threshold: 20, windowMs: 10_000, durationMs: 600_000 };
    const reply = await guardShard(env, 'user:edge-reset-banned').account({
      isolate: 'another-isolate',
      policy,
      keys: [{ id: 'user:edge-reset-banned', hits: 1, windows: [] }],
    });
    expect(reply.bans.map((b) => b.id)).toEqual(['user:edge-reset-banned']);
    const refused = await challenge(jwt, goodsId, '192.0.2.200');
    expect(refused.status).toBe(403);
    expect(await json(refused)).toMatchObject({ error: { code: 'BANNED' } });

    // Every copy reads the changed limits back from the store's storage.
    const copies = await Promise.all(Array.from({ length: LIMITS_REPLICAS }, (_, i) => limitsReplica(env, i).replicaLimits()));
    expect(copies.map((c) => [c.limits.banThreshold, c.limits.perUserPerSecond])).toEqual(Array(LIMITS_REPLICAS).fill([20, 2]));
    await call('/admin/limits/bans/lift', { method: 'POST', headers: ADMIN, json: { userId: 'edge-reset-banned' } });
  });

  it("gives the sale's own calls time to meet the resets: those calls fail, the requests around them do not", async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const resetting = call('/admin/dev/faults/reset', {
      method: 'POST',
      headers: ADMIN,
      json: { goodsId, objects: ['edge'], edgeWaitMs: 2_000 },
    });
    await eventually(async () => resetPending(edgeResetName(limitsStore(env).id)), 5_000, 10);
    // An isolate's report and a limits read meet their objects going, as under an eviction.
    const policy = { threshold: 100, windowMs: 10_000, durationMs: 600_000 };
    const report = await guardShard(env, 'user:edge-reset-met')
      .account({ isolate: 'another-isolate', policy, keys: [{ id: 'user:edge-reset-met', hits: 1, windows: [] }] })
      .catch((e: unknown) => e);
    expect(report).toMatchObject({ message: 'dev fault: object reset', durableObjectReset: true });
    const read = await limitsReplica(env, 4)
      .replicaLimits()
      .catch((e: unknown) => e);
    expect(read).toMatchObject({ message: 'dev fault: object reset', durableObjectReset: true });
    // A shopper meanwhile: a purchase, whatever the edge's objects are doing.
    expect((await buy('edge-reset-met', goodsId)).status).toBe(202);
    const answer = await json<{ reset: boolean; edge: Record<string, { asked: number; reset: number; byTraffic: number }> }>(
      await resetting,
    );
    expect(answer.reset).toBe(true);
    expect(answer.edge.guardShards?.byTraffic).toBeGreaterThanOrEqual(1);
    expect(answer.edge.limits?.byTraffic).toBeGreaterThanOrEqual(1);
    expect(answer.edge.guardShards?.reset).toBe(GUARD_SHARDS);
    // The next report and read meet the new instances.
    expect((await limitsReplica(env, 4).replicaLimits()).limits.perIpPerSecond).toBe(DEFAULT_LIMITS.perIpPerSecond);
  });

  it('takes a guard shard whose instance its alarm started, which does not know its name', async () => {
    const { goodsId } = await createGoods();
    const key = 'challenge:edge-reset-alarm';
    const shard = guardShard(env, key);
    expect(await shard.useOnce(key, Date.now() + 60_000)).toBe(true);
    await runInDurableObject(shard, (_instance, state) => state.storage.setAlarm(Date.now() + 100));
    // The instance goes; its prune alarm, due at once, starts the next one by itself.
    const gone = askObjectReset(guardResetName(key));
    expect(await shard.useOnce(key, Date.now() + 60_000).catch((e: unknown) => e)).toMatchObject({ durableObjectReset: true });
    expect(gone()).toBe(true);
    await scheduler.wait(1_000);
    expect(await runInDurableObject(guardShard(env, key), (_instance, state) => state.id.name)).toBeUndefined();
    const answer = await json<{ edge: { guardShards: { asked: number; reset: number } } }>(await resetEdge(goodsId));
    expect(answer.edge.guardShards).toMatchObject({ asked: GUARD_SHARDS, reset: GUARD_SHARDS });
  });

  it('refuses a reset of more kinds than there are', async () => {
    const { goodsId } = await createGoods();
    const res = await call('/admin/dev/faults/reset', {
      method: 'POST',
      headers: ADMIN,
      json: { goodsId, objects: ['stock', 'room', 'edge', 'edge'] },
    });
    expect(res.status).toBe(400);
  });
});
