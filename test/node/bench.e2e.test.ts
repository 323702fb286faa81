// `npm run bench` in miniature: every phase for a second or two, then the result files. Speed is
// what the bench measures, not what this test asserts; it checks that a run produces the
// documented result and that the invariants held through it.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { formatBench } from '../../scripts/lib/bench/report.ts';
import { tsNode } from '../../scripts/lib/run-ts.ts';

const script = fileURLToPath(new URL('../../scripts/bench.ts', import.meta.url));

type Phase = {
  rps: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  requests: number;
  outcomes: Record<string, number>;
};
type Result = {
  machine: { cpus: number; node: string };
  options: { connections: number; durationS: number; entryWorker: boolean };
  floor: Phase;
  purchase: Phase & {
    ratioToFloor: number;
    accepted: number;
    acceptedPerSec: number;
    inWorker: { requests: number; meanMs: number; within: { ms: number; share: number }[] };
  };
  soldOut: Phase & { ratioToFloor: number };
  goodsPage: Phase & { shards: number; stockCallsPerView: number; durationS: number };
  allowlistJoins: (Phase & { limitScope: 'goods' | 'activity'; sqlPerJoin: number })[];
  eligibilityViews: Phase & { shoppers: number; sqlPerView: number };
  journeyRoutes: { routes: (Phase & { route: string; cpuUsPerRequest: number | null })[]; cpuUsPerJourney: number | null };
  consumer: {
    ordersPerSec: number;
    insertFloorPerSec: number;
    ratioToFloor: number;
    backlog: { orders: number; paused: boolean };
    afterPurchase: { atRest: boolean };
  };
  invariants: { ok: boolean; oversold: number; lost: number; duplicates: number; checks: { ok: boolean; goods: string }[] };
  targets: { name: string; ok: boolean; actual: string }[];
  model: {
    model: {
      inputs: { cls: string; callsPerPurchase: number; requestsPerPurchase: number; cpuMsPerCall: number | null }[];
      scenarios: { shards: number; production: { purchasesPerSec: number | null; limitedBy: string | null } }[];
    };
    journey: {
      shoppers: number;
      accepted: number;
      final: number;
      resultPolls: number;
      pollsPerPurchase: number;
      perPurchase: { cls: string; requestsPerPurchase: number }[];
      scenarios: { shards: number; production: { purchasesPerSec: number | null } }[];
      cpuUsPerJourney: number | null;
      grossCpuUsPerJourney: number | null;
      restingCpuMsPerSecond: number | null;
    };
  };
  objectDelay: Phase & { delayMs: number; accepted: number; sequentialCallsP50: number };
  shards: {
    shardsAsked: number;
    shardsReported: number;
    soldAll: boolean;
    accepted: number;
    acceptedPerSec: number;
    ratioToOneShard: number | null;
    oneShardAfter: { acceptedPerSec: number };
    purchasesPerCall: number | null;
    objectCalls: Record<string, Record<string, { calls: number; items: number }>>;
  };
  heldReads: {
    reads: number;
    held: number;
    heapBytesPerRead: number | null;
    sampledBytesPerRead: { object: number; worker: number; runtime: number } | null;
    readsPer128Mb: number | null;
    allFinal: boolean;
    outcomes: Record<string, number>;
  };
  queue: {
    shoppers: number;
    joined: number;
    admitted: number;
    accepted: number;
    liveMessages: number;
    timedOut: number;
    etaError: { byTenthS: number[] };
    joinAnsweredMs: { p50: number };
    measured: { frontLagMs: number | null; lateMs: number | null };
    coordinator: { shards: number; waiting: number; reportKB: number; ms: number }[];
  };
  classic: { skipped: string } | (Phase & { accepted: number; invariants: { ok: boolean } });
  profile: Record<string, { busyPct: number; allocatedKbPerRequest: number | null }>;
};

describe('npm run bench', () => {
  let out: string | undefined;

  afterAll(async () => {
    if (out) {
      await rm(out, { recursive: true, force: true });
    }
  });

  it('measures every phase in one short run and writes latest.json with the invariants holding', async () => {
    out = await mkdtemp(join(tmpdir(), 'edge-seckill-bench-'));
    const args = [
      ...['--duration', '2', '--warmup', '1', '--connections', '20', '--consumer-messages', '500'],
      ...['--queue-shoppers', '60', '--admit-per-second', '100', '--held-reads', '200', '--out', out, '--json', '--profile'],
    ];
    if (process.env.TEST_DATABASE_URL) {
      args.push('--database-url', process.env.TEST_DATABASE_URL);
    }
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        ...tsNode(script, ...args),
        { maxBuffer: 64 * 1024 * 1024, env: { ...process.env, DATABASE_URL: '' } },
        (error, stdout, stderr) => {
          resolve({ code: error && typeof error.code === 'number' ? error.code : error ? -1 : 0, stdout, stderr });
        },
      );
    });
    expect(run.code, run.stderr).toBe(0);

    const files = await readdir(out);
    expect(files).toContain('latest.json');
    expect(files.filter((f) => f.endsWith('.json'))).toHaveLength(2);
    const latest = JSON.parse(await readFile(join(out, 'latest.json'), 'utf8')) as Result;
    expect(JSON.parse(run.stdout)).toEqual(latest);

    // Straight to the Worker's own socket unless --entry-worker; the objects' storage on tmpfs
    // where the machine has one, and gone with the run.
    const tmpfs = existsSync('/dev/shm');
    expect(latest.options).toMatchObject({
      connections: 20,
      durationS: 2,
      entryWorker: false,
      servicesInProcess: false,
      objectStorage: tmpfs ? 'tmpfs' : 'disk',
    });
    if (tmpfs) {
      expect((await readdir('/dev/shm')).filter((f) => f.startsWith('edge-seckill-bench-objects-'))).toEqual([]);
    }
    expect(latest.machine.cpus).toBeGreaterThan(0);
    for (const phase of [latest.floor, latest.purchase, latest.soldOut, latest.goodsPage]) {
      expect(phase.rps).toBeGreaterThan(0);
      expect(phase.requests).toBeGreaterThan(0);
      expect(phase.p50Ms).toBeLessThanOrEqual(phase.p99Ms);
    }
    // Each phase answered what it was there to measure.
    expect(Object.keys(latest.floor.outcomes)).toEqual(['200']);
    expect(latest.purchase.outcomes['202']).toBe(latest.purchase.requests);
    expect(latest.purchase.accepted).toBe(latest.purchase.requests);
    expect(Object.keys(latest.soldOut.outcomes)).toEqual(['410 SOLD_OUT']);
    expect(latest.purchase.ratioToFloor).toBeCloseTo(latest.purchase.rps / latest.floor.rps, 1);
    // The Worker's own histogram saw every purchase the load generator counted (and those still
    // in flight when it stopped counting, at most one a connection), each within the histogram's
    // last bound; its mean is the Worker's part of the load generator's.
    const inWorker = latest.purchase.inWorker;
    expect(inWorker.requests).toBeGreaterThanOrEqual(latest.purchase.requests);
    expect(inWorker.requests).toBeLessThanOrEqual(latest.purchase.requests + latest.options.connections);
    expect(inWorker.within.at(-1)?.share).toBe(1);
    expect(inWorker.meanMs).toBeGreaterThanOrEqual(0);

    expect(latest.consumer.backlog.orders).toBe(500);
    // The backlog was all queued before the consumer started on it (the consumerPaused switch).
    expect(latest.consumer.backlog.paused).toBe(true);
    expect(latest.consumer.ordersPerSec).toBeGreaterThan(0);
    expect(latest.consumer.insertFloorPerSec).toBeGreaterThan(0);
    expect(latest.consumer.afterPurchase.atRest).toBe(true);

    expect(latest.invariants).toMatchObject({ ok: true, oversold: 0, lost: 0, duplicates: 0 });
    expect(latest.invariants.checks.length).toBeGreaterThan(10);
    expect(latest.targets).toHaveLength(10);
    expect(latest.targets.find((t) => t.name.startsWith('zero oversold'))?.ok).toBe(true);
    // Every phase was measured; the classic stack's only where a redis-server and PostgreSQL answer.
    const classicSkipped = 'skipped' in latest.classic;
    for (const t of latest.targets.filter((x) => !(classicSkipped && x.name.includes('classic stack')))) {
      expect(t.actual).not.toMatch(/not measured/);
    }
    // The printed table has the model and a verdict on every target.
    const printed = formatBench(latest as unknown as Parameters<typeof formatBench>[0]);
    expect(printed).toContain('Capacity model');
    expect(printed).toMatch(/purchase in the Worker's code .*p99 in \d+-\d+ ms/);
    expect(printed.split('\n').filter((l) => /^ {2}(met {3}|MISSED) {2}/.test(l))).toHaveLength(10);

    // The capacity model: the purchase reached the stock object and the guard shards, and the
    // profile found CPU in the stock object's code.
    const inputs = new Map(latest.model.model.inputs.map((i) => [i.cls, i]));
    expect(inputs.get('GoodsStock')?.requestsPerPurchase).toBeGreaterThanOrEqual(1);
    expect(inputs.get('EdgeGuard')?.callsPerPurchase).toBeGreaterThan(0);
    expect(inputs.get('GoodsStock')?.cpuMsPerCall).toBeGreaterThan(0);
    expect(latest.model.model.scenarios.map((x) => x.shards)).toEqual([1, 8, 16, 64]);
    expect(latest.model.model.scenarios.every((x) => x.production.limitedBy !== null)).toBe(true);
    expect(latest.model.journey.accepted).toBe(latest.model.journey.shoppers);
    expect(latest.model.journey.perPurchase.map((i) => i.cls)).toContain('GoodsStock');
    // Every journey polled its result until it was final; with the mirror off each poll before
    // the final one asked the stock object, so the journey asks it more than the purchase did.
    const journey = latest.model.journey;
    expect(journey.final).toBe(journey.accepted);
    expect(journey.resultPolls).toBeGreaterThanOrEqual(journey.accepted);
    expect(journey.pollsPerPurchase).toBeCloseTo(journey.resultPolls / journey.accepted, 2);
    const stockInJourney = journey.perPurchase.find((i) => i.cls === 'GoodsStock')?.requestsPerPurchase ?? 0;
    expect(stockInJourney).toBeGreaterThan(inputs.get('GoodsStock')?.requestsPerPurchase ?? 0);
    expect(journey.scenarios.map((x) => x.shards)).toEqual([1, 8, 16, 64]);
    // A journey's CPU is the phase's less the stack's at rest, measured before it (on Linux).
    expect(journey.restingCpuMsPerSecond).toBeGreaterThanOrEqual(0);
    expect(journey.cpuUsPerJourney).toBeGreaterThan(0);
    expect(journey.grossCpuUsPerJourney).toBeGreaterThanOrEqual(journey.cpuUsPerJourney ?? Number.POSITIVE_INFINITY);

    // Purchases went through under the delay; each waited on at least one delayed call.
    expect(latest.objectDelay.delayMs).toBe(50);
    expect(latest.objectDelay.accepted).toBeGreaterThan(0);
    expect(latest.objectDelay.p50Ms).toBeGreaterThanOrEqual(50);

    // Goods page views of a goods of 8 shards: answered, and its shards asked about once a second
    // (8 calls), not each of them on every view (8 calls a view).
    expect(Object.keys(latest.goodsPage.outcomes)).toEqual(['200']);
    expect(latest.goodsPage.shards).toBe(8);
    const pageCalls = Math.round(latest.goodsPage.stockCallsPerView * latest.goodsPage.requests);
    expect(pageCalls).toBeLessThanOrEqual(8 * (Math.ceil(latest.goodsPage.durationS) + 2));

    // Joins of an allowlist goods: a goods-scoped one answers from the isolate's copy of the list
    // once it has loaded, an activity-scoped one from that and the copy of the activity's holders.
    const [byActivity, byGoods] = latest.allowlistJoins;
    expect(byActivity).toMatchObject({ limitScope: 'activity' });
    expect(byGoods).toMatchObject({ limitScope: 'goods' });
    for (const joins of latest.allowlistJoins) {
      expect(Object.keys(joins.outcomes)).toEqual(['200']);
    }
    // Postgres statements a request, counting the stack's own in the background (the crons, the
    // copies of earlier phases renewing): about 1 where every request asks Postgres, a few
    // hundredths in a full run, and up to a third in this short one on a busy machine.
    const SQL_PER_REQUEST_AT_MOST = 0.5;
    expect(byActivity?.sqlPerJoin).toBeLessThan(SQL_PER_REQUEST_AT_MOST);
    expect(byGoods?.sqlPerJoin).toBeLessThan(SQL_PER_REQUEST_AT_MOST);

    // Page loads of a sale under way: the units each shopper holds from the isolate's copy, once it has loaded.
    expect(Object.keys(latest.eligibilityViews.outcomes)).toEqual(['200']);
    expect(latest.eligibilityViews.requests).toBeGreaterThan(100);
    expect(latest.eligibilityViews.sqlPerView).toBeLessThan(SQL_PER_REQUEST_AT_MOST);

    // A journey by route under the crowd: each step's shoppers answered, the purchases accepted,
    // the CPU a request read for each route and summed.
    expect(latest.journeyRoutes.routes.map((r) => r.route)).toEqual([
      'POST .../challenge',
      'POST .../token',
      'POST /api/seckill/do/:path',
      'GET .../result/:requestId',
    ]);
    expect(latest.journeyRoutes.routes.map((r) => Object.keys(r.outcomes))).toEqual([['200'], ['200'], ['202'], ['200']]);
    for (const route of latest.journeyRoutes.routes) {
      expect(route.requests).toBeGreaterThan(0);
      expect(route.cpuUsPerRequest).toBeGreaterThan(0);
    }
    expect(latest.journeyRoutes.cpuUsPerJourney).toBe(latest.journeyRoutes.routes.reduce((sum, r) => sum + (r.cpuUsPerRequest ?? 0), 0));

    // The sharded goods sold every unit; the queue admitted and sold to every shopper who joined.
    expect(latest.shards).toMatchObject({ shardsAsked: 8, shardsReported: 8, soldAll: true });
    expect(latest.shards.accepted).toBeGreaterThan(0);
    // Its timed purchases' calls were counted: every accepted purchase rode in a reserveMany call.
    const reserve = latest.shards.objectCalls.GoodsStock?.reserveMany;
    expect(reserve?.calls).toBeGreaterThan(0);
    expect(reserve?.items).toBeGreaterThanOrEqual(latest.shards.accepted);
    expect(latest.shards.purchasesPerCall).toBeGreaterThan(0);
    // Beside one shard measured on both sides of it: the purchase phase, and a goods of one shard right after.
    expect(latest.shards.oneShardAfter.acceptedPerSec).toBeGreaterThan(0);
    const oneShard = (latest.purchase.acceptedPerSec + latest.shards.oneShardAfter.acceptedPerSec) / 2;
    expect(latest.shards.ratioToOneShard).toBeCloseTo(latest.shards.acceptedPerSec / oneShard, 1);
    expect(printed).toMatch(/x of 1 shard \([\d,]+ before, [\d,]+ right after\)/);
    expect(latest.queue).toMatchObject({ shoppers: 60, joined: 60, admitted: 60, accepted: 60, timedOut: 0 });
    // The coordinator's decision measured at the default and the largest room shard count.
    expect(latest.queue.coordinator.map((d) => d.shards)).toEqual([32, 128]);
    for (const d of latest.queue.coordinator) {
      expect(d.waiting).toBeGreaterThanOrEqual(100_000);
      expect(d.ms).toBeGreaterThan(0);
      expect(d.reportKB).toBeGreaterThan(0);
    }
    expect(latest.queue.liveMessages).toBeGreaterThanOrEqual(60);
    // The ETA's error along the line, a tenth at a time (and printed with the table).
    expect(latest.queue.etaError.byTenthS).toHaveLength(10);
    expect(printed).toContain('by tenth of the line in join order');
    // Counted from each join's answer, whose time it prints.
    expect(latest.queue.joinAnsweredMs.p50).toBeGreaterThan(0);
    expect(printed).toContain("from each join's answer");
    // The room's own delays as its coordinator measured them, from the stats.
    expect(printed).toContain("the room's measured delays");
    expect(latest.queue.measured).toHaveProperty('frontLagMs');
    // Every held read was held at once in its stock shard and answered SUCCESS once the consumer
    // resumed; what they held of the isolate's heap was measured, the object's part apart.
    expect(latest.heldReads).toMatchObject({ reads: 200, held: 200, allFinal: true, outcomes: { SUCCESS: 200 } });
    expect(latest.heldReads.heapBytesPerRead).toBeGreaterThan(0);
    expect(latest.heldReads.sampledBytesPerRead?.object).toBeGreaterThan(0);
    expect(latest.heldReads.readsPer128Mb).toBeGreaterThan(0);
    expect(printed).toContain('Held result reads: 200 of 200 held at once');
    for (const name of ['8 shards', '1 shard, after the shards', 'waiting room', 'object delay 50 ms', 'object CPU', 'held result reads']) {
      expect(latest.invariants.checks.filter((c) => c.goods === name).length).toBeGreaterThan(0);
    }
    if (!('skipped' in latest.classic)) {
      expect(latest.classic.accepted).toBeGreaterThan(0);
      expect(latest.classic.invariants.ok).toBe(true);
    }

    // --profile: each profiled phase's CPU and heap profiles beside the other files, and what it
    // allocated a request. A purchase (token, JWT, body, object call, order) allocates more than a sold-out
    // answer, and that more than the health route.
    expect(files.filter((f) => f.endsWith('.cpuprofile')).sort()).toEqual(
      ['floor', 'purchase', 'shards', 'soldOut'].map((name) => expect.stringMatching(new RegExp(`\\.${name}\\.cpuprofile$`))),
    );
    expect(files.filter((f) => f.endsWith('.heapprofile'))).toHaveLength(4);
    const allocated = (name: string) => latest.profile[name]?.allocatedKbPerRequest ?? 0;
    expect(allocated('floor')).toBeGreaterThan(0);
    expect(allocated('soldOut')).toBeGreaterThan(allocated('floor'));
    expect(allocated('purchase')).toBeGreaterThan(allocated('soldOut'));
    // About 50 s alone: fifteen phases of fixed length and the waits between them. Beside two other
    // stacks on two cores it took more than the node project's 120 s once (a CI run of 908 s).
  }, 300_000);
});
