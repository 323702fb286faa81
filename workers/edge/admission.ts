import { admissionGate } from '../../durable-objects/routing';
import type { GoodsPlacement } from '../kernel/contract';
import { AppError } from '../kernel/errors';
import { isolateId } from '../kernel/isolate-id';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { TokenBucket } from '../kernel/token-bucket';
import { callWithin } from '../kernel/within';
import type { WaitUntil } from './group-commit';

// Admission control: each goods lets at most `rate` requests per second through to its stock
// object, across every isolate. The goods' AdmissionGate object splits the rate among the
// isolates selling it, in proportion to the purchases each sees; each isolate admits its share
// from a token bucket of its own and renews the share in the background when the gate says
// (every 2 s while few isolates sell the goods, less often in a large fleet: the gate paces
// them, durable-objects/admission-gate/shares.ts), so a purchase waits on the gate only after
// its isolate's share lapsed. A refused request is answered 503 BUSY at once.
//
// An isolate's first purchase of a goods does not wait on the gate either: it is admitted on
// its own (from the isolate's bucket at the goods' whole rate) while the share is fetched in
// the background, so that purchase too waits on one object call, its stock shard. That is one
// request per isolate and goods beyond the rate, once: in a flash crowd's first second, when
// thousands of isolates start at once, the alternative is every one of them calling the one
// gate on the shoppers' wait. The requests right behind it wait for that one renewal to end
// (up to WAIT_FOR_SHARE_MS) rather than ask the gate again each.
//
// A share is a fraction of the goods' rate: when the rate changes mid-sale, the share in hand
// serves at the new rate in the same proportion while its renewal (asked at once, in the
// background) brings the gate's new split, so no purchase waits on the gate for the change.

/**
 * A request waits at most this long for a renewal another request of the isolate is running;
 * past it (a gate that does not answer) it asks the gate itself.
 */
const WAIT_FOR_SHARE_MS = 2_000;
const POLL_MS = 2;

type Share = { perSecond: number; rate: number; validUntil: number; renewAt: number };

type Pool = {
  share: Share | undefined;
  bucket: TokenBucket;
  renewing: boolean;
  /** The first purchase went through before the isolate held a share (once per isolate and goods). */
  started: boolean;
  /** Purchases that asked since `seenSince`: the demand the next renewal tells the gate. */
  seen: number;
  seenSince: number;
  inFlight: number;
};

const pools = new Map<number, Pool>();

function pool(goodsId: number): Pool {
  let p = pools.get(goodsId);
  if (!p) {
    p = { share: undefined, bucket: new TokenBucket(), renewing: false, started: false, seen: 0, seenSince: Date.now(), inFlight: 0 };
    pools.set(goodsId, p);
  }
  return p;
}

function busy(retryAfterMs: number): AppError {
  return new AppError('BUSY', undefined, { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) });
}

/**
 * The share in hand, unless it lapsed. A share asked for another rate is rescaled to `rate` in
 * the same proportion and falls due for renewal now (the gate may split the new rate otherwise).
 */
function usable(p: Pool, rate: number, now: number): Share | undefined {
  const share = p.share;
  if (!share || now >= share.validUntil) {
    return undefined;
  }
  if (share.rate !== rate) {
    p.share = { perSecond: (share.perSecond * rate) / share.rate, rate, validUntil: share.validUntil, renewAt: now };
  }
  return p.share;
}

/** Asks the gate for this isolate's share of `rate`, telling it the purchases per second seen here. */
async function renew(env: Env, p: Pool, goods: GoodsPlacement, rate: number): Promise<void> {
  p.renewing = true;
  const askedAt = Date.now();
  const demand = p.seen / Math.max(0.5, (askedAt - p.seenSince) / 1000);
  p.seen = 0;
  p.seenSince = askedAt;
  try {
    // A gate that never answers must not leave the pool renewing for good: after the deadline it
    // counts as unavailable, and the gate's late grant goes unused for its one share's life.
    const got = await callWithin(admissionGate(env, goods).share(isolateId(), demand, rate), 'the admission gate');
    const now = Date.now();
    // A gate of an earlier build says no renewMs: renew halfway through the share's life.
    const renewMs = got.renewMs ?? got.validMs / 2;
    p.share = { perSecond: got.perSecond, rate, validUntil: now + got.validMs, renewAt: now + renewMs };
  } catch (error) {
    // No gate, no new share: the one in hand (if any) serves until it lapses; then BUSY.
    log.warn('admission.gate_unavailable', { goodsId: goods.id, error });
    if (p.share) {
      p.share.renewAt = Date.now() + 100;
    }
  } finally {
    p.renewing = false;
  }
}

/**
 * Takes a permit for a purchase to reach the goods' object, or throws 503 BUSY. With a share of
 * the rate in hand it answers at once (renewing the share in the background when due). Never
 * waits on another request's promise (workerd cancels such requests): a request that finds no
 * share and one on its way polls the pool on its own timer.
 */
export async function acquirePermit(env: Env, goods: GoodsPlacement, rate: number, waitUntil?: WaitUntil): Promise<void> {
  if (rate <= 0) {
    throw busy(1000);
  }
  const p = pool(goods.id);
  p.seen++;
  const started = Date.now();
  let share = usable(p, rate, started);
  if (!share && !p.started && !p.renewing && waitUntil) {
    // The isolate's first purchase of this goods: admitted on its own, the share fetched behind it.
    p.started = true;
    waitUntil(renew(env, p, goods, rate));
    if (p.bucket.take(1, rate, started).granted > 0) {
      return;
    }
  }
  let waited = false;
  while (!share) {
    if (p.renewing && Date.now() - started < WAIT_FOR_SHARE_MS) {
      waited = true;
      await sleep(POLL_MS);
    } else if (waited && !p.renewing) {
      // The renewal waited for ended without a share: the gate did not answer it just now.
      throw busy(100);
    } else {
      await renew(env, p, goods, rate);
      if (!usable(p, rate, Date.now())) {
        throw busy(100);
      }
    }
    share = usable(p, rate, Date.now());
  }
  const now = Date.now();
  if (now >= share.renewAt && !p.renewing && waitUntil) {
    waitUntil(renew(env, p, goods, rate));
  }
  const got = p.bucket.take(1, share.perSecond, now);
  if (got.granted === 0) {
    throw busy(got.retryAfterMs);
  }
}

/**
 * Caps the purchases this isolate has waiting on one goods' object. Beyond the cap the object
 * is not keeping up, and queueing more only makes every shopper wait longer: answer BUSY now.
 * Returns the release function to call when the call to the object has finished.
 */
export function enterInFlight(goodsId: number, cap: number): () => void {
  const p = pool(goodsId);
  if (p.inFlight >= cap) {
    throw busy(1000);
  }
  p.inFlight++;
  let released = false;
  return () => {
    if (!released) {
      released = true;
      p.inFlight--;
    }
  };
}
