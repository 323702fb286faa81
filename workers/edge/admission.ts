import { admissionGate } from '../../durable-objects/routing';
import type { GoodsPlacement } from '../kernel/contract';
import { AppError } from '../kernel/errors';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import type { WaitUntil } from './group-commit';

// Admission control: each goods lets at most `rate` requests per second through to its stock
// object, across every isolate. The goods' AdmissionGate object holds the bucket and
// leases permits in small batches that are valid for LEASE_TTL_MS, so a busy isolate asks the
// gate about ten times a second instead of once per request. The next lease is fetched in the
// background while the pool still holds permits, so in a steady stream no purchase waits on the
// gate. Unused permits lapse: the gate errs on the side of letting fewer through. A refused
// request is answered 503 BUSY at once.

/** Permits leased to an isolate expire after this long. */
export const LEASE_TTL_MS = 100;
/** A request waits this long for a lease another request of the isolate is fetching. */
const WAIT_FOR_LEASE_MS = 150;
const POLL_MS = 2;

type Pool = {
  permits: number;
  validUntil: number;
  /** The gate said it is empty until then: refuse locally without asking. */
  emptyUntil: number;
  leasing: boolean;
  /** Requests that asked in the current lease period: the next lease asks for about as many. */
  demand: number;
  demandSince: number;
  inFlight: number;
  /** The rate the pool last leased at; a change voids what the gate said about the old one. */
  rate: number;
  /** Permits the last lease granted: the pool renews in the background once half are used. */
  lastGrant: number;
};

const pools = new Map<number, Pool>();

function pool(goodsId: number, rate = -1): Pool {
  let p = pools.get(goodsId);
  if (!p) {
    p = { permits: 0, validUntil: 0, emptyUntil: 0, leasing: false, demand: 0, demandSince: 0, inFlight: 0, rate, lastGrant: 0 };
    pools.set(goodsId, p);
  }
  return p;
}

function busy(retryAfterMs: number): AppError {
  return new AppError('BUSY', undefined, { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) });
}

function takeLocal(p: Pool, now: number): boolean {
  if (p.permits > 0 && now < p.validUntil) {
    p.permits--;
    return true;
  }
  return false;
}

/** Renews the pool in the background once half its permits or half its lease time are used. */
function renewEarly(env: Env, p: Pool, goods: GoodsPlacement, rate: number, now: number, waitUntil: WaitUntil | undefined): void {
  if (!waitUntil || p.leasing || now < p.emptyUntil) {
    return;
  }
  if (p.permits * 2 <= p.lastGrant || p.validUntil - now <= LEASE_TTL_MS / 2) {
    waitUntil(lease(env, p, goods, rate));
  }
}

/**
 * Takes a permit for a purchase to reach the goods' object, or throws 503 BUSY. With permits in
 * the pool it answers at once (and renews the pool in the background when it runs low). Never
 * waits on another request's promise (workerd cancels such requests): a request that finds the
 * pool empty and a lease in flight polls the pool on its own timer.
 */
export async function acquirePermit(env: Env, goods: GoodsPlacement, rate: number, waitUntil?: WaitUntil): Promise<void> {
  const p = pool(goods.id, rate);
  if (p.rate !== rate) {
    p.rate = rate;
    p.emptyUntil = 0;
  }
  const started = Date.now();
  if (started - p.demandSince >= LEASE_TTL_MS) {
    p.demand = 0;
    p.demandSince = started;
  }
  p.demand++;
  for (;;) {
    const now = Date.now();
    if (takeLocal(p, now)) {
      renewEarly(env, p, goods, rate, now, waitUntil);
      return;
    }
    if (now < p.emptyUntil) {
      throw busy(p.emptyUntil - now);
    }
    if (p.leasing && now - started < WAIT_FOR_LEASE_MS) {
      await sleep(POLL_MS);
      continue;
    }
    await lease(env, p, goods, rate);
    if (takeLocal(p, Date.now())) {
      return;
    }
    throw busy(Math.max(0, p.emptyUntil - Date.now()));
  }
}

async function lease(env: Env, p: Pool, goods: GoodsPlacement, rate: number): Promise<void> {
  const want = Math.max(1, Math.min(Math.ceil(rate / 10), p.demand));
  p.leasing = true;
  try {
    const got = await admissionGate(env, goods).lease(want, rate);
    const now = Date.now();
    if (got.granted > 0) {
      // Permits still held from an earlier lease are kept until the new deadline too.
      p.permits = (now < p.validUntil ? p.permits : 0) + got.granted;
      p.validUntil = now + LEASE_TTL_MS;
      p.lastGrant = got.granted;
    } else {
      p.emptyUntil = now + Math.min(got.retryAfterMs, 1_000);
    }
  } catch (error) {
    // No gate, no admission: protect the stock object and tell the shopper to retry.
    log.warn('admission.gate_unavailable', { goodsId: goods.id, error });
    p.emptyUntil = Date.now() + 100;
  } finally {
    p.leasing = false;
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
