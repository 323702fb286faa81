import { describe, expect, it } from 'vitest';
import { GuardLedger, LIFT_GRACE_MS } from '../../durable-objects/edge-guard/ledger';
import { ClientLimiter, LOCAL_BAN_TRUST_MS } from '../../workers/edge/client-limiter';
import { REPORT_INTERVAL_MS } from '../../workers/edge/guard-reports';
import type { AdmitKey, BanPolicy, GuardReply, GuardReport } from '../../workers/kernel/contract';

// How well a limit holds when every isolate decides it alone: N isolate limiters (the real
// module) report to one guard ledger (the real shard rules) every REPORT_INTERVAL_MS, each
// report and its reply delayed on the way, on a simulated clock. One client sprays requests
// over the isolates; we count what got through in every one-second window.

const NO_BANS: BanPolicy = { threshold: 1_000_000_000, windowMs: 10_000, durationMs: 600_000 };
const KEY: AdmitKey = { id: 'ip:203.0.113.7', scope: 'sale', perSecond: 10 };

type Run = { isolates: number; ratePerSecond: number; delayMs: number; seconds: number };

/** Admissions per one-second window after the first (steady state): the worst and the mean. */
function simulate({ isolates, ratePerSecond, delayMs, seconds }: Run): { worst: number; mean: number; first: number } {
  const limiters = Array.from({ length: isolates }, (_, i) => new ClientLimiter(`isolate-${i}`));
  const ledger = new GuardLedger();
  const bans = new Map<string, number>();
  type Event = { at: number; run: () => void };
  const events: Event[] = [];
  const later = (at: number, run: () => void) => events.push({ at, run });
  const admitted: number[] = [];
  const end = seconds * 1000;
  // Requests evenly spaced, dealt to isolates in turn (the worst case: every isolate sees the client).
  for (let n = 0; n * (1000 / ratePerSecond) < end; n++) {
    const at = Math.floor(n * (1000 / ratePerSecond));
    const limiter = limiters[n % isolates];
    later(at, () => {
      if (limiter?.admit([KEY], NO_BANS, at).verdict.ok) {
        admitted.push(at);
      }
    });
  }
  // Each isolate reports on its own phase; the report reaches the shard delayMs later, the reply as long again.
  limiters.forEach((limiter, i) => {
    for (let at = Math.floor((i * REPORT_INTERVAL_MS) / isolates); at < end; at += REPORT_INTERVAL_MS) {
      later(at, () => {
        const keys = limiter.takeReport();
        if (!keys) {
          return;
        }
        const report: GuardReport = { isolate: limiter.isolate, policy: NO_BANS, keys };
        later(at + delayMs, () => {
          const { reply } = ledger.account(report, bans, at + delayMs);
          const back: GuardReply = reply;
          later(at + 2 * delayMs, () => limiter.applyReply(back, at + 2 * delayMs, at));
        });
      });
    }
  });
  for (let i = 0; i < events.length; i++) {
    // Run in time order; events scheduled while running join the queue.
    events.sort((a, b) => a.at - b.at);
    const next = events.shift();
    next?.run();
    i = -1;
    if (events.length === 0) {
      break;
    }
  }
  const inWindow = (from: number) => admitted.filter((t) => t >= from && t < from + 1000).length;
  const windows: number[] = [];
  for (let from = 1000; from + 1000 <= end; from += 50) {
    windows.push(inWindow(from));
  }
  const steady = admitted.filter((t) => t >= 1000).length / (seconds - 1);
  return { worst: Math.max(...windows), mean: steady, first: inWindow(0) };
}

describe('a per-IP limit of 10/s across isolates that decide it alone', () => {
  it('holds exactly in one isolate, whatever the rate', () => {
    const { worst, first } = simulate({ isolates: 1, ratePerSecond: 200, delayMs: 50, seconds: 6 });
    expect(first).toBe(10);
    expect(worst).toBe(10);
  });

  // [isolates, one-way delay, most the mean may exceed the limit by, most one 1-s window may hold]
  for (const [isolates, delayMs, meanOver, worstWindow] of [
    [2, 100, 0.05, 13],
    [4, 100, 0.05, 13],
    [8, 100, 0.05, 13],
    [16, 100, 0.2, 15],
    [4, 250, 0.15, 22],
  ] as const) {
    it(`holds within bounds across ${isolates} isolates sprayed at 20x the limit, reports delayed ${delayMs} ms each way`, () => {
      const r = simulate({ isolates, ratePerSecond: 200, delayMs, seconds: 12 });
      console.log(JSON.stringify({ isolates, delayMs, ...r }));
      // The first second: every isolate admits up to the whole limit before any report is back.
      expect(r.first).toBeLessThanOrEqual(10 * isolates);
      // From then on each isolate holds its share: the mean is close to the limit, over or under...
      expect(r.mean).toBeLessThanOrEqual(10 * (1 + meanOver));
      expect(r.mean).toBeGreaterThanOrEqual(10 * 0.9);
      // ...and no one-second window holds much more.
      expect(r.worst).toBeLessThanOrEqual(worstWindow);
    });
  }

  it('lets a shopper within the limit through whichever isolates it lands on', () => {
    const r = simulate({ isolates: 4, ratePerSecond: 8, delayMs: 100, seconds: 10 });
    expect(r.mean).toBeGreaterThanOrEqual(7.5);
  });
});

describe('bans across isolates', () => {
  const policy: BanPolicy = { threshold: 20, windowMs: 10_000, durationMs: 600_000 };
  const key: AdmitKey = { id: 'ip:198.51.100.9', scope: 'sale', perSecond: 1_000 };

  /** One report round of `limiter` against `ledger` at `now`. */
  function round(limiter: ClientLimiter, ledger: GuardLedger, bans: Map<string, number>, now: number) {
    const keys = limiter.takeReport();
    if (!keys) {
      return;
    }
    const { reply, newBans } = ledger.account({ isolate: limiter.isolate, policy, keys }, bans, now);
    for (const ban of newBans) {
      bans.set(ban.id, ban.until);
    }
    limiter.applyReply(reply, now);
  }

  it('bans a client on the fleet’s count, though no isolate saw enough of it alone', () => {
    const [a, b] = [new ClientLimiter('a'), new ClientLimiter('b')];
    const ledger = new GuardLedger();
    const bans = new Map<string, number>();
    const now = 1_000_000;
    for (let i = 0; i < 15; i++) {
      expect(a.admit([key], policy, now + i).verdict.ok).toBe(true);
      expect(b.admit([key], policy, now + i).verdict.ok).toBe(true);
    }
    round(a, ledger, bans, now + 100);
    round(b, ledger, bans, now + 100);
    expect(bans.get(key.id)).toBe(now + 100 + policy.durationMs);
    // The isolate whose report crossed the threshold learns it at once; the other with its next report.
    expect(b.knownBan([key.id], now + 101)).toMatchObject({ id: key.id });
    expect(a.knownBan([key.id], now + 101)).toBeUndefined();
    a.admit([key], policy, now + 200);
    round(a, ledger, bans, now + 600);
    expect(a.knownBan([key.id], now + 601)).toMatchObject({ id: key.id });
  });

  it('spreads a ban one isolate decided, and lets go of it in every isolate once an operator lifts it', () => {
    const [a, b] = [new ClientLimiter('a'), new ClientLimiter('b')];
    const ledger = new GuardLedger();
    const bans = new Map<string, number>();
    const now = 2_000_000;
    let banned = 0;
    for (let i = 0; i <= policy.threshold; i++) {
      const { verdict, newBans } = a.admit([key], policy, now);
      banned += newBans.length;
      expect(verdict.ok).toBe(i < policy.threshold);
    }
    expect(banned).toBe(1);
    round(a, ledger, bans, now + 10);
    expect(bans.has(key.id)).toBe(true);
    b.admit([key], policy, now + 20);
    round(b, ledger, bans, now + 30);
    expect(b.knownBan([key.id], now + 31)).toBeDefined();
    // The operator lifts it at the shard; the isolates keep refusing until they ask again...
    bans.delete(key.id);
    ledger.forget(key.id);
    const later = now + LOCAL_BAN_TRUST_MS + 100;
    expect(b.knownBan([key.id], later)).toBeDefined();
    // ...which their next report does, and the shard's answer lifts it.
    round(b, ledger, bans, later + 10);
    expect(b.knownBan([key.id], later + 11)).toBeUndefined();
    expect(b.admit([key], policy, later + 12).verdict.ok).toBe(true);
  });

  it('does not ban a client again on a report that was on its way when an operator lifted the ban', () => {
    const a = new ClientLimiter('a');
    const ledger = new GuardLedger();
    const bans = new Map<string, number>();
    const now = 3_000_000;
    for (let i = 0; i <= policy.threshold + 5; i++) {
      a.admit([key], policy, now);
    }
    expect(a.knownBan([key.id], now + 1)).toBeDefined();
    // The isolate's report leaves (it carries the ban and the hits)...
    const keys = a.takeReport();
    expect(keys?.some((k) => k.id === key.id)).toBe(true);
    const report: GuardReport = { isolate: a.isolate, policy, keys: keys ?? [] };
    // ...the operator lifts the ban at the shard and in this isolate before it arrives...
    bans.delete(key.id);
    ledger.forget(key.id, now + 5);
    a.forget(key.id, now + 5);
    // ...and neither the shard nor the isolate takes the old report's ban back.
    const { reply, newBans } = ledger.account(report, bans, now + 50);
    expect(newBans).toEqual([]);
    a.applyReply(reply, now + 100, now + 1);
    expect(a.knownBan([key.id], now + 101)).toBeUndefined();
    // A reply to a report sent before the lift, from a shard that had not heard of it, is stale too.
    a.applyReply({ bans: [{ id: key.id, retryAfterMs: 600_000 }], lifted: [], shares: [] }, now + 120, now + 2);
    expect(a.knownBan([key.id], now + 121)).toBeUndefined();
    // Once the reports on their way are in, hammering bans it again.
    const after = now + LIFT_GRACE_MS + 1_000;
    for (let i = 0; i <= policy.threshold + 5; i++) {
      a.admit([key], policy, after + i);
    }
    round(a, ledger, bans, after + 200);
    expect(bans.has(key.id)).toBe(true);
    expect(a.knownBan([key.id], after + 201)).toBeDefined();
  });
});

describe('a key’s shares as isolates come and go', () => {
  const report = (isolate: string, seen: number): GuardReport => ({
    isolate,
    policy: NO_BANS,
    keys: [{ id: KEY.id, hits: 0, windows: [{ scope: 'sale', perSecond: 12, seen, admitted: [] }] }],
  });
  const share = (ledger: GuardLedger, isolate: string, seen: number, now: number) =>
    ledger.account(report(isolate, seen), new Map(), now).reply.shares[0]?.perSecond;

  it('splits the limit among the isolates reporting it, and gives the whole back as they stop', () => {
    const ledger = new GuardLedger();
    const t = 1_700_000_000_000;
    expect(share(ledger, 'a', 10, t)).toBe(12);
    expect(share(ledger, 'b', 10, t + 100)).toBe(6);
    expect(share(ledger, 'c', 20, t + 200)).toBe(6);
    expect(share(ledger, 'b', 10, t + 1_500)).toBe(3);
    expect(share(ledger, 'c', 20, t + 1_600)).toBe(6);
    // The first to report (held in place) has gone quiet for over 2 s: b and c split it; then c alone.
    expect(share(ledger, 'b', 10, t + 2_150)).toBe(4);
    expect(share(ledger, 'c', 20, t + 2_200)).toBe(8);
    expect(share(ledger, 'c', 20, t + 4_300)).toBe(12);
    // And a newcomer shares with c again.
    expect(share(ledger, 'a', 20, t + 4_400)).toBe(6);
  });
});
