// The bench's phases beyond the floor, purchase, sold-out and consumer phases of bench.ts: the
// object calls behind the capacity model (and the CPU they cost), purchases under a delay on
// every object call, a sharded goods beside the one-shard purchase phase, the waiting room, and
// the classic stack (what a crowd does beside buying is in crowd-phases.ts). Each returns its
// numbers and the goods whose invariants bench.ts checks.

import type { ObjectCallCounts } from '../../../workers/kernel/object-calls.ts';
import { MAX_ROOM_SHARDS, ROOM_SHARDS } from '../../../workers/kernel/waiting-room.ts';
import { liveOrders } from '../load/admin.ts';
import { round } from '../load/metrics.ts';
import { acceptedCollector, purchaseRequests } from './buyers.ts';
import type { PhaseResult } from './cannon.ts';
import { type ClassicRun, classicServices, runClassic } from './classic/index.ts';
import { type BenchContext, type CheckedGoods, saleGoods } from './context.ts';
import { type CapacityModel, type Ceiling, type ClassInputs, callsWaited, capacityModel, modelInputs } from './model.ts';
import {
  bundleModules,
  byClass,
  type ClassCalls,
  countCalls,
  cpuByClass,
  type JourneyWalk,
  journeys,
  purchasesPerStockCall,
} from './objects.ts';
import { restingCpuMsPerSecond, workerCpuMs } from './process-cpu.ts';
import { type QueuePhase, runQueuePhase } from './room.ts';
import { decisionCost } from './room-decision.ts';

/** Purchases by `count` fresh shoppers on `goodsId` for `durationS`; the 202s land in `accepted`. */
async function purchases(
  c: BenchContext,
  prefix: string,
  goodsId: number,
  count: number,
  accepted: Set<string>,
  durationS = c.o.durationS,
) {
  const users = await c.minter.users(prefix, count);
  const buyers = purchaseRequests(await c.minter.tokens(users, goodsId), goodsId, c.o.idempotencyKeys);
  return c.phase({ durationS, maxRequests: count, next: buyers.next, onAnswer: acceptedCollector(accepted) });
}

export type ModelPhase = {
  model: CapacityModel;
  cpu: { durationS: number; purchases: number; rps: number; cpuMs: Record<string, number>; calls: ClassCalls; busyMs: number };
  journey: JourneyWalk & {
    /** The Worker's CPU a journey, less the stack's at rest over the phase. */
    cpuUsPerJourney: number | null;
    /** The same with the stack's CPU at rest left in. */
    grossCpuUsPerJourney: number | null;
    /** The workerd processes' CPU ms a second at rest, measured just before the journeys. */
    restingCpuMsPerSecond: number | null;
    perPurchase: ClassInputs[];
    /** Result polls per accepted purchase. */
    pollsPerPurchase: number;
    /** The model again from the journey's counts: result polls included, one call per request. */
    scenarios: { shards: number; production: Ceiling }[];
  };
};

/**
 * The capacity model's inputs: calls per purchase from the purchase phase's counts, the CPU per
 * call from a profiled purchase phase of its own, and a shopper's whole journey through HTTP.
 */
export async function modelPhase(
  c: BenchContext,
  purchase: { calls: ClassCalls; accepted: number; rps: number },
): Promise<{ result: ModelPhase; goods: CheckedGoods[] }> {
  const durationS = Math.min(c.o.durationS, 5);
  c.say(`Object CPU: a profiled purchase phase of ${durationS} s...`);
  const cpuGoods = await saleGoods(c, 'object CPU', 2_000_000);
  const cpuAccepted = new Set<string>();
  const count = Math.max(c.o.connections * 4, Math.ceil(purchase.rps * durationS * 1.5));
  const users = await c.minter.users('cpu', count);
  const buyers = purchaseRequests(await c.minter.tokens(users, cpuGoods.goodsId), cpuGoods.goodsId, c.o.idempotencyKeys);
  await c.profiler.start();
  const counted = await countCalls(c.calls, () =>
    c.phase({ durationS, maxRequests: count, next: buyers.next, onAnswer: acceptedCollector(cpuAccepted) }),
  );
  const profile = await c.profiler.stop();
  const moduleOf = await bundleModules(c.scriptPath);
  const cpuMs = cpuByClass(profile, moduleOf);
  const cpuCalls = byClass(counted.counts);
  const inputs = modelInputs(purchase.calls, purchase.accepted, {}).map((i) => {
    const ms = cpuMs[i.cls];
    const n = cpuCalls[i.cls]?.calls;
    return { ...i, cpuMsPerCall: ms !== undefined && n ? round(ms / n, 3) : null };
  });

  const journeyCount = Math.min(1_000, Math.max(50, c.o.connections * 2));
  c.say(`Journeys: ${journeyCount} shoppers through challenge, token, purchase and result polls...`);
  const journeyGoods = await saleGoods(c, 'journey', journeyCount);
  const journeyUsers = await c.minter.users('journey', journeyCount);
  // The profiled phase's orders written first, and the stack's CPU at rest measured: neither is
  // a journey's.
  await c.admin.waitAtRest(cpuGoods.goodsId, { timeoutMs: 300_000, intervalMs: 100 });
  const restingMsPerS = await restingCpuMsPerSecond();
  const journeyCpuBefore = workerCpuMs();
  const journeyStartedAt = performance.now();
  const walked = await countCalls(c.calls, () =>
    journeys({ http: c.http, goodsId: journeyGoods.goodsId, users: journeyUsers, concurrency: Math.min(c.o.connections, 50) }),
  );
  const journeyCpuAfter = workerCpuMs();
  const journeyS = (performance.now() - journeyStartedAt) / 1000;
  // The Worker's CPU for one shopper's requests and whatever they set off in the objects and the
  // consumer: the phase's, less the stack's at rest over as long.
  const shoppers = Math.max(1, walked.result.shoppers);
  const grossMs = journeyCpuBefore !== undefined && journeyCpuAfter !== undefined ? journeyCpuAfter - journeyCpuBefore : undefined;
  const journeyCpu =
    grossMs !== undefined && restingMsPerS !== undefined
      ? {
          cpuUsPerJourney: Math.max(0, Math.round(((grossMs - restingMsPerS * journeyS) * 1000) / shoppers)),
          grossCpuUsPerJourney: Math.round((grossMs * 1000) / shoppers),
          restingCpuMsPerSecond: round(restingMsPerS, 1),
        }
      : { cpuUsPerJourney: null, grossCpuUsPerJourney: null, restingCpuMsPerSecond: null };
  const journeyInputs = modelInputs(byClass(walked.counts), walked.result.accepted);
  const busyUs = profile.samples.reduce((sum, _id, i) => sum + (profile.timeDeltas[i + 1] ?? 0), 0);
  return {
    result: {
      model: capacityModel(inputs, purchase.accepted),
      cpu: {
        durationS: counted.result.durationS,
        purchases: cpuAccepted.size,
        rps: counted.result.rps,
        cpuMs,
        calls: cpuCalls,
        busyMs: round(busyUs / 1000),
      },
      journey: {
        ...walked.result,
        ...journeyCpu,
        perPurchase: journeyInputs,
        pollsPerPurchase: round(walked.result.resultPolls / Math.max(1, walked.result.accepted), 2),
        scenarios: capacityModel(journeyInputs, walked.result.accepted).scenarios.map((s) => ({
          shards: s.shards,
          production: s.production,
        })),
      },
    },
    // The journey's 202s are counted, not collected: its goods is checked through the stats alone.
    goods: [{ name: 'object CPU', goodsId: cpuGoods.goodsId, accepted: cpuAccepted }],
  };
}

export type DelayPhase = PhaseResult & {
  delayMs: number;
  accepted: number;
  /** Object calls a purchase waited on one after another: (p50 - p50 undelayed) / delay, at least 0, and the same at p99. */
  sequentialCallsP50: number;
  sequentialCallsP99: number;
};

/** Purchases while every object call waits `delayMs` first (an object far from the isolate). */
export async function delayPhase(c: BenchContext, baseline: PhaseResult): Promise<{ result: DelayPhase; goods: CheckedGoods[] }> {
  const delayMs = c.o.objectDelayMs;
  c.say(`Object delay: purchases with ${delayMs} ms before every object call for ${c.o.durationS} s...`);
  const goods = await saleGoods(c, `object delay ${delayMs} ms`, 2_000_000);
  const accepted = new Set<string>();
  const count = Math.ceil(((c.o.connections * 1000) / delayMs) * c.o.durationS * 1.2);
  await c.calls.set({ delayMs });
  let phase: PhaseResult;
  try {
    phase = await purchases(c, 'delayed', goods.goodsId, count, accepted);
  } finally {
    await c.calls.set({ delayMs: 0 });
  }
  return {
    result: {
      ...phase,
      delayMs,
      accepted: accepted.size,
      sequentialCallsP50: callsWaited(phase.p50Ms, baseline.p50Ms, delayMs),
      sequentialCallsP99: callsWaited(phase.p99Ms, baseline.p99Ms, delayMs),
    },
    goods: [{ name: `object delay ${delayMs} ms`, goodsId: goods.goodsId, accepted }],
  };
}

export type ShardPhase = PhaseResult & {
  shardsAsked: number;
  /** Shards the stats report (`shards: [...]`); 1 when the stats have no such list. */
  shardsReported: number;
  stock: number;
  accepted: number;
  acceptedPerSec: number;
  /**
   * Accepted purchases a second over the mean of one shard's two runs: the purchase phase's,
   * and one on a goods of one shard right after this phase's timed purchases (`oneShardAfter`),
   * so a machine that changed speed between the purchase phase and this one does not skew it.
   */
  ratioToOneShard: number | null;
  oneShardAfter: PhaseResult & { acceptedPerSec: number };
  sellOut: PhaseResult | null;
  soldAll: boolean;
  remaining: number | null;
  /** The timed purchases' object calls (before the sell-out), and how many purchases a stock call carried. */
  objectCalls: ObjectCallCounts;
  purchasesPerCall: number | null;
};

/**
 * A goods with `shards` stock shards: purchases for the phase's time, then as long on a goods
 * of one shard (throughput beside one shard's, measured on both sides of it), then more
 * shoppers on the sharded goods until every unit is sold.
 */
export async function shardPhase(
  c: BenchContext,
  oneShard: { acceptedPerSec: number; shoppers: number },
): Promise<{ result: ShardPhase; goods: CheckedGoods[] }> {
  const shards = c.o.shards;
  const stock = Math.max(c.o.connections * 2, Math.ceil(oneShard.acceptedPerSec * c.o.durationS * 1.2));
  c.say(`${shards} shards: ${stock} units, purchases for ${c.o.durationS} s, then until sold out...`);
  const goods = await saleGoods(c, `${shards} shards`, stock, { shards });
  const accepted = new Set<string>();
  // Counted: on one thread every shard's batch is its own transaction, so its size is what sharding costs here.
  const { result: timed, counts } = await countCalls(c.calls, () =>
    purchases(c, `shard${shards}`, goods.goodsId, Math.max(oneShard.shoppers, c.o.connections), accepted),
  );
  const inPhase = accepted.size;
  await c.admin.waitAtRest(goods.goodsId, { timeoutMs: 300_000, intervalMs: 200 });
  // One shard again, the same way and right after: the machine's speed moves more between the
  // purchase phase and this one (minutes apart) than sharding costs.
  // Twice the units: a machine faster by a fifth than in the purchase phase must not sell it out
  // within the phase (sold-out answers are not purchases, and would flatter the shards).
  c.say(`1 shard again: ${2 * stock} units, purchases for ${c.o.durationS} s...`);
  const single = await saleGoods(c, '1 shard, after the shards', 2 * stock);
  const acceptedSingle = new Set<string>();
  const after = await purchases(c, 'shard1-after', single.goodsId, Math.max(oneShard.shoppers, c.o.connections), acceptedSingle);
  const oneShardAfter = { ...after, acceptedPerSec: round(acceptedSingle.size / Math.max(after.durationS, 0.001)) };
  await c.admin.waitAtRest(single.goodsId, { timeoutMs: 300_000, intervalMs: 200 });
  const left = (await c.admin.stats(goods.goodsId)).doRemaining ?? 0;
  // Twice the shoppers of the units left: a sale with more demand than stock sells every unit.
  const sellOut = left > 0 ? await purchases(c, `shard${shards}-last`, goods.goodsId, left * 2 + c.o.connections, accepted, 120) : null;
  const { stats } = await c.admin.waitAtRest(goods.goodsId, { timeoutMs: 300_000, intervalMs: 200 });
  // Sold out by the stats: autocannon stops listening at the end of a phase, so a few 202s
  // may go uncounted here (the invariants compare Postgres with the 202s it did see).
  const soldAll = stats !== undefined && stats.doRemaining === 0 && liveOrders(stats) === stock;
  const listed = stats && 'shards' in stats && Array.isArray(stats.shards) ? stats.shards.length : 1;
  const acceptedPerSec = round(inPhase / Math.max(timed.durationS, 0.001));
  const oneShardMean = (oneShard.acceptedPerSec + oneShardAfter.acceptedPerSec) / 2;
  return {
    result: {
      ...timed,
      shardsAsked: shards,
      shardsReported: listed,
      stock,
      accepted: inPhase,
      acceptedPerSec,
      ratioToOneShard: oneShardMean > 0 ? round(acceptedPerSec / oneShardMean, 2) : null,
      oneShardAfter,
      sellOut,
      soldAll,
      remaining: stats?.doRemaining ?? null,
      objectCalls: counts,
      purchasesPerCall: purchasesPerStockCall(counts),
    },
    goods: [
      { name: `${shards} shards`, goodsId: goods.goodsId, accepted },
      { name: '1 shard, after the shards', goodsId: single.goodsId, accepted: acceptedSingle },
    ],
  };
}

/** The waiting room's phase: every shopper joins, holds the live channel, is admitted and buys. */
export async function queuePhase(c: BenchContext): Promise<{ result: QueuePhase; goods: CheckedGoods[] }> {
  const n = c.o.queueShoppers;
  const admitPerSecond = c.o.admitPerSecond;
  const how = c.o.joinWithPost ? 'join with POST .../queue, then hold the live channel' : 'join as their live channel opens, hold it';
  const shards = c.o.roomShards;
  c.say(`Queue: ${n} shoppers ${how} (an always-on line, ${admitPerSecond}/s${shards ? `, ${shards} room shards` : ''}), buy...`);
  const stockShards = c.o.queueStockShards;
  const goods = await saleGoods(c, 'waiting room', n, {
    queue: { mode: 'always', admitPerSecond, ...(shards ? { shards } : {}) },
    ...(stockShards > 1 ? { shards: stockShards } : {}),
  });
  const users = await c.minter.users('line', n);
  const { phase, accepted } = await runQueuePhase({
    http: c.http,
    url: c.url,
    goodsId: goods.goodsId,
    users,
    admitPerSecond,
    connections: c.o.connections,
    timeoutMs: Math.ceil((n / admitPerSecond) * 3_000) + 60_000,
    headers: c.clientHeaders,
    joinWithPost: c.o.joinWithPost,
  });
  const room = (await c.admin.stats(goods.goodsId)).queue;
  return {
    // The coordinator's price of a room's shard count, beside what the room did.
    result: {
      ...phase,
      ...(shards ? { roomShards: shards } : {}),
      ...(stockShards > 1 ? { stockShards } : {}),
      measured: { frontLagMs: room?.frontLagMs ?? null, lateMs: room?.lateMs ?? null },
      coordinator: [ROOM_SHARDS, MAX_ROOM_SHARDS].map((s) => decisionCost(s)),
    },
    goods: [{ name: 'waiting room', goodsId: goods.goodsId, accepted }],
  };
}

/** The classic stack on the real redis-server and PostgreSQL, or why it was skipped. */
export async function classicPhase(c: BenchContext, shoppers: number): Promise<ClassicRun | { skipped: string }> {
  if (!c.o.classic) {
    return { skipped: '--no-classic' };
  }
  const services = await classicServices(c.o.redisUrl, c.o.databaseUrl);
  if ('skipped' in services) {
    c.say(`Classic stack skipped: ${services.skipped}`);
    return services;
  }
  c.say(`Classic stack: Node + Redis Lua + a Redis list + a pg worker, ${c.o.durationS} s...`);
  const users = await c.minter.users('classic', shoppers);
  return runClassic({ ...services, jwtSecret: c.secrets.AUTH_JWT_SECRET, users, connections: c.o.connections, durationS: c.o.durationS });
}
