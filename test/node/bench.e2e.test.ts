// `npm run bench` in miniature: every phase for a second or two, then the result files. Speed is
// what the bench measures, not what this test asserts; it checks that a run produces the
// documented result and that the invariants held through it.
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
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
  options: { connections: number; durationS: number };
  floor: Phase;
  purchase: Phase & { ratioToFloor: number; accepted: number };
  soldOut: Phase & { ratioToFloor: number };
  consumer: {
    ordersPerSec: number;
    insertFloorPerSec: number;
    ratioToFloor: number;
    backlog: { orders: number };
    afterPurchase: { atRest: boolean };
  };
  invariants: { ok: boolean; oversold: number; lost: number; duplicates: number; checks: { ok: boolean }[] };
  targets: { name: string; ok: boolean; actual: string }[];
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
    const args = ['--duration', '2', '--warmup', '1', '--connections', '20', '--consumer-messages', '500', '--out', out, '--json'];
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

    expect(latest.options).toMatchObject({ connections: 20, durationS: 2 });
    expect(latest.machine.cpus).toBeGreaterThan(0);
    for (const phase of [latest.floor, latest.purchase, latest.soldOut]) {
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

    expect(latest.consumer.backlog.orders).toBe(500);
    expect(latest.consumer.ordersPerSec).toBeGreaterThan(0);
    expect(latest.consumer.insertFloorPerSec).toBeGreaterThan(0);
    expect(latest.consumer.afterPurchase.atRest).toBe(true);

    expect(latest.invariants).toMatchObject({ ok: true, oversold: 0, lost: 0, duplicates: 0 });
    expect(latest.invariants.checks.length).toBeGreaterThan(10);
    expect(latest.targets).toHaveLength(6);
    expect(latest.targets.find((t) => t.name.startsWith('zero oversell'))?.ok).toBe(true);
  });
});
