#!/usr/bin/env tsx
// `npm run bench`: the Worker's throughput on this machine, in one run, one load generator, one
// connection count. Phases: warm-up; floor (GET /api/health); purchases while stock lasts;
// the consumer draining them; sold-out answers; the floor again; the consumer on a backlog
// beside a plain-INSERT floor; the invariants. See BENCH_USAGE in lib/bench/options.ts and docs/performance.md.
import { loadavg } from 'node:os';
import { acceptedCollector, PURCHASE_ROUTE, purchaseRequests } from './lib/bench/buyers.ts';
import { combinePhases, runPhase } from './lib/bench/cannon.ts';
import {
  batchSummary,
  combineInsertFloors,
  consumerPause,
  INSERT_FLOOR_ROWS,
  measureConsumer,
  measureInsertFloor,
  orderMessages,
} from './lib/bench/consumer.ts';
import type { BenchContext } from './lib/bench/context.ts';
import { allowlistJoinPhases, eligibilityViewsPhase, goodsPagePhase, journeyRoutesPhase } from './lib/bench/crowd-phases.ts';
import { heldReadsPhase } from './lib/bench/held-reads.ts';
import { benchInvariants } from './lib/bench/invariants.ts';
import { benchSecrets, shopperMinter } from './lib/bench/mint.ts';
import { byClass, countCalls, objectCallsApi } from './lib/bench/objects.ts';
import { BENCH_USAGE, type BenchOptions, isUsageError, parseBenchOptions } from './lib/bench/options.ts';
import { classicPhase, delayPhase, modelPhase, queuePhase, shardPhase } from './lib/bench/phases.ts';
import { type CpuProfile, connectProfiler, type HeapProfile, summarizeProfile } from './lib/bench/profile.ts';
import { environment, formatBench, saveResult, withRatios } from './lib/bench/report.ts';
import { startBenchStack } from './lib/bench/stack.ts';
import { targets } from './lib/bench/targets.ts';
import { workerLatency } from './lib/bench/worker-latency.ts';
import { freePort } from './lib/free-port.ts';
import { adminApi, LOAD_TEST_LIMITS } from './lib/load/admin.ts';
import { httpClient } from './lib/load/http-client.ts';
import { fmt, round } from './lib/load/metrics.ts';
import { buildBundle } from './lib/miniflare-stack.ts';

const say = (line: string) => process.stderr.write(`${line}\n`);
/** The goods page phase's goods: without the mirror its page read asks every one of its stock shards. */
const GOODS_PAGE_SHARDS = 8;

async function bench(o: BenchOptions) {
  const startedAt = new Date().toISOString();
  const env = environment();
  const secrets = benchSecrets();
  say('Building the Worker bundle and starting it under Miniflare...');
  const minter = await shopperMinter(secrets);
  // The model's CPU per object call comes from a profile, so the inspector is always on.
  const inspectorPort = await freePort();
  const bundle = await buildBundle();
  const { stack, objectStorage, orderBatches, events, eventSamples } = await startBenchStack({
    bundle,
    databaseUrl: o.databaseUrl,
    redisUrl: o.redisUrl,
    assets: o.assets,
    entryWorker: o.entryWorker,
    servicesInProcess: o.servicesInProcess,
    bindings: secrets,
    verbose: o.verbose,
    inspectorPort,
    objectsOnDisk: o.objectsOnDisk,
  });
  // Cloudflare's edge sets the client's address; straight to the Worker's socket the bench does
  // (Miniflare's entry worker would set the same).
  const clientHeaders = { 'cf-connecting-ip': '127.0.0.1' };
  const http = httpClient(stack.url, { maxSockets: 8, headers: clientHeaders });
  const profiler = await connectProfiler(inspectorPort);
  const profiles: Record<string, CpuProfile> = {};
  /** KB the isolate allocated per request of a profiled phase (heap sampling beside the CPU profile). */
  const allocations: Record<string, number> = {};
  const heapProfiles: Record<string, HeapProfile> = {};
  /**
   * Runs a phase, CPU-profiled under --profile, with what it allocated: bytes do not change with
   * the machine's speed, which on a shared machine moves the CPU figures by 20% within a run.
   */
  const profiled = async <T>(name: string, run: () => Promise<T>): Promise<T> => {
    if (!o.profile) {
      return run();
    }
    await profiler.start();
    await profiler.startAllocations();
    const result = await run();
    const { bytes, profile } = await profiler.stopAllocations();
    heapProfiles[name] = profile;
    profiles[name] = await profiler.stop();
    const requests = (result as { requests?: unknown }).requests;
    if (typeof requests === 'number' && requests > 0) {
      allocations[name] = round(bytes / 1024 / requests, 1);
    }
    return result;
  };
  try {
    const admin = adminApi(http, stack.adminToken);
    const limits = await admin.setLimits(LOAD_TEST_LIMITS);
    const phase = (extra: Partial<Parameters<typeof runPhase>[0]>) =>
      runPhase({ url: stack.url, connections: o.connections, durationS: o.durationS, headers: clientHeaders, ...extra });
    const keyed = o.idempotencyKeys;
    // Every object call of the run is counted (the stubs made from here on).
    const calls = objectCallsApi(http, stack.adminToken);
    await calls.set({ watch: true, delayMs: 0, reset: true });
    const ctx: BenchContext = {
      o,
      url: stack.url,
      http,
      admin,
      calls,
      minter,
      secrets,
      profiler,
      scriptPath: bundle.scriptPath,
      phase,
      clientHeaders,
      sqlRequests: async () => {
        const res = await fetch(`http://${stack.services.pgWsProxy}/stats`);
        return ((await res.json()) as { sqlRequests: number }).sqlRequests;
      },
      pauseConsumer: consumerPause(http, stack.adminToken),
      say,
    };

    // Goods: one on sale with more stock than the phase can sell, one with a single unit.
    const warmCount = Math.max(o.connections, 2_000);
    const warmUsers = await minter.users('warm', warmCount);
    const sale = await admin.createGoods({ stock: 2_000_000, title: 'Bench: purchase' });
    const acceptedSale = new Set<string>();

    say(`Warm-up (${o.warmupS} s)...`);
    let warmRate: number | undefined;
    if (o.warmupS > 0) {
      await phase({ path: '/api/health', durationS: o.warmupS });
      const warm = purchaseRequests(await minter.tokens(warmUsers, sale.goodsId), sale.goodsId, keyed);
      const warmed = await phase({
        durationS: o.warmupS,
        maxRequests: warmCount,
        next: warm.next,
        onAnswer: acceptedCollector(acceptedSale),
      });
      warmRate = warmed.rps;
    }

    say(`Floor: GET /api/health for ${o.durationS} s...`);
    const floorBefore = await phase({ path: '/api/health' });

    // Enough shoppers that the phase runs its full time: never more than the floor route could
    // serve, and three times what the warm-up bought at (its first purchases run cold; making a
    // token costs the bench's CPU too). A phase that runs out ends at its last answer (cannon.ts).
    const ceiling = Math.ceil(floorBefore.rps * o.durationS * 1.2);
    const count = o.purchases ?? Math.min(ceiling, Math.max(2_000, Math.ceil((warmRate ?? floorBefore.rps) * o.durationS * 3)));
    say(`Making ${fmt(count)} shoppers with a purchase token each...`);
    const users = await minter.users('buyer', count);
    const buyers = purchaseRequests(await minter.tokens(users, sale.goodsId), sale.goodsId, keyed);
    say(`Purchases while stock lasts for ${o.durationS} s...`);
    // The Worker's own latency histogram before and after (scraped again once the phase's
    // requests have flushed their metrics): how much of a purchase's wait is in its code.
    const metricsBefore = await admin.metrics();
    const purchaseStarted = Date.now();
    const acceptedInPhase = new Set<string>();
    const onPurchase = acceptedCollector(acceptedInPhase);
    const { result: purchase, counts: purchaseCalls } = await countCalls(calls, () =>
      profiled('purchase', () => phase({ maxRequests: count, next: buyers.next, onAnswer: onPurchase })),
    );
    const purchaseEnded = Date.now();
    for (const id of acceptedInPhase) {
      acceptedSale.add(id);
    }
    say(`Waiting for the consumer to write the ${fmt(acceptedInPhase.size)} accepted purchases...`);
    const drained = await admin.waitAtRest(sale.goodsId, { timeoutMs: 300_000, intervalMs: 100 });
    const drainedAt = Date.now();
    const inWorker = workerLatency(PURCHASE_ROUTE, metricsBefore, await admin.metrics());

    const soldOutGoods = await admin.createGoods({ stock: 1, title: 'Bench: sold out' });
    const acceptedSoldOut = new Set<string>();
    const last = purchaseRequests(await minter.tokens(warmUsers.slice(0, 1), soldOutGoods.goodsId), soldOutGoods.goodsId, keyed).next();
    const lastUnit = await http.post(last.path, { headers: last.headers, body: last.body });
    acceptedCollector(acceptedSoldOut)(lastUnit.status, lastUnit.body);
    await admin.waitAtRest(soldOutGoods.goodsId, { timeoutMs: 60_000 });
    // Answering sold out costs less than selling: up to four times the shoppers of the purchase phase.
    const soldOutCount = Math.max(o.connections, Math.min(ceiling, 4 * count));
    const extra = soldOutCount > users.length ? await minter.users('latecomer', soldOutCount - users.length) : [];
    say(`Sold out: ${fmt(soldOutCount)} more shoppers try for ${o.durationS} s...`);
    const latecomers = purchaseRequests(
      await minter.tokens([...users, ...extra].slice(0, soldOutCount), soldOutGoods.goodsId),
      soldOutGoods.goodsId,
      keyed,
    );
    const soldOut = await profiled('soldOut', () =>
      phase({ maxRequests: soldOutCount, next: latecomers.next, onAnswer: acceptedCollector(acceptedSoldOut) }),
    );
    // The floor again: the ratios divide by both runs together, so a machine that sped up or
    // slowed down between the floor and the phases measured against it does not skew them.
    say(`Floor again: GET /api/health for ${o.durationS} s...`);
    // Profiled too under --profile: a sold-out answer's profile is read beside the floor's.
    const floorAfter = await profiled('floor', () => phase({ path: '/api/health' }));
    const floor = combinePhases(floorBefore, floorAfter);
    const goodsPage = await goodsPagePhase(ctx, GOODS_PAGE_SHARDS);
    const allowlistJoins = await allowlistJoinPhases(ctx);
    const eligibilityViews = await eligibilityViewsPhase(ctx);
    const journeyRoutes = await journeyRoutesPhase(ctx, floor.rps);

    say(`Consumer: ${fmt(o.consumerMessages)} orders straight to the order queue...`);
    const backlogGoods = await admin.createGoods({ stock: o.consumerMessages, title: 'Bench: consumer backlog' });
    const messages = orderMessages(backlogGoods, o.consumerMessages);
    // The INSERT floor runs before and after the backlog, for the same reason as the floor route.
    say('Insert floor: the same rows as plain multi-row INSERTs...');
    const insertFloorBefore = await measureInsertFloor({ databaseUrl: stack.services.databaseUrl, messages, batchSize: INSERT_FLOOR_ROWS });
    const backlogStarted = Date.now();
    const backlog = await measureConsumer({
      mf: stack.mf,
      databaseUrl: stack.services.databaseUrl,
      goodsId: backlogGoods.goodsId,
      messages,
      pauseConsumer: ctx.pauseConsumer,
    });
    const backlogEnded = Date.now();
    say('Insert floor again...');
    const insertFloor = combineInsertFloors(
      insertFloorBefore,
      await measureInsertFloor({ databaseUrl: stack.services.databaseUrl, messages, batchSize: INSERT_FLOOR_ROWS }),
    );

    const model = await modelPhase(ctx, { calls: byClass(purchaseCalls), accepted: acceptedInPhase.size, rps: purchase.rps });
    const delayed = o.objectDelayMs > 0 ? await delayPhase(ctx, purchase) : undefined;
    const acceptedPerSec = round(acceptedInPhase.size / Math.max(purchase.durationS, 0.001));
    const sharded = o.shards > 0 ? await profiled('shards', () => shardPhase(ctx, { acceptedPerSec, shoppers: count })) : undefined;
    const line = o.queueShoppers > 0 ? await queuePhase(ctx) : undefined;
    // With the mirror on its QUEUED answers every read at once: nothing is held.
    const heldReads = o.heldReads > 0 && !o.redisUrl ? await heldReadsPhase(ctx) : undefined;
    const classic = await classicPhase(ctx, count);

    say('Invariants...');
    const invariants = await benchInvariants({
      admin,
      databaseUrl: stack.services.databaseUrl,
      goods: [
        { name: 'purchase', goodsId: sale.goodsId, accepted: acceptedSale },
        { name: 'sold out', goodsId: soldOutGoods.goodsId, accepted: acceptedSoldOut },
        ...model.goods,
        ...(delayed?.goods ?? []),
        ...(sharded?.goods ?? []),
        ...(line?.goods ?? []),
        ...(heldReads?.goods ?? []),
        ...journeyRoutes.goods,
      ],
      settleTimeoutMs: 120_000,
    });
    const saleOrders = drained.stats?.orders.PENDING_PAYMENT ?? 0;
    const e2eSeconds = (drainedAt - purchaseStarted) / 1000;
    const result = withRatios({
      tool: 'edge-seckill bench',
      version: 1,
      startedAt,
      finishedAt: new Date().toISOString(),
      ...env,
      database: o.databaseUrl ? 'PostgreSQL (a fresh database on DATABASE_URL)' : 'PGlite (embedded)',
      options: {
        durationS: o.durationS,
        connections: o.connections,
        warmupS: o.warmupS,
        purchases: count,
        consumerMessages: o.consumerMessages,
        idempotencyKeys: keyed,
        assets: o.assets,
        entryWorker: o.entryWorker,
        servicesInProcess: o.servicesInProcess,
        objectStorage,
        profile: o.profile,
        objectDelayMs: o.objectDelayMs,
        shards: o.shards,
        queueShoppers: o.queueShoppers,
        heldReads: o.heldReads,
        admitPerSecond: o.admitPerSecond,
        redis: Boolean(o.redisUrl),
        limits,
      },
      floor,
      floorRuns: { before: floorBefore, after: floorAfter, drift: round(floorAfter.rps / Math.max(floorBefore.rps, 1), 2) },
      purchase: {
        ...purchase,
        accepted: acceptedInPhase.size,
        acceptedPerSec,
        shoppersUsed: buyers.used,
        shoppersMade: count,
        objectCalls: purchaseCalls,
        inWorker,
      },
      soldOut: { ...soldOut, shoppersUsed: latecomers.used, shoppersMade: soldOutCount },
      consumer: {
        ordersPerSec: backlog.ordersPerSec,
        insertFloorPerSec: insertFloor.rowsPerSec,
        backlog,
        batches: batchSummary(orderBatches(), backlogStarted, backlogEnded),
        insertFloor,
        // The purchase phase's own orders: written while shoppers kept buying, then drained.
        afterPurchase: {
          orders: saleOrders,
          drainMs: drainedAt - purchaseEnded,
          ordersPerSec: round(acceptedInPhase.size / e2eSeconds),
          atRest: drained.atRest,
          batches: batchSummary(orderBatches(), purchaseStarted, drainedAt),
          duringPhase: batchSummary(orderBatches(), purchaseStarted, purchaseEnded),
          drain: batchSummary(orderBatches(), purchaseEnded, drainedAt),
        },
      },
      model: model.result,
      objectDelay: delayed?.result ?? null,
      shards: sharded?.result ?? null,
      goodsPage,
      allowlistJoins,
      eligibilityViews,
      journeyRoutes: journeyRoutes.result,
      queue: line?.result ?? null,
      heldReads: heldReads?.result ?? null,
      classic,
      invariants,
      workerEvents: events(),
      workerEventSamples: eventSamples(),
      ...(o.profile
        ? {
            profile: Object.fromEntries(
              Object.entries(profiles).map(([k, p]) => [k, { ...summarizeProfile(p), allocatedKbPerRequest: allocations[k] ?? null }]),
            ),
          }
        : {}),
      loadAverageAtEnd: loadavg().map((x) => round(x, 2)),
    });
    return { result: { ...result, targets: targets(result) }, profiles, heapProfiles };
  } finally {
    profiler.close();
    http.close();
    await stack.close();
    await bundle.remove();
  }
}

async function main(): Promise<number> {
  let o: ReturnType<typeof parseBenchOptions>;
  try {
    o = parseBenchOptions(process.argv.slice(2));
  } catch (error) {
    if (isUsageError(error)) {
      say(`${error.message}\n\n${BENCH_USAGE}`);
      return 2;
    }
    throw error;
  }
  if (o.help) {
    process.stdout.write(`${BENCH_USAGE}\n`);
    return 0;
  }
  const { result, profiles, heapProfiles } = await bench(o);
  const saved = await saveResult(o.out, result, profiles, heapProfiles);
  process.stdout.write(
    o.json ? `${JSON.stringify(result, null, 2)}\n` : `\n${formatBench(result)}\n\nSaved ${saved.file} and ${saved.latest}\n`,
  );
  for (const c of result.invariants.checks.filter((check) => !check.ok)) {
    // On stderr too, so a run with --json (or a test that reads only stderr) names what broke.
    say(`bench: invariant failed: ${c.goods}: ${c.name}: ${c.detail}`);
  }
  return result.invariants.ok ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    say(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exitCode = 2;
  },
);
