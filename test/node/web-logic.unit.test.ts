// The pages' pure logic (web/src), in Node: clock sync, pacing, formatting, metrics, i18n,
// proof of work, and the built bundles' size budget.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildWeb, PAGES, pageSizes } from '../../scripts/build-web.ts';
import { chartPoints } from '../../web/src/admin/chart';
import { adminMessages } from '../../web/src/admin/messages';
import { counterRates, parsePrometheus, RateWindow, sumBy } from '../../web/src/admin/prometheus';
import { parseRetryAfter } from '../../web/src/shared/api';
import { ServerClock, sampleOffset } from '../../web/src/shared/clock';
import { Challenge, Goods, Order } from '../../web/src/shared/contract';
import { formatCountdown, formatDelay, formatMinutes, formatMoney, remainingPercent } from '../../web/src/shared/format';
import { interpolate, pickLang } from '../../web/src/shared/i18n';
import { saleState } from '../../web/src/shared/sale';
import { shopperMessages } from '../../web/src/shopper/messages';
import {
  busyRetryDelayMs,
  ClickGuard,
  LocalLimiter,
  RESULT_WAIT_SECONDS,
  resultPollDelay,
  resultPollPause,
  sendWhileBusy,
} from '../../web/src/shopper/pacing';
import { leadingZeroBits, solvePow } from '../../web/src/shopper/pow';
import { currentSession, loginUrl, planHandoff, readSession, saveSession, takeHandoff } from '../../web/src/shopper/session';
import { verifyPow } from '../../workers/kernel/pow';

describe('server clock', () => {
  it('takes the offset at the midpoint of the round trip', () => {
    expect(sampleOffset({ serverTime: 10_150, sentAt: 1_000, receivedAt: 1_300 })).toBe(9_000);
  });

  it('keeps the fastest round trip, so the error bound only shrinks', () => {
    let device = 0;
    const clock = new ServerClock(() => device);
    expect(clock.synced).toBe(false);
    clock.add({ serverTime: 5_000 + 150, sentAt: 0, receivedAt: 300 });
    expect(clock.offset).toBe(5_000);
    clock.add({ serverTime: 5_000 + 400 + 1_000, sentAt: 400, receivedAt: 1_400 });
    expect(clock.offset).toBe(5_000);
    expect(clock.uncertaintyMs).toBe(150);
    device = 2_000;
    expect(clock.now()).toBe(7_000);
  });

  it('follows a device clock that jumped, even with a slower sample', () => {
    let device = 1_000;
    const clock = new ServerClock(() => device);
    clock.add({ serverTime: 1_050, sentAt: 1_000, receivedAt: 1_100 });
    // The device clock was set back three hours; the server did not move.
    device = 1_200 - 3 * 3600_000;
    clock.add({ serverTime: 1_400, sentAt: device, receivedAt: device + 400 });
    // The server stamped 1 400 half-way through: when the request left, it was 1 200 there.
    expect(clock.now()).toBe(1_200);
  });
});

describe('pacing', () => {
  it('ignores repeats within 300 ms and while in flight', () => {
    let t = 0;
    const guard = new ClickGuard(() => t);
    expect(guard.tryEnter()).toBe(true);
    t = 50;
    expect(guard.tryEnter()).toBe(false);
    guard.release();
    t = 299;
    expect(guard.tryEnter()).toBe(false);
    t = 300;
    expect(guard.tryEnter()).toBe(true);
    t = 5_000;
    expect(guard.tryEnter()).toBe(false);
    guard.release();
    expect(guard.tryEnter()).toBe(true);
  });

  it('polls each second ten times, then backs off to 15 s', () => {
    const delays = Array.from({ length: 16 }, (_, i) => resultPollDelay(i));
    expect(delays.slice(0, 10)).toEqual(Array(10).fill(1000));
    expect(delays.slice(10)).toEqual([2000, 4000, 8000, 15000, 15000, 15000]);
  });

  it('follows a held result poll at once and spaces quick answers by the poll delay', () => {
    // Held by the server for its whole wait: the next poll goes at once.
    expect(resultPollPause(0, RESULT_WAIT_SECONDS * 1000)).toBe(0);
    // Answered at once (the mirror's QUEUED): the rest of the second.
    expect(resultPollPause(0, 150)).toBe(850);
    // Backed off: a 15 s spacing after a 10 s hold leaves 5 s.
    expect(resultPollPause(20, 10_000)).toBe(5_000);
  });

  it('spaces purchase requests 5 s apart and honours a longer Retry-After', () => {
    let t = 0;
    const limiter = new LocalLimiter(() => t);
    expect(limiter.waitMs()).toBe(0);
    limiter.note();
    t = 1_000;
    expect(limiter.waitMs()).toBe(4_000);
    limiter.note(30_000);
    expect(limiter.waitMs()).toBe(30_000);
    limiter.reset();
    expect(limiter.waitMs()).toBe(0);
  });

  it("waits a busy answer's Retry-After before sending it again, 1 to 5 s", () => {
    expect(busyRetryDelayMs(undefined)).toBe(1_000);
    expect(busyRetryDelayMs(0)).toBe(1_000);
    expect(busyRetryDelayMs(2)).toBe(2_000);
    expect(busyRetryDelayMs(60)).toBe(5_000);
  });

  it('sends again while the answer is a 503, three sends at most, pausing its Retry-After between', async () => {
    const busy = { ok: false, status: 503, retryAfterSeconds: 2 };
    const answers = (list: { ok: boolean; status: number; retryAfterSeconds?: number }[]) => {
      let i = 0;
      return async () => list[Math.min(i++, list.length - 1)] ?? busy;
    };
    const pauses: number[] = [];
    const pause = async (ms: number) => {
      pauses.push(ms);
      return true;
    };
    expect(await sendWhileBusy(answers([busy, { ok: true, status: 200 }]), pause)).toEqual({ answer: { ok: true, status: 200 }, sends: 2 });
    expect(pauses).toEqual([2_000]);
    expect(await sendWhileBusy(answers([busy]), pause)).toEqual({ answer: busy, sends: 3 });
    // Only a 503 is sent again: a 429 or a refusal is the answer.
    expect(await sendWhileBusy(answers([{ ok: false, status: 429 }]), pause)).toEqual({ answer: { ok: false, status: 429 }, sends: 1 });
    // A pause that says stop (the shopper signed out) ends it without another send.
    expect(await sendWhileBusy(answers([busy]), async () => false)).toBeUndefined();
  });

  it('derives the sale state from the server clock', () => {
    const g = { status: 'UPCOMING', remaining: 5, startAt: 1_000, endAt: 2_000 };
    expect(saleState(g, 999)).toBe('UPCOMING');
    expect(saleState(g, 1_000)).toBe('ON_SALE');
    expect(saleState({ ...g, remaining: 0 }, 1_500)).toBe('SOLD_OUT');
    expect(saleState({ ...g, status: 'PAUSED' }, 1_500)).toBe('PAUSED');
    expect(saleState(g, 2_000)).toBe('ENDED');
  });

  it('reads Retry-After as seconds or as a date', () => {
    expect(parseRetryAfter('7')).toBe(7);
    expect(parseRetryAfter(new Date(10_000).toUTCString(), 1_000)).toBe(9);
    expect(parseRetryAfter(null)).toBeUndefined();
    expect(parseRetryAfter('soon')).toBeUndefined();
  });
});

describe('formatting', () => {
  it('counts down in whole seconds, reaching zero exactly at the moment', () => {
    expect(formatCountdown(0)).toBe('00:00:00');
    expect(formatCountdown(1)).toBe('00:00:01');
    expect(formatCountdown(3_661_000)).toBe('01:01:01');
    expect(formatCountdown(90_061_000, '天')).toBe('1天 01:01:01');
    expect(formatCountdown(-5)).toBe('00:00:00');
    expect(formatMinutes(15 * 60_000)).toBe('15:00');
  });

  it('never shows 0 % while a unit is left, nor 100 % once one is gone', () => {
    expect(remainingPercent(1, 1000)).toBe(1);
    expect(remainingPercent(999, 1000)).toBe(99);
    expect(remainingPercent(2, 10)).toBe(20);
    expect(remainingPercent(0, 10)).toBe(0);
    expect(remainingPercent(10, 10)).toBe(100);
    expect(remainingPercent(3, 0)).toBe(0);
  });

  it('formats money per locale and survives an unknown currency', () => {
    expect(formatMoney(199_900, 'CNY', 'zh-CN')).toBe('¥1,999.00');
    expect(formatMoney(150, 'NOPE', 'en-US')).toBe('1.50 NOPE');
  });

  it('shows a delay in milliseconds below a second, in tenths of a second above, and nothing unknown', () => {
    expect(formatDelay(19.4, 'en-US')).toEqual({ value: '19', unit: 'ms' });
    expect(formatDelay(999.4, 'en-US')).toEqual({ value: '999', unit: 'ms' });
    // 999.6 ms rounds to a second: shown as one, not as "1,000 ms".
    expect(formatDelay(999.6, 'en-US')).toEqual({ value: '1.0', unit: 's' });
    expect(formatDelay(2_136, 'en-US')).toEqual({ value: '2.1', unit: 's' });
    expect(formatDelay(12_345, 'de-DE')).toEqual({ value: '12,3', unit: 's' });
    for (const unknown of [null, undefined, Number.NaN, -1]) {
      expect(formatDelay(unknown, 'en-US')).toBeUndefined();
    }
  });
});

describe('i18n', () => {
  it('picks a saved choice, then the browser languages, then English', () => {
    expect(pickLang('zh', ['en-US'])).toBe('zh');
    expect(pickLang(null, ['zh-TW', 'en'])).toBe('zh');
    expect(pickLang(null, ['fr-FR', 'en-GB'])).toBe('en');
    expect(pickLang('xx', ['de'])).toBe('en');
    expect(interpolate('Retry in {s} s', { s: 3 })).toBe('Retry in 3 s');
  });

  it('has every text in both languages, with the same placeholders', () => {
    for (const dict of [shopperMessages, adminMessages]) {
      for (const [key, en] of Object.entries(dict.en)) {
        const zh = (dict.zh as Record<string, string>)[key] ?? '';
        expect(zh, key).not.toBe('');
        const holes = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
        expect(holes(zh), key).toEqual(holes(en));
      }
    }
  });
});

describe('payload parsing', () => {
  it('reads the contract shapes and refuses broken ones', () => {
    const goods = Goods.parse({
      goodsId: 1,
      title: 'Phone',
      priceCents: 100,
      totalStock: 10,
      remaining: 2,
      startAt: '2026-01-01T00:00:00.000Z',
      endAt: '2026-01-01T01:00:00.000Z',
      status: 'ON_SALE',
      serverTime: '2026-01-01T00:30:00.000Z',
      imageUrl: null,
    });
    expect(goods.startAt).toBe(Date.parse('2026-01-01T00:00:00.000Z'));
    expect(Goods.safeParse({ ...goods, startAt: 'yesterday' }).success).toBe(false);
    expect(Order.parse({ orderId: '1-1', status: 1 }).status).toBe('PAID');
    expect(Order.parse({ orderId: '1-1', status: 'CLOSED_TIMEOUT' }).status).toBe('CLOSED_TIMEOUT');
    expect(Order.parse({ orderId: '1-1', status: 'SHIPPED' }).status).toBe('UNKNOWN');
    expect(Challenge.parse({ challengeId: 'c', kind: 'arithmetic', prompt: '1 + 2 = ?', expiresAt: 5 }).prompt).toBe('1 + 2 = ?');
  });

  it('reads the user id and expiry of a JWT, and drops an expired one', () => {
    const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const token = `${b64({ alg: 'HS256' })}.${b64({ sub: 'alice', exp: 2_000 })}.sig`;
    expect(readSession(token, 1_000_000)).toEqual({ token, userId: 'alice', expiresAt: 2_000_000 });
    expect(readSession(token, 2_000_000)).toBeUndefined();
    expect(readSession('not-a-jwt')).toBeUndefined();
    expect(readSession(`${b64({})}.${b64({ exp: 5 })}.x`, 0)).toBeUndefined();
  });
});

describe('session hand-over from the shop login (#jwt=)', () => {
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const jwtOf = (sub: string) => `${b64({ alg: 'HS256' })}.${b64({ sub, exp: 4_000_000_000 })}.sig`;
  const session = (sub: string) => readSession(jwtOf(sub), 0);

  it('takes a hand-over that answers the sign-in this page started, and drops one with a state not its own', () => {
    const token = jwtOf('mallory');
    expect(planHandoff({ token, state: 'n1', expectedState: 'n1', current: session('alice') })).toMatchObject({ kind: 'accept' });
    expect(planHandoff({ token, state: 'n1', expectedState: 'n2', current: undefined })).toEqual({ kind: 'reject', why: 'foreign-state' });
    expect(planHandoff({ token, state: 'n1', expectedState: null, current: undefined })).toEqual({ kind: 'reject', why: 'foreign-state' });
  });

  it('asks before an unbound hand-over signs anyone in or switches the shopper; a fresh token of the same shopper is taken', () => {
    const token = jwtOf('mallory');
    expect(planHandoff({ token, state: null, expectedState: null, current: session('alice') })).toMatchObject({
      kind: 'confirm',
      session: { userId: 'mallory' },
      current: { userId: 'alice' },
    });
    expect(planHandoff({ token, state: null, expectedState: null, current: undefined })).toMatchObject({
      kind: 'confirm',
      current: undefined,
    });
    expect(planHandoff({ token: jwtOf('alice'), state: null, expectedState: null, current: session('alice') })).toMatchObject({
      kind: 'accept',
    });
    expect(planHandoff({ token: 'garbage', state: null, expectedState: null, current: undefined })).toEqual({
      kind: 'reject',
      why: 'unreadable',
    });
    expect(planHandoff({ token: null, state: null, expectedState: null, current: undefined })).toEqual({ kind: 'none' });
  });

  describe('on the page', () => {
    /** A tab: its sessionStorage, address bar and history, as the page's module sees them. */
    function tab(hash: string) {
      const items = new Map<string, string>();
      const storage = {
        getItem: (k: string) => items.get(k) ?? null,
        setItem: (k: string, v: string) => void items.set(k, v),
        removeItem: (k: string) => void items.delete(k),
      };
      const location = { hash, pathname: '/', search: '?goods=7', origin: 'https://sale.shop.test', href: '' };
      vi.stubGlobal('sessionStorage', storage);
      vi.stubGlobal('location', location);
      vi.stubGlobal('history', {
        state: null,
        replaceState: (_: unknown, __: string, url: string) => {
          location.hash = url.includes('#') ? url.slice(url.indexOf('#')) : '';
        },
      });
      return { location, items };
    }

    afterEach(() => {
      vi.unstubAllGlobals();
    });

    it('does not silently replace the signed-in shopper with the one in a link', () => {
      const t = tab(`#jwt=${jwtOf('mallory')}`);
      saveSession(jwtOf('alice'));
      const asked: string[] = [];
      const done = takeHandoff((plan) => {
        asked.push(`${plan.current?.userId} -> ${plan.session.userId}`);
        return false;
      });
      expect(asked).toEqual(['alice -> mallory']);
      expect(done).toBe('reject');
      expect(currentSession()?.userId).toBe('alice');
      // The token never stays in the address bar, taken or not.
      expect(t.location.hash).toBe('');
    });

    it('switches when the shopper confirms, and without asking when the page started the sign-in', () => {
      tab(`#jwt=${jwtOf('bob')}&lang=zh`);
      saveSession(jwtOf('alice'));
      expect(takeHandoff(() => true)).toBe('accept');
      expect(currentSession()?.userId).toBe('bob');

      const t = tab('');
      const url = new URL(loginUrl('https://login.shop.test/authorize', 'https://sale.shop.test/?goods=7'));
      expect(url.searchParams.get('return_to')).toBe('https://sale.shop.test/?goods=7');
      const state = url.searchParams.get('state') ?? '';
      expect(state).toMatch(/^[0-9a-f]{32}$/);
      t.location.hash = `#jwt=${jwtOf('carol')}&state=${state}`;
      expect(takeHandoff(() => expect.fail('a hand-over the page asked for needs no question'))).toBe('accept');
      expect(currentSession()?.userId).toBe('carol');
      // The nonce is single-use: the same link again is dropped.
      t.location.hash = `#jwt=${jwtOf('carol')}&state=${state}`;
      expect(takeHandoff(() => true)).toBe('reject');
    });
  });
});

describe('metrics', () => {
  const scrape = (accepted: number, soldOut: number) => `# HELP seckill_http_requests_total Requests.
# TYPE seckill_http_requests_total counter
seckill_http_requests_total{route="/api/seckill/do/:path",method="POST",outcome="accepted"} ${accepted}
seckill_http_requests_total{route="/api/seckill/do/:path",method="POST",outcome="sold_out"} ${soldOut}
seckill_http_requests_total{route="/api/seckill/goods/:goodsId",method="GET",outcome="ok"} 40
seckill_http_request_duration_ms_bucket{route="a \\"quoted\\" route",le="+Inf"} 3
broken{label="x" 1
`;

  it('parses samples, labels and escapes, skipping comments and broken lines', () => {
    const samples = parsePrometheus(scrape(10, 2));
    expect(samples).toHaveLength(4);
    expect(samples[0]).toEqual({
      name: 'seckill_http_requests_total',
      labels: { route: '/api/seckill/do/:path', method: 'POST', outcome: 'accepted' },
      value: 10,
    });
    expect(samples[3]?.labels.route).toBe('a "quoted" route');
  });

  it('turns counters into per-second rates, treating a drop as a reset', () => {
    const rates = counterRates(parsePrometheus(scrape(10, 2)), parsePrometheus(scrape(30, 1)), 2);
    const byOutcome = sumBy(rates, 'seckill_http_requests_total', 'outcome');
    expect(byOutcome.get('accepted')).toBe(10);
    expect(byOutcome.get('sold_out')).toBe(0.5);
    expect(byOutcome.get('ok')).toBe(0);
    expect(counterRates([], [], 0)).toEqual([]);
  });

  it('keeps the scrape before for the rates of the series it watches', () => {
    const window = new RateWindow((s) => s.labels.outcome !== 'ok');
    expect(window.next(scrape(10, 2), 1_000)).toBeUndefined();
    const rates = window.next(scrape(30, 4), 3_000) ?? [];
    expect(sumBy(rates, 'seckill_http_requests_total', 'outcome')).toEqual(
      new Map([
        ['accepted', 10],
        ['sold_out', 1],
      ]),
    );
    // The next rates are from this scrape on.
    expect(sumBy(window.next(scrape(30, 4), 4_000) ?? [], 'seckill_http_requests_total', 'outcome').get('accepted')).toBe(0);
  });

  it('scales chart points into the box', () => {
    expect(chartPoints([])).toBe('');
    expect(chartPoints([{ t: 5, v: 3 }], 100, 54)).toBe('0.0,2.0 100.0,2.0');
    expect(
      chartPoints(
        [
          { t: 0, v: 0 },
          { t: 10, v: 5 },
        ],
        100,
        54,
      ),
    ).toBe('0.0,52.0 100.0,2.0');
  });
});

describe('proof of work', () => {
  it('counts leading zero bits', () => {
    expect(leadingZeroBits(new Uint8Array([0, 0x10]))).toBe(11);
    expect(leadingZeroBits(new Uint8Array([0xff]))).toBe(0);
    expect(leadingZeroBits(new Uint8Array([0, 0]))).toBe(16);
  });

  it('finds a nonce the server accepts', async () => {
    const nonce = await solvePow('prefix-abc', 10);
    expect(nonce).toBeDefined();
    expect(await verifyPow('prefix-abc', String(nonce), 10)).toBe(true);
    expect(await solvePow('prefix-abc', 10, () => true)).toBeUndefined();
  });
});

describe('built pages', () => {
  it('build, reference only files that exist, and stay small', async () => {
    // Built aside, so a dev server serving web/public never sees a half-written bundle.
    const jsDir = mkdtempSync(join(tmpdir(), 'edge-seckill-web-'));
    await buildWeb({ outdir: jsDir });
    for (const page of PAGES) {
      const html = readFileSync(new URL(`../../web/public/${page.html}`, import.meta.url), 'utf8');
      const refs = [...html.matchAll(/(?:src="|rel="stylesheet" href=")\/([^"]+)"/g)].map((m) => m[1] ?? '');
      expect(refs, page.html).toEqual(expect.arrayContaining(page.files.filter((f) => f !== page.html)));
      for (const ref of refs) {
        const file = ref.startsWith('js/') ? join(jsDir, ref.slice(3)) : fileURLToPath(new URL(`../../web/public/${ref}`, import.meta.url));
        expect(() => readFileSync(file), `${page.html} -> /${ref}`).not.toThrow();
      }
    }
    for (const size of pageSizes({ jsDir })) {
      // Budget: what a shopper downloads before the page works, gzipped.
      expect(size.gzip, size.page).toBeLessThan(32 * 1024);
    }
    rmSync(jsDir, { recursive: true, force: true });
  });
});
