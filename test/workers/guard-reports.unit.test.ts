import { describe, expect, it } from 'vitest';
import { REPORTS_PER_SECOND, ReportPace } from '../../durable-objects/edge-guard/pace';
import {
  CALLS_PER_ROUND,
  limiter,
  planRound,
  REPORT_INTERVAL_MS,
  reportIntervalMs,
  scheduleGuardReport,
  spreadBans,
} from '../../workers/edge/guard-reports';
import type { BanPolicy, GuardReply, KeyReport } from '../../workers/kernel/contract';
import { sleep } from '../../workers/kernel/sleep';
import { UPKEEP_CALL_MS } from '../../workers/kernel/within';

// A busy isolate has keys on every guard shard; a report round calls at most CALLS_PER_ROUND of
// them, the busiest first, and no shard's keys wait for ever.

const key = (id: string, hits: number, extra: Partial<KeyReport> = {}): KeyReport => ({ id, hits, windows: [], ...extra });
/** Keys named `s<shard>:<n>` belong to shard `s<shard>`. */
const shardOf = (id: string) => id.split(':')[0] ?? id;

/** Guard shards answering every report in 120 ms through `heard`, and the waitUntil that keeps the rounds. */
function shardsThatAnswer(heard: (report: { keys: KeyReport[] }) => void, slowdown?: number) {
  const shard = {
    async account(report: { keys: KeyReport[] }): Promise<GuardReply> {
      heard(report);
      await sleep(120);
      return { bans: [], lifted: [], shares: [], ...(slowdown === undefined ? {} : { slowdown }) };
    },
  };
  const env = { EDGE_GUARD: { idFromName: (name: string) => name, get: () => shard } } as unknown as Env;
  const kept: Promise<unknown>[] = [];
  const waitUntil = (promise: Promise<unknown>) => {
    kept.push(promise);
  };
  return { env, kept, waitUntil };
}

const POLICY: BanPolicy = { threshold: 1_000_000, windowMs: 10_000, durationMs: 60_000 };

describe('report rounds', () => {
  it('send the busiest shards first, at most CALLS_PER_ROUND a round, and keep the rest for later rounds', () => {
    const waiting = new Map<string, { keys: KeyReport[]; rounds: number }>();
    const keys = Array.from({ length: 40 }, (_, i) => key(`s${i}:a`, i));
    const first = planRound(waiting, keys, shardOf, CALLS_PER_ROUND);
    expect(first).toHaveLength(CALLS_PER_ROUND);
    expect(first.map(([shard]) => shard)).toEqual(Array.from({ length: CALLS_PER_ROUND }, (_, i) => `s${39 - i}`));
    expect(waiting.size).toBe(40 - CALLS_PER_ROUND);
    // Counts that arrive meanwhile join their shard's waiting batch.
    const second = planRound(waiting, [key('s0:b', 1)], shardOf, CALLS_PER_ROUND);
    expect(second).toHaveLength(CALLS_PER_ROUND);
    let rounds = 2;
    let sent = first.length + second.length;
    let s0: KeyReport[] | undefined;
    while (waiting.size > 0) {
      const round = planRound(waiting, [], shardOf, CALLS_PER_ROUND);
      s0 ??= round.find(([shard]) => shard === 's0')?.[1];
      sent += round.length;
      rounds++;
    }
    expect(sent).toBe(40);
    expect(rounds).toBe(3);
    expect(s0?.map((k) => k.id)).toEqual(['s0:a', 's0:b']);
  });

  it('put bans and ban checks ahead of any count, and a shard that waited long ahead of busier ones', () => {
    const waiting = new Map<string, { keys: KeyReport[]; rounds: number }>();
    const busy = (round: number) => Array.from({ length: 20 }, (_, i) => key(`b${i}:${round}`, 1000));
    planRound(waiting, [key('quiet:x', 1)], shardOf, 0);
    const withBan = planRound(
      waiting,
      [...busy(0), key('banned:y', 0, { bannedUntil: 1 }), key('check:z', 0, { check: true })],
      shardOf,
      2,
    );
    expect(withBan.map(([shard]) => shard).sort()).toEqual(['banned', 'check']);
    // The quiet shard waits behind busier ones, but not for more than a few rounds.
    let round = 1;
    let quietAt: number | undefined;
    while (quietAt === undefined && round < 20) {
      const sent = planRound(waiting, busy(round), shardOf, CALLS_PER_ROUND);
      if (sent.some(([shard]) => shard === 'quiet')) {
        quietAt = round;
      }
      round++;
    }
    expect(quietAt).toBeDefined();
    expect(quietAt).toBeLessThanOrEqual(8);
  });

  it('go one round at a time, at most CALLS_PER_ROUND calls an interval, while a busy isolate always has shards waiting', async () => {
    // Guard shards that answer in 120 ms, counted.
    let calls = 0;
    let inFlight = 0;
    let mostInFlight = 0;
    const { env, kept, waitUntil } = shardsThatAnswer(() => {
      calls++;
      inFlight++;
      mostInFlight = Math.max(mostInFlight, inFlight);
      setTimeout(() => inFlight--, 120);
    });
    const policy = POLICY;
    // Three new shoppers every 20 ms for 3 s: about 75 keys a round over the 128 shards, more
    // shards than a round calls, so some always wait and every round leads to another.
    const started = Date.now();
    let shopper = 0;
    while (Date.now() - started < 3_000) {
      for (let i = 0; i < 3; i++) {
        limiter.admit([{ id: `user:reports-${shopper++}`, scope: 'purchase', perSecond: 10 }], policy, Date.now());
      }
      scheduleGuardReport(env, policy, waitUntil);
      await sleep(20);
    }
    const rounds = Math.floor((Date.now() - started) / REPORT_INTERVAL_MS) + 1;
    expect(calls).toBeGreaterThan(CALLS_PER_ROUND);
    expect(calls).toBeLessThanOrEqual(CALLS_PER_ROUND * rounds);
    expect(mostInFlight).toBeLessThanOrEqual(CALLS_PER_ROUND);
    // The rounds end once nothing waits.
    await Promise.all(kept);
  }, 30_000);

  it('report what a request counted during a round, with no request after it to ask', async () => {
    const heard: string[] = [];
    const { env, kept, waitUntil } = shardsThatAnswer((report) => heard.push(...report.keys.map((k) => k.id)));
    const policy = POLICY;
    const admitOne = (id: string) => {
      limiter.admit([{ id, scope: 'purchase', perSecond: 10 }], policy, Date.now());
      scheduleGuardReport(env, policy, waitUntil);
    };
    await sleep(REPORT_INTERVAL_MS);
    admitOne('user:first-of-a-quiet-isolate');
    // The round is under way (its shard answers in 120 ms): this request starts nothing.
    await sleep(30);
    admitOne('user:during-the-round');
    while (kept.length > 0) {
      await Promise.all(kept.splice(0));
    }
    expect(heard).toEqual(['user:first-of-a-quiet-isolate', 'user:during-the-round']);
  }, 30_000);

  it("space the rounds out by the shards' slowdown, and close up again when the shards stop asking", async () => {
    const heardAt: number[] = [];
    const slowed = shardsThatAnswer(() => heardAt.push(Date.now()), 4);
    const started = Date.now();
    let shopper = 0;
    // A new shopper every 100 ms for 3 s, every shard asking for rounds four times further apart.
    while (Date.now() - started < 3_000) {
      limiter.admit([{ id: `user:slowed-${shopper++}`, scope: 'purchase', perSecond: 10 }], POLICY, Date.now());
      scheduleGuardReport(slowed.env, POLICY, slowed.waitUntil);
      await sleep(100);
    }
    expect(reportIntervalMs()).toBe(4 * REPORT_INTERVAL_MS);
    // A round's calls go out within a few ms of each other; rounds are 2 s apart: at most three
    // in the 3 s (six or seven at the unslowed pace).
    const rounds = heardAt.filter((at, i) => i === 0 || at - (heardAt[i - 1] ?? 0) > 250).length;
    expect(rounds).toBeGreaterThan(0);
    expect(rounds).toBeLessThanOrEqual(3);
    await Promise.all(slowed.kept);
    // Shards that no longer ask (no slowdown in their replies): the next round restores the pace.
    const normal = shardsThatAnswer(() => undefined);
    limiter.admit([{ id: `user:slowed-${shopper++}`, scope: 'purchase', perSecond: 10 }], POLICY, Date.now());
    scheduleGuardReport(normal.env, POLICY, normal.waitUntil);
    while (normal.kept.length > 0) {
      await Promise.all(normal.kept.splice(0));
    }
    expect(reportIntervalMs()).toBe(REPORT_INTERVAL_MS);
  }, 30_000);
});

describe("a guard shard's pace", () => {
  /**
   * `isolates` isolates reporting to one guard shard: each makes a round every 0.5 s times the
   * slowdown it last heard, and one round in eight calls this shard (16 calls a round over 128
   * shards). Every shard answers about the same factor, so each round hears this shard's. The
   * reports the shard heard each second of `seconds`.
   */
  function fleet(isolates: number, seconds: number): number[] {
    const pace = new ReportPace();
    const TICK = 10;
    const end = seconds * 1000;
    const wheel: number[][] = Array.from({ length: end / TICK + 1 }, () => []);
    const rounds = new Array<number>(isolates).fill(0);
    for (let i = 0; i < isolates; i++) {
      wheel[Math.floor((i * REPORT_INTERVAL_MS) / isolates / TICK)]?.push(i);
    }
    const perSecond = new Array<number>(seconds).fill(0);
    let factor = 1;
    for (let k = 0; k < wheel.length - 1; k++) {
      const t = k * TICK;
      for (const i of wheel[k] ?? []) {
        rounds[i] = (rounds[i] ?? 0) + 1;
        if (((rounds[i] ?? 0) + i) % 8 === 0) {
          factor = pace.heardAt(1_700_000_000_000 + t);
          perSecond[Math.floor(t / 1000)] = (perSecond[Math.floor(t / 1000)] ?? 0) + 1;
        }
        wheel[k + Math.max(1, Math.round((REPORT_INTERVAL_MS * factor) / TICK))]?.push(i);
      }
    }
    return perSecond;
  }

  it('keeps a fleet of 8,000 isolates near its 500 reports a second, where the fleet would send 2,000, and leaves a small one alone', () => {
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const large = fleet(8_000, 60);
    // The first seconds are the unslowed fleet; the last 30 its steady pace.
    expect(large[0]).toBeGreaterThan(3 * REPORTS_PER_SECOND);
    const steady = large.slice(30);
    console.log(JSON.stringify({ isolates: 8_000, first: large.slice(0, 5), steadyMean: mean(steady), steadyMax: Math.max(...steady) }));
    expect(mean(steady)).toBeLessThanOrEqual(REPORTS_PER_SECOND * 1.15);
    expect(mean(steady)).toBeGreaterThanOrEqual(REPORTS_PER_SECOND * 0.7);
    expect(Math.max(...steady)).toBeLessThan(2 * REPORTS_PER_SECOND);
    // 1,500 isolates send 375 a second: under the aim, never slowed.
    const small = fleet(1_500, 20);
    expect(mean(small.slice(5))).toBeCloseTo(375, -1);
  });
});

describe('a guard shard that never answers', () => {
  const silent = {
    EDGE_GUARD: { idFromName: (name: string) => name, get: () => ({ account: () => new Promise(() => {}) }) },
  } as unknown as Env;

  it('holds a refused request carrying a new ban for UPKEEP_CALL_MS at most: the isolate enforces the ban regardless', async () => {
    const started = Date.now();
    await spreadBans(silent, [{ id: 'ip:203.0.113.77', until: Date.now() + 60_000 }], POLICY);
    const tookMs = Date.now() - started;
    expect(tookMs).toBeGreaterThanOrEqual(UPKEEP_CALL_MS - 50);
    expect(tookMs).toBeLessThan(UPKEEP_CALL_MS + 3_000);
  }, 30_000);

  it("leaves the isolate's report rounds free to run: the next round reaches a shard that answers", async () => {
    const heard: string[] = [];
    const answering = shardsThatAnswer((report) => heard.push(...report.keys.map((k) => k.id)));
    const kept: Promise<unknown>[] = [];
    await sleep(REPORT_INTERVAL_MS);
    limiter.admit([{ id: 'user:reported-to-a-silent-shard', scope: 'purchase', perSecond: 10 }], POLICY, Date.now());
    scheduleGuardReport(silent, POLICY, (p) => kept.push(p));
    // The silent round ends at its deadline; the run ends with it (its counts went with the call).
    const started = Date.now();
    await Promise.all(kept.splice(0));
    expect(Date.now() - started).toBeLessThan(UPKEEP_CALL_MS + 3_000);
    limiter.admit([{ id: 'user:after-the-silent-round', scope: 'purchase', perSecond: 10 }], POLICY, Date.now());
    scheduleGuardReport(answering.env, POLICY, answering.waitUntil);
    while (answering.kept.length > 0) {
      await Promise.all(answering.kept.splice(0));
    }
    expect(heard).toContain('user:after-the-silent-round');
  }, 30_000);
});
