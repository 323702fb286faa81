import { afterEach, describe, expect, it, vi } from 'vitest';
import { acquirePermit } from '../../workers/edge/admission';
import type { RateShare } from '../../workers/kernel/contract';
import { AppError } from '../../workers/kernel/errors';
import { sleep } from '../../workers/kernel/sleep';
import { UPKEEP_CALL_MS } from '../../workers/kernel/within';

// How an isolate keeps its share of a goods' admission rate when the gate answers in ways the
// running gate does not: an earlier build's gate (no renewMs), a rate changed mid-sale, a gate
// that fails. A gate of our own making stands in for the object, so each answer and each call
// is the test's to choose and count.

type Ask = { demand: number; rate: number };

/** An env whose admission gate answers `answer(ask)` after `delayMs`, recording every ask. */
function gateEnv(answer: (ask: Ask) => RateShare | Error, delayMs = 0): { env: Env; asks: Ask[] } {
  const asks: Ask[] = [];
  const stub = {
    async share(_isolate: string, demand: number, rate: number): Promise<RateShare> {
      asks.push({ demand, rate });
      if (delayMs > 0) {
        await sleep(delayMs);
      }
      const got = answer({ demand, rate });
      if (got instanceof Error) {
        throw got;
      }
      return got;
    },
  };
  const namespace = { idFromName: (name: string) => name, get: () => stub };
  return { env: { ADMISSION_GATE: namespace } as unknown as Env, asks };
}

function backgroundWork() {
  const pending: Promise<unknown>[] = [];
  return {
    waitUntil: (p: Promise<unknown>) => {
      pending.push(p);
    },
    settled: () => Promise.all(pending.splice(0)),
  };
}

let goodsIds = 987_100;
const freshGoods = () => ({ id: goodsIds++, locationHint: null });

afterEach(() => {
  vi.useRealTimers();
});

describe('an isolate renewing its admission share', () => {
  it('renews in the background, halfway through the share, when the gate is of a build that says no renewMs', async () => {
    const { env, asks } = gateEnv(({ rate }) => ({ perSecond: rate, validMs: 5_000 }));
    const goods = freshGoods();
    const bg = backgroundWork();
    const start = Date.now();
    vi.useFakeTimers({ toFake: ['Date'], now: start });
    await acquirePermit(env, goods, 1000, bg.waitUntil);
    await bg.settled();
    expect(asks).toHaveLength(1);
    // Before half the share's life nothing is due; past it a purchase starts a renewal behind it.
    vi.setSystemTime(start + 2_000);
    await acquirePermit(env, goods, 1000, bg.waitUntil);
    await bg.settled();
    expect(asks).toHaveLength(1);
    vi.setSystemTime(start + 2_600);
    await acquirePermit(env, goods, 1000, bg.waitUntil);
    await bg.settled();
    expect(asks).toHaveLength(2);
    // So the share never lapses under a steady stream of purchases, and none waits on the gate.
    for (let t = 3_000; t <= 30_000; t += 500) {
      vi.setSystemTime(start + t);
      await acquirePermit(env, goods, 1000, bg.waitUntil);
      await bg.settled();
    }
    expect(asks.length).toBeGreaterThanOrEqual(11);
  });

  it('serves a changed rate from the share in hand, in the same proportion, while the renewal runs behind', async () => {
    // A gate slow enough that a purchase waiting on it could not be mistaken for one that did not,
    // even on a machine that stalls for a few hundred milliseconds.
    const GATE_MS = 1_000;
    // This isolate sees half the goods' demand: the gate gives it half of whatever the rate is.
    const { env, asks } = gateEnv(({ rate }) => ({ perSecond: rate / 2, validMs: 5_000, renewMs: 2_000 }), GATE_MS);
    const goods = freshGoods();
    const bg = backgroundWork();
    await acquirePermit(env, goods, 1000, bg.waitUntil);
    await bg.settled();
    expect(asks.map((a) => a.rate)).toEqual([1000]);

    // The shop raises the goods' admission rate mid-sale.
    const changed = Date.now();
    await acquirePermit(env, goods, 4000, bg.waitUntil);
    expect(Date.now() - changed).toBeLessThan(GATE_MS);
    // Half of 4,000 a second: 200 permits in a bucket of a tenth of a second (the share at the
    // old rate would hold 50), then refused without asking the gate.
    let granted = 1;
    let refusal: unknown;
    while (refusal === undefined && granted < 5_000) {
      try {
        await acquirePermit(env, goods, 4000, bg.waitUntil);
        granted++;
      } catch (error) {
        refusal = error;
      }
    }
    expect(refusal).toBeInstanceOf(AppError);
    expect(Date.now() - changed).toBeLessThan(GATE_MS);
    expect(granted).toBeGreaterThan(50);
    expect(granted).toBeLessThanOrEqual(200 + Math.ceil((2000 * (Date.now() - changed)) / 1000));
    await bg.settled();
    // One renewal, asked for the new rate, behind the purchases.
    expect(asks.map((a) => a.rate)).toEqual([1000, 4000]);
  });

  it('lets the requests behind a first purchase wait for its renewal: one call to the gate, and BUSY when it fails', async () => {
    const GATE_MS = 300;
    let failing = false;
    const { env, asks } = gateEnv(() => (failing ? new Error('gate down') : { perSecond: 100, validMs: 5_000, renewMs: 2_000 }), GATE_MS);
    const bg = backgroundWork();

    // The gate answers: the three behind the first purchase all get in on its renewal.
    const goods = freshGoods();
    await acquirePermit(env, goods, 100, bg.waitUntil);
    await Promise.all([1, 2, 3].map(() => acquirePermit(env, goods, 100, bg.waitUntil)));
    await bg.settled();
    expect(asks).toHaveLength(1);

    // The gate fails: the three behind are told BUSY when the one renewal fails, not after
    // asking the gate again each.
    failing = true;
    const other = freshGoods();
    await acquirePermit(env, other, 100, bg.waitUntil);
    const behind = await Promise.allSettled([1, 2, 3].map(() => acquirePermit(env, other, 100, bg.waitUntil)));
    await bg.settled();
    expect(behind.map((r) => (r.status === 'rejected' && r.reason instanceof AppError ? r.reason.code : r.status))).toEqual([
      'BUSY',
      'BUSY',
      'BUSY',
    ]);
    expect(asks).toHaveLength(2);
  });

  it('gives up a renewal the gate never answers after UPKEEP_CALL_MS: BUSY, and the next purchase asks again', async () => {
    const silent = { ADMISSION_GATE: { idFromName: (name: string) => name, get: () => ({ share: () => new Promise(() => {}) }) } };
    const goods = freshGoods();
    const started = Date.now();
    const refused = await acquirePermit(silent as unknown as Env, goods, 1000).then(
      () => 'admitted',
      (error: unknown) => (error instanceof AppError ? error.code : String(error)),
    );
    const tookMs = Date.now() - started;
    expect(refused).toBe('BUSY');
    expect(tookMs).toBeGreaterThanOrEqual(UPKEEP_CALL_MS - 50);
    expect(tookMs).toBeLessThan(UPKEEP_CALL_MS + 3_000);
    // The pool is not left renewing: a gate that answers is asked, and the purchase admitted.
    const { env, asks } = gateEnv(({ rate }) => ({ perSecond: rate, validMs: 5_000, renewMs: 2_500 }));
    await acquirePermit(env, goods, 1000);
    expect(asks).toHaveLength(1);
  });
});
