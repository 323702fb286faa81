import { describe, expect, it } from 'vitest';
import { GATE_CALLS_PER_SECOND, RateShares, SHARE_RENEW_MS, SHARE_VALID_MS } from '../../durable-objects/admission-gate/shares';
import { TokenBucket } from '../../workers/kernel/token-bucket';

// The gate splits a goods' admission rate among the isolates selling it, by the purchases each
// sees; each isolate admits its share from a bucket of its own and renews it when the gate says
// (SHARE_RENEW_MS while few isolates sell the goods). Together they admit about the rate,
// however the load is spread, and the gate hears from a large fleet at a pace it sets.

describe('admission shares', () => {
  it('split the rate in proportion to demand, and drop isolates that stopped asking', () => {
    const gate = new RateShares();
    const now = 1_000_000;
    expect(gate.share('a', 30, 100, now)).toEqual({ perSecond: 100, validMs: SHARE_VALID_MS, renewMs: SHARE_RENEW_MS });
    expect(gate.share('b', 10, 100, now).perSecond).toBe(25);
    expect(gate.share('a', 30, 100, now + 1).perSecond).toBe(75);
    // `b` stops renewing: once its share has lapsed, `a` gets the whole rate back.
    expect(gate.share('a', 30, 100, now + SHARE_VALID_MS + 10).perSecond).toBe(100);
    expect(gate.share('a', 30, 0, now + SHARE_VALID_MS + 20).perSecond).toBe(0);
  });

  it('hold the rate across isolates that see uneven load, renewing on their own schedule', () => {
    const rate = 200;
    const gate = new RateShares();
    // Four isolates, one of them four times as busy; 2,000 purchases/s offered in all.
    const offered = [800, 400, 400, 400];
    const isolates = offered.map((perSecond, i) => ({
      id: `i${i}`,
      perSecond,
      bucket: new TokenBucket(),
      share: 0,
      renewAt: 0,
      seen: 0,
      admitted: 0,
    }));
    const end = 20_000;
    for (let t = 0; t < end; t++) {
      for (const iso of isolates) {
        if (t >= iso.renewAt) {
          iso.share = gate.share(iso.id, (iso.seen * 1000) / SHARE_RENEW_MS || iso.perSecond, rate, t).perSecond;
          iso.seen = 0;
          iso.renewAt = t + SHARE_RENEW_MS + Number(iso.id.slice(1)) * 37;
        }
        // This millisecond's purchases at this isolate.
        const arrivals = Math.floor(((t + 1) * iso.perSecond) / 1000) - Math.floor((t * iso.perSecond) / 1000);
        for (let k = 0; k < arrivals; k++) {
          iso.seen++;
          // The first two seconds settle the shares; count from then on.
          if (iso.bucket.take(1, iso.share, t).granted > 0 && t >= 2_000) {
            iso.admitted++;
          }
        }
      }
    }
    const perSecond = isolates.reduce((sum, i) => sum + i.admitted, 0) / ((end - 2_000) / 1000);
    console.log(JSON.stringify({ rate, admittedPerSecond: perSecond, byIsolate: isolates.map((i) => i.admitted) }));
    expect(perSecond).toBeLessThanOrEqual(rate * 1.05);
    expect(perSecond).toBeGreaterThanOrEqual(rate * 0.9);
    // The busy isolate gets about twice the share of each other one.
    const [busy, ...rest] = isolates;
    for (const other of rest) {
      expect((busy?.admitted ?? 0) / other.admitted).toBeGreaterThan(1.6);
    }
  });

  it('pace a large fleet: 2,000 isolates renew so the gate hears about 250 calls a second, and still hold the rate', () => {
    const rate = 1_000;
    const gate = new RateShares();
    // 2,000 isolates of 5 purchases a second each (10,000 offered), starting over the first
    // second; before the gate paced them they renewed every 2 s, 1,000 calls a second.
    const isolates = Array.from({ length: 2_000 }, (_, i) => ({
      id: `i${i}`,
      bucket: new TokenBucket(),
      share: 0,
      renewAt: Math.floor(i / 2),
      renewedAt: 0,
      seen: 0,
      admitted: 0,
    }));
    const STEP = 20;
    const end = 60_000;
    const counted = 30_000;
    let calls = 0;
    let longest = 0;
    for (let t = 0; t < end; t += STEP) {
      for (const iso of isolates) {
        if (t >= iso.renewAt) {
          const demand = t > iso.renewedAt ? (iso.seen * 1000) / (t - iso.renewedAt) : 5;
          const got = gate.share(iso.id, demand || 5, rate, t);
          iso.share = got.perSecond;
          iso.seen = 0;
          iso.renewedAt = t;
          iso.renewAt = t + got.renewMs;
          longest = Math.max(longest, got.renewMs);
          if (t >= counted) {
            calls++;
          }
        }
        // This step's purchases at this isolate (5 a second), offset so they do not all land at once.
        const arrivals = Math.floor(((t + STEP + (iso.renewedAt % 200)) * 5) / 1000) - Math.floor(((t + (iso.renewedAt % 200)) * 5) / 1000);
        for (let k = 0; k < arrivals; k++) {
          iso.seen++;
          if (iso.bucket.take(1, iso.share, t).granted > 0 && t >= counted) {
            iso.admitted++;
          }
        }
      }
    }
    const seconds = (end - counted) / 1000;
    const callsPerSecond = calls / seconds;
    const admittedPerSecond = isolates.reduce((n, i) => n + i.admitted, 0) / seconds;
    console.log(JSON.stringify({ isolates: isolates.length, rate, callsPerSecond, admittedPerSecond, renewMs: longest }));
    expect(gate.isolates).toBe(isolates.length);
    expect(longest).toBe((isolates.length * 1000) / GATE_CALLS_PER_SECOND);
    expect(callsPerSecond).toBeLessThanOrEqual(GATE_CALLS_PER_SECOND * 1.05);
    expect(callsPerSecond).toBeGreaterThanOrEqual(GATE_CALLS_PER_SECOND * 0.9);
    expect(admittedPerSecond).toBeLessThanOrEqual(rate * 1.05);
    expect(admittedPerSecond).toBeGreaterThanOrEqual(rate * 0.85);
  });
});
