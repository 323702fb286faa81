import { describe, expect, it } from 'vitest';
import { applyPatch, readStoredLimits } from '../../durable-objects/limits-store/rules';
import { clientIp, clientKeys, ipKey } from '../../workers/edge/client-guard';
import {
  acceptedKeyedOf,
  keyedMayPassSoldOut,
  knownSoldOut,
  markInStock,
  markSoldOut,
  rememberKeyedAnswer,
  SOLD_OUT_TRUST_MS,
  soldOutNow,
} from '../../workers/edge/sold-out';
import type { AdmitKey } from '../../workers/kernel/contract';
import { GuardBook } from '../../workers/kernel/guard-book';
import { admissionRate, DEFAULT_LIMITS, LimitsPatch } from '../../workers/kernel/limits';
import { leadingZeroBits, solvePow, verifyPow } from '../../workers/kernel/pow';
import { TokenBucket } from '../../workers/kernel/token-bucket';
import { SlidingLog, WindowCounter } from '../../workers/kernel/windows';

const T0 = 1_700_000_000_000;

describe('SlidingLog', () => {
  it('admits at most N in any one-second window and says when the next slot frees', () => {
    const log = new SlidingLog();
    for (let i = 0; i < 3; i++) {
      expect(log.waitMs(T0 + i * 100, 1000, 3)).toBe(0);
      log.add(T0 + i * 100);
    }
    // The oldest of the three (T0) leaves the window at T0 + 1000.
    expect(log.waitMs(T0 + 500, 1000, 3)).toBe(500);
    expect(log.waitMs(T0 + 999, 1000, 3)).toBe(1);
    expect(log.waitMs(T0 + 1000, 1000, 3)).toBe(0);
  });

  it.each([
    { traffic: 'busy', gapMs: 5 },
    // Often empty by the next event: reports land in a log with nothing live in it.
    { traffic: 'sparse', gapMs: 1_500 },
  ])('folds in reported events anywhere in time, as a log of every event sorted would count them ($traffic)', ({ gapMs }) => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const log = new SlidingLog();
    const all: number[] = [];
    let now = T0;
    for (let step = 0; step < 3_000; step++) {
      now += Math.floor(random() * gapMs);
      if (random() < 0.7) {
        log.add(now);
        all.push(now);
      } else {
        // Another isolate's events: up to 1.5 s old, out of order, some at the same millisecond.
        const reported = Array.from({ length: Math.floor(random() * 6) }, () => now - Math.floor(random() * 1_500));
        log.addMany(reported);
        all.push(...reported);
      }
      const inWindow = all.filter((t) => t > now - 1_000).sort((a, b) => a - b);
      expect(log.count(now, 1_000)).toBe(inWindow.length);
      const limit = 1 + Math.floor(random() * 300);
      const blocking = inWindow[inWindow.length - limit];
      expect(log.waitMs(now, 1_000, limit)).toBe(inWindow.length < limit ? 0 : Math.max(1, (blocking ?? now) + 1_000 - now));
    }
  });

  it('applies a lowered limit at once to what it already holds', () => {
    const log = new SlidingLog();
    for (let i = 0; i < 5; i++) {
      log.add(T0 + i);
    }
    expect(log.count(T0 + 10, 1000)).toBe(5);
    expect(log.waitMs(T0 + 10, 1000, 2)).toBeGreaterThan(0);
    expect(log.idle(T0 + 2000, 1000)).toBe(true);
  });
});

describe('WindowCounter', () => {
  it('counts events within the window and forgets those outside it', () => {
    const c = new WindowCounter(10_000);
    for (let i = 0; i < 50; i++) {
      c.hit(T0 + i * 100, 10_000);
    }
    expect(c.total(T0 + 5_000, 10_000)).toBe(50);
    expect(c.total(T0 + 30_000, 10_000)).toBe(0);
  });

  it('never counts an event older than the window', () => {
    const c = new WindowCounter(10_000);
    c.hit(T0, 10_000);
    expect(c.total(T0 + 10_001, 10_000)).toBe(0);
  });

  it('counts as the whole buckets of the window do, in its one-bucket form and after it spills', () => {
    // The model: every hit in its bucket (floor(time / width)); a total is the sum of the ten
    // buckets that end at now's. Hits come close together (one bucket), far apart (the one bucket
    // left the window, so the form stays) and in between (a second bucket: the arrays).
    let seed = 7;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const windowMs = 10_000;
    const width = windowMs / 10;
    for (let run = 0; run < 200; run++) {
      const c = new WindowCounter(windowMs);
      const hits: { bucket: number; n: number }[] = [];
      const model = (now: number) => {
        const index = Math.floor(now / width);
        return hits.filter((h) => h.bucket > index - 10 && h.bucket <= index).reduce((sum, h) => sum + h.n, 0);
      };
      let now = T0 + Math.floor(random() * width);
      for (let i = 0; i < 12; i++) {
        const gap = random();
        now += gap < 0.5 ? Math.floor(random() * 50) : gap < 0.8 ? Math.floor(random() * 3 * width) : Math.floor(random() * 3 * windowMs);
        const n = 1 + Math.floor(random() * 3);
        hits.push({ bucket: Math.floor(now / width), n });
        expect(c.hit(now, windowMs, n)).toBe(model(now));
        const later = now + Math.floor(random() * 2 * windowMs);
        expect(c.total(later, windowMs)).toBe(model(later));
      }
    }
  });
});

describe('TokenBucket', () => {
  it('grants about `rate` permits per second, holding at most a tenth of a second of them', () => {
    const b = new TokenBucket();
    let granted = 0;
    for (let t = 0; t <= 10_000; t += 10) {
      granted += b.take(1000, 100, T0 + t).granted;
    }
    // 10 s at 100/s plus the first full bucket (10).
    expect(granted).toBeGreaterThanOrEqual(1000);
    expect(granted).toBeLessThanOrEqual(1010);
  });

  it('says how long until the next permit, and rate 0 grants nothing', () => {
    const b = new TokenBucket();
    expect(b.take(5, 5, T0)).toEqual({ granted: 1, retryAfterMs: 0 });
    const empty = b.take(5, 5, T0);
    expect(empty.granted).toBe(0);
    expect(empty.retryAfterMs).toBe(200);
    expect(b.take(5, 0, T0 + 5_000)).toEqual({ granted: 0, retryAfterMs: 1000 });
  });
});

describe('GuardBook', () => {
  const policy = { threshold: 5, windowMs: 10_000, durationMs: 600_000 };
  const keys = (perSecond: number): AdmitKey[] => [{ id: 'ip:198.51.100.1', scope: 'sale', perSecond }];

  it('limits, then bans a client that keeps hammering, and refuses it while banned', () => {
    const book = new GuardBook();
    const bans = new Map<string, number>();
    const verdicts = [];
    for (let i = 0; i < 7; i++) {
      const { verdict, newBans } = book.admit(keys(2), policy, bans, T0 + i);
      for (const b of newBans) {
        bans.set(b.id, b.until);
      }
      verdicts.push(verdict.ok ? 'ok' : verdict.reason);
    }
    expect(verdicts).toEqual(['ok', 'ok', 'RATE_LIMITED', 'RATE_LIMITED', 'RATE_LIMITED', 'BANNED', 'BANNED']);
    expect(bans.get('ip:198.51.100.1')).toBe(T0 + 5 + 600_000);
    const later = book.admit(keys(2), policy, bans, T0 + 600_006);
    expect(later.verdict.ok).toBe(true);
  });

  it('puts answers an isolate gave on its own on the same ban counter as the requests it admits', () => {
    const book = new GuardBook();
    const bans = new Map<string, number>();
    expect(book.admit(keys(100), policy, bans, T0).verdict.ok).toBe(true);
    // Three answered by an isolate (a sold-out sale) and reported in one batch: 4 of 5.
    expect(book.countAnswered('ip:198.51.100.1', 3, policy, T0 + 500)).toBeUndefined();
    expect(book.admit(keys(100), policy, bans, T0 + 600).verdict.ok).toBe(true);
    // The next report crosses the threshold: banned from then on.
    expect(book.countAnswered('ip:198.51.100.1', 2, policy, T0 + 1_500)).toEqual({ id: 'ip:198.51.100.1', until: T0 + 1_500 + 600_000 });
    // Reports older than the window count no more.
    expect(book.countAnswered('ip:198.51.100.9', 5, policy, T0)).toBeUndefined();
    expect(book.countAnswered('ip:198.51.100.9', 5, policy, T0 + 20_000)).toBeUndefined();
  });

  it('checks every key before counting any, so a refused request uses no one’s quota', () => {
    const book = new GuardBook();
    const bans = new Map<string, number>();
    const pair: AdmitKey[] = [
      { id: 'ip:198.51.100.2', scope: 'sale', perSecond: 10 },
      { id: 'user:amy', scope: 'purchase', perSecond: 1 },
    ];
    expect(book.admit(pair, { ...policy, threshold: 100 }, bans, T0).verdict.ok).toBe(true);
    const second = book.admit(pair, { ...policy, threshold: 100 }, bans, T0 + 1);
    expect(second.verdict).toMatchObject({ ok: false, reason: 'RATE_LIMITED', id: 'user:amy', retryAfterMs: 999 });
    // The address used one slot, not two: nine more fit in the same second.
    for (let i = 0; i < 9; i++) {
      const v = book.admit([{ id: 'ip:198.51.100.2', scope: 'sale', perSecond: 10 }], { ...policy, threshold: 100 }, bans, T0 + 2 + i);
      expect(v.verdict.ok).toBe(true);
    }
  });
});

describe('GuardBook windows per scope', () => {
  it('keeps a rate window per scope of one client: a full one refuses only its own scope', () => {
    const book = new GuardBook();
    const bans = new Map<string, number>();
    const policy = { threshold: 100, windowMs: 10_000, durationMs: 600_000 };
    const lenient = policy;
    const token: AdmitKey = { id: 'user:amy', scope: 'token', perSecond: 2 };
    const purchase: AdmitKey = { id: 'user:amy', scope: 'purchase', perSecond: 1 };
    const sale: AdmitKey = { id: 'user:amy', scope: 'sale', perSecond: 3 };
    expect(book.admit([token], lenient, bans, T0).verdict.ok).toBe(true);
    expect(book.admit([token], lenient, bans, T0 + 1).verdict.ok).toBe(true);
    expect(book.admit([token], lenient, bans, T0 + 2).verdict).toMatchObject({ ok: false, reason: 'RATE_LIMITED', retryAfterMs: 998 });
    expect(book.admit([purchase], lenient, bans, T0 + 3).verdict.ok).toBe(true);
    expect(book.admit([purchase], lenient, bans, T0 + 4).verdict).toMatchObject({ ok: false, reason: 'RATE_LIMITED', retryAfterMs: 999 });
    for (let i = 0; i < 3; i++) {
      expect(book.admit([sale], lenient, bans, T0 + 5 + i).verdict.ok).toBe(true);
    }
    expect(book.admit([sale], lenient, bans, T0 + 9).verdict.ok).toBe(false);
    // A second later every scope has room again, and the ban counter saw all ten requests.
    expect(book.admit([token], lenient, bans, T0 + 1_001).verdict.ok).toBe(true);
    expect(book.admit([purchase], lenient, bans, T0 + 1_004).verdict.ok).toBe(true);
    expect(book.admit([sale], { ...policy, threshold: 11 }, bans, T0 + 1_010).newBans).toEqual([
      { id: 'user:amy', until: T0 + 1_010 + policy.durationMs },
    ]);
  });
});

describe('client keys', () => {
  it('validates cf-connecting-ip and keys IPv6 clients by their /64', () => {
    expect(clientIp(undefined)).toBeUndefined();
    expect(clientIp('203.0.113.9')).toBe('203.0.113.9');
    expect(() => clientIp('not-an-ip')).toThrow(/cf-connecting-ip/);
    expect(() => clientIp('1.2.3.4, 5.6.7.8')).toThrow();
    expect(ipKey('203.0.113.9')).toBe('ip:203.0.113.9');
    expect(ipKey('::ffff:203.0.113.9')).toBe('ip:203.0.113.9');
    expect(ipKey('2001:db8:0:1::5')).toBe('ip6:2001:db8:0:1::/64');
    expect(ipKey('2001:0db8:0000:0001:ffff:ffff:ffff:ffff')).toBe('ip6:2001:db8:0:1::/64');
    expect(ipKey('::1')).toBe('ip6:0:0:0:0::/64');
  });

  it('counts an address over all sale routes and a shopper per route; without an address, per shopper', () => {
    expect(clientKeys('203.0.113.9', 'amy', 'token', DEFAULT_LIMITS)).toEqual([
      { id: 'ip:203.0.113.9', scope: 'sale', perSecond: 10 },
      { id: 'user:amy', scope: 'token', perSecond: 3 },
    ]);
    expect(clientKeys(undefined, 'amy', 'purchase', DEFAULT_LIMITS)[0]?.id).toBe('anon:amy');
  });
});

describe('limits', () => {
  it('patches any subset, drops a per-goods override with null, and rejects nonsense', () => {
    const one = applyPatch(DEFAULT_LIMITS, LimitsPatch.parse({ admissionByGoods: { '7': 50, '8': 0 }, perIpPerSecond: 100 }));
    expect(one).toMatchObject({ perIpPerSecond: 100, admissionByGoods: { '7': 50, '8': 0 } });
    expect(admissionRate(one, 7)).toBe(50);
    expect(admissionRate(one, 9)).toBe(DEFAULT_LIMITS.admissionPerSecond);
    const two = applyPatch(one, LimitsPatch.parse({ admissionByGoods: { '7': null } }));
    expect(two.admissionByGoods).toEqual({ '8': 0 });
    for (const bad of [
      {},
      { perIpPerSecond: 0 },
      { perIpPerSecond: 1.5 },
      { perIpPerSecond: '5' },
      { nope: 1 },
      { admissionByGoods: { x: 1 } },
      [],
    ]) {
      expect(LimitsPatch.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });

  it('reads stored limits of any age: missing or broken fields take their defaults', () => {
    expect(readStoredLimits(undefined)).toEqual(DEFAULT_LIMITS);
    expect(readStoredLimits({ perIpPerSecond: 25, banSeconds: -1, removedLater: true })).toEqual({ ...DEFAULT_LIMITS, perIpPerSecond: 25 });
  });
});

describe('proof of work', () => {
  it('counts leading zero bits and checks a solution', async () => {
    expect(leadingZeroBits(new Uint8Array([0, 0x0f]))).toBe(12);
    expect(leadingZeroBits(new Uint8Array([0x80]))).toBe(0);
    expect(leadingZeroBits(new Uint8Array([0, 0]))).toBe(16);
    const nonce = await solvePow('prefix-abc', 10);
    expect(await verifyPow('prefix-abc', nonce, 10)).toBe(true);
    // The same nonce does not carry over to another challenge (2^-10 chance it would by luck).
    let wrong = 0;
    for (const p of ['p1', 'p2', 'p3', 'p4']) {
      wrong += (await verifyPow(p, nonce, 10)) ? 0 : 1;
    }
    expect(wrong).toBeGreaterThanOrEqual(3);
  });
});

describe('sold-out cache', () => {
  it('is trusted for a while, then lets exactly one request re-check', () => {
    const g = 900_000_001;
    expect(knownSoldOut(g, T0)).toBe(false);
    markSoldOut(g, T0);
    expect(knownSoldOut(g, T0 + 1)).toBe(true);
    expect(soldOutNow(g, T0 + SOLD_OUT_TRUST_MS - 1)).toBe(true);
    const after = T0 + SOLD_OUT_TRUST_MS;
    expect(knownSoldOut(g, after)).toBe(false);
    expect(knownSoldOut(g, after + 1)).toBe(true);
    markInStock(g);
    expect(knownSoldOut(g, after + 2)).toBe(false);
  });
});

describe('keyed requests at the sold-out fast path', () => {
  it('pass only with a key the object answered: in its list, answered here, or when its list was cut short', () => {
    const g = 900_000_002;
    // Not known to be sold out: every keyed request goes on.
    expect(keyedMayPassSoldOut(g, `${g}.fresh`, T0)).toBe(true);
    markSoldOut(g, T0, { ids: [`${g}.acceptedElsewhere`], truncated: false });
    expect(keyedMayPassSoldOut(g, `${g}.acceptedElsewhere`, T0 + 1)).toBe(true);
    expect(keyedMayPassSoldOut(g, `${g}.fresh`, T0 + 1)).toBe(false);
    rememberKeyedAnswer(`${g}.answeredHere`, T0 + 240_000, T0);
    expect(keyedMayPassSoldOut(g, `${g}.answeredHere`, T0 + 2)).toBe(true);
    // This isolate's memory of a key lasts as long as its retries may come.
    expect(keyedMayPassSoldOut(g, `${g}.answeredHere`, T0 + 240_000)).toBe(true);
    markSoldOut(g, T0 + 240_000, { ids: [], truncated: false });
    expect(keyedMayPassSoldOut(g, `${g}.answeredHere`, T0 + 240_001)).toBe(false);
    // A list cut short cannot refuse anyone; neither can a sell-out seen without one (a stock read).
    markSoldOut(g, T0 + 240_001, { ids: [], truncated: true });
    expect(keyedMayPassSoldOut(g, `${g}.fresh`, T0 + 240_002)).toBe(true);
    markSoldOut(g, T0 + 240_002);
    expect(keyedMayPassSoldOut(g, `${g}.fresh`, T0 + 240_003)).toBe(true);
    markInStock(g);
  });

  it("reads the object's list from its SOLD_OUT answer, and anything malformed as cut short", () => {
    const base = { ok: false, requestId: '1.x', reason: 'SOLD_OUT', replay: false };
    expect(acceptedKeyedOf({ ...base, acceptedKeyed: ['1.a', '1.b'] })).toEqual({ ids: ['1.a', '1.b'], truncated: false });
    expect(acceptedKeyedOf({ ...base, acceptedKeyed: ['1.a'], acceptedKeyedTruncated: true })).toEqual({ ids: ['1.a'], truncated: true });
    expect(acceptedKeyedOf(base)).toEqual({ ids: [], truncated: false });
    expect(acceptedKeyedOf({ ...base, acceptedKeyed: [1, 2] })).toEqual({ ids: [], truncated: true });
    expect(acceptedKeyedOf({ ...base, acceptedKeyed: 'x' })).toEqual({ ids: [], truncated: true });
  });
});
