// The bench's result: the JSON document (bench/results/<time>.json and latest.json, ignored by
// git; docs/bench-reference.json is the committed reference run), the performance targets with
// a verdict each, and the table printed at the end.
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { fmt, formatOutcomes, round, table } from '../load/metrics.ts';
import type { PhaseResult } from './cannon.ts';
import type { batchSummary, ConsumerRun, combineInsertFloors } from './consumer.ts';
import type { BenchInvariants } from './invariants.ts';
import type { CpuProfile, HeapProfile, ProfileSummary } from './profile.ts';
import { formatExtras } from './report-extras.ts';
import type { QueuePhase } from './room.ts';
import type { Target, TargetInputs } from './targets.ts';
import { formatRange, shareWithin } from './worker-latency.ts';

export type Machine = {
  cpus: number;
  cpuModel: string;
  memoryGb: number;
  node: string;
  platform: string;
  loadAverageAtStart: number[];
};
export type Environment = { machine: Machine; commit: { sha: string; dirty: boolean } | null };
type BatchSummary = ReturnType<typeof batchSummary>;
type Ratioed = { ratioToFloor: number | null };

/** The result document, as far as the targets and the table read it. */
export type BenchResult = Environment &
  Omit<TargetInputs, 'consumer' | 'options'> & {
    startedAt: string;
    database: string;
    options: {
      durationS: number;
      connections: number;
      idempotencyKeys: boolean;
      assets: boolean;
      entryWorker: boolean;
      /** Absent in results of runs before the option (they ran the services in process). */
      servicesInProcess?: boolean;
      /** Absent in results of runs before the option (their objects' storage was on disk). */
      objectStorage?: 'tmpfs' | 'disk';
      redis: boolean;
    };
    queue: QueuePhase | null;
    /** The floor's two runs (before the purchase phase, after the sold-out phase); `floor` is both together. */
    floorRuns?: { before: PhaseResult; after: PhaseResult; drift: number };
    consumer: Ratioed & {
      ordersPerSec: number;
      insertFloorPerSec: number;
      backlog: ConsumerRun;
      batches: BatchSummary;
      insertFloor: ReturnType<typeof combineInsertFloors>;
      afterPurchase: { orders: number; drainMs: number; ordersPerSec: number; batches: BatchSummary; duringPhase: BatchSummary };
    };
    invariants: BenchInvariants;
    workerEvents: Record<string, number>;
    profile?: Record<string, ProfileSummary & { allocatedKbPerRequest: number | null }>;
    targets: Target[];
  };

function git(args: string[]): string | undefined {
  try {
    return execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

/** The machine and the code the numbers belong to. */
export function environment(): Environment {
  const cpu = cpus();
  const sha = git(['rev-parse', 'HEAD']);
  const dirty = git(['status', '--porcelain']);
  return {
    machine: {
      cpus: cpu.length,
      cpuModel: cpu[0]?.model ?? 'unknown',
      memoryGb: round(totalmem() / 2 ** 30),
      node: process.version,
      platform: `${process.platform}-${process.arch}`,
      loadAverageAtStart: loadavg().map((x) => round(x, 2)),
    },
    commit: sha ? { sha, dirty: Boolean(dirty) } : null,
  };
}

const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? round(a / b, 2) : null);

/** The phases as `{ rps, p50Ms, ... }` plus their ratios to the floors. */
export function withRatios<
  R extends {
    floor: PhaseResult;
    purchase: PhaseResult;
    soldOut: PhaseResult;
    consumer: { ordersPerSec: number; insertFloorPerSec: number };
  },
>(r: R) {
  return {
    ...r,
    purchase: { ...r.purchase, ratioToFloor: ratio(r.purchase.rps, r.floor.rps) },
    soldOut: { ...r.soldOut, ratioToFloor: ratio(r.soldOut.rps, r.floor.rps) },
    consumer: { ...r.consumer, ratioToFloor: ratio(r.consumer.ordersPerSec, r.consumer.insertFloorPerSec) },
  };
}

/** Writes `<out>/<time>.json`, `<out>/latest.json` and any CPU and heap profiles; returns the paths. */
export async function saveResult(
  out: string,
  result: { startedAt: string },
  profiles: Record<string, CpuProfile> = {},
  heapProfiles: Record<string, HeapProfile> = {},
): Promise<{ file: string; latest: string }> {
  await mkdir(out, { recursive: true });
  const stamp = result.startedAt.replace(/[:.]/g, '-');
  const file = join(out, `${stamp}.json`);
  const text = `${JSON.stringify(result, null, 2)}\n`;
  await writeFile(file, text);
  for (const [name, profile] of Object.entries(profiles)) {
    await writeFile(join(out, `${stamp}.${name}.cpuprofile`), JSON.stringify(profile));
  }
  for (const [name, profile] of Object.entries(heapProfiles)) {
    await writeFile(join(out, `${stamp}.${name}.heapprofile`), JSON.stringify(profile));
  }
  const latest = join(out, 'latest.json');
  await writeFile(latest, text);
  return { file, latest };
}

/** The table printed at the end of a run. */
export function formatBench(r: BenchResult): string {
  const m = r.machine;
  const lines = [
    `edge-seckill bench, ${r.startedAt}${r.commit ? `, commit ${r.commit.sha.slice(0, 10)}${r.commit.dirty ? ' (uncommitted changes)' : ''}` : ''}`,
    `${m.cpus} CPUs (${m.cpuModel}), Node ${m.node}, Postgres: ${r.database}, mirror ${r.options.redis ? 'on' : 'off'}, ` +
      `static-assets layer ${r.options.assets ? 'on' : 'off'}, ` +
      `${r.options.entryWorker ? "through Miniflare's entry worker" : "straight to the Worker's socket"}, ` +
      `Postgres and its bridge ${r.options.servicesInProcess !== false ? "in the load generator's process" : 'in a process of their own'}, ` +
      `the objects' storage ${r.options.objectStorage === 'tmpfs' ? 'on tmpfs' : 'on disk'}, load average ${m.loadAverageAtStart.join(' ')}`,
    `autocannon, ${r.options.connections} connections, ${r.options.durationS} s per phase` +
      `${r.options.idempotencyKeys ? ', Idempotency-Key on every purchase' : ''}`,
    '',
  ];
  const row = (name: string, p: PhaseResult, ratioText: string) => [
    name,
    fmt(p.requests),
    fmt(p.rps),
    fmt(p.p50Ms),
    fmt(p.p90Ms),
    fmt(p.p99Ms),
    fmt(p.maxMs),
    p.cpuUsPerRequest === null ? '-' : fmt(p.cpuUsPerRequest),
    ratioText,
    formatOutcomes(p.outcomes),
  ];
  lines.push(
    table([
      ['phase', 'requests', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'CPU µs/req', 'vs floor', 'outcomes'],
      row('floor: GET /api/health (both runs)', r.floor, '1.00x'),
      row('purchase while stock lasts', r.purchase, `${r.purchase.ratioToFloor}x`),
      row('sold out', r.soldOut, `${r.soldOut.ratioToFloor}x`),
    ]),
  );
  const inWorker = r.purchase.inWorker;
  if (inWorker && inWorker.requests > 0) {
    const within = shareWithin(inWorker, 100);
    lines.push(
      `purchase in the Worker's code (its own latency histogram, ${fmt(inWorker.requests)} requests): mean ${fmt(inWorker.meanMs, 1)} ms, ` +
        `p50 in ${formatRange(inWorker.p50)}, p99 in ${formatRange(inWorker.p99)}` +
        `${within === undefined ? '' : `, ${fmt(within * 100, 1)}% within 100 ms`}; the load generator's mean ${fmt(r.purchase.meanMs, 1)} ms ` +
        `and p99 ${fmt(r.purchase.p99Ms)} ms add the runtime's line before and after that code (alone, the floor's p99: ${fmt(r.floor.p99Ms)} ms)`,
    );
  }
  if (r.floorRuns) {
    const { before, after, drift } = r.floorRuns;
    lines.push(
      `floor: ${fmt(before.rps)} req/s (${fmt(before.cpuUsPerRequest)} µs/req) before the purchase phase, ` +
        `${fmt(after.rps)} req/s (${fmt(after.cpuUsPerRequest)} µs/req) after the sold-out phase: ${drift}x` +
        `${Math.abs(drift - 1) > 0.15 ? ', the machine changed speed during the run' : ''}; the ratios use both`,
    );
  }
  const c = r.consumer;
  lines.push('');
  lines.push(
    table([
      ['consumer', 'orders', 'orders/s', 'batch p50 ms', 'batch p90 ms', 'batch max ms', 'vs floor'],
      [
        c.backlog.paused ? `backlog queued (${fmt(c.backlog.sendMs)} ms), then consumed` : 'backlog straight to the queue',
        fmt(c.backlog.orders),
        fmt(c.ordersPerSec),
        fmt(c.batches.p50Ms),
        fmt(c.batches.p90Ms),
        fmt(c.batches.maxMs),
        `${c.ratioToFloor}x`,
      ],
      [
        `plain INSERT, ${c.insertFloor.batchSize} rows each (before and after)`,
        fmt(c.insertFloor.rows),
        fmt(c.insertFloorPerSec),
        fmt(c.insertFloor.statement.p50Ms, 1),
        fmt(c.insertFloor.statement.p90Ms, 1),
        fmt(c.insertFloor.statement.maxMs, 1),
        `1.00x (${c.insertFloor.runs.map((x) => fmt(x)).join(' and ')} rows/s)`,
      ],
      [
        'after the purchase phase',
        fmt(c.afterPurchase.orders),
        fmt(c.afterPurchase.ordersPerSec),
        fmt(c.afterPurchase.batches.p50Ms),
        fmt(c.afterPurchase.batches.p90Ms),
        fmt(c.afterPurchase.batches.maxMs),
        `${fmt(c.afterPurchase.duringPhase?.batches)} batches during, drained ${fmt(c.afterPurchase.drainMs)} ms after`,
      ],
    ]),
  );
  lines.push(...formatExtras(r));
  lines.push('');
  lines.push('Targets:');
  for (const t of r.targets) {
    lines.push(`  ${t.ok ? 'met   ' : 'MISSED'}  ${t.name}: ${t.actual}`);
  }
  lines.push('');
  lines.push(`Invariants: ${r.invariants.ok ? 'hold' : 'VIOLATED'}`);
  for (const check of r.invariants.checks.filter((x) => !x.ok)) {
    lines.push(`  FAIL  ${check.goods}: ${check.name}: ${check.detail}`);
  }
  for (const [name, p] of Object.entries(r.profile ?? {})) {
    lines.push('');
    const allocated = p.allocatedKbPerRequest !== null ? `; ${fmt(p.allocatedKbPerRequest, 1)} KB allocated a request` : '';
    lines.push(`CPU profile of the ${name} phase: isolate busy ${p.busyPct}% of ${fmt(p.sampledMs)} ms sampled${allocated}`);
    lines.push(
      table([
        ['self', 'ms', '%', 'inclusive', 'ms', '%'],
        ...p.self
          .slice(0, 15)
          .map((s, i) => [s.fn, fmt(s.ms), fmt(s.pct, 1), p.inclusive[i]?.fn ?? '', fmt(p.inclusive[i]?.ms), fmt(p.inclusive[i]?.pct, 1)]),
      ]),
    );
  }
  const events = Object.entries(r.workerEvents);
  if (events.length > 0) {
    lines.push(`Worker log events: ${events.map(([k, v]) => `${k} ${fmt(v)}`).join(', ')}`);
  }
  return lines.join('\n');
}
