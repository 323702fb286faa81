import { describe, expect, it } from 'vitest';
import { RateShares, SHARE_VALID_MS } from '../../durable-objects/admission-gate/shares';
import { SHARE_RENEW_MS } from '../../workers/edge/admission';
import { TokenBucket } from '../../workers/kernel/token-bucket';

// The gate splits a goods' admission rate among the isolates selling it, by the purchases each
// sees; each isolate admits its share from a bucket of its own and renews it every
// SHARE_RENEW_MS. Together they admit about the rate, however the load is spread.

describe('admission shares', () => {
  it('split the rate in proportion to demand, and drop isolates that stopped asking', () => {
    const gate = new RateShares();
    const now = 1_000_000;
    expect(gate.share('a', 30, 100, now).perSecond).toBe(100);
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
});
