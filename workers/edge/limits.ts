import { LIMITS_REPLICAS, limitsReplica } from '../../durable-objects/routing';
import { AppError } from '../kernel/errors';
import { isolateId } from '../kernel/isolate-id';
import type { Limits } from '../kernel/limits';
import { log } from '../kernel/log';
import { callWithin } from '../kernel/within';
import type { WaitUntil } from './group-commit';

// Each isolate keeps a copy of the runtime limits, so a change made with PUT /admin/limits
// reaches the whole fleet within a few seconds without a redeploy. It reads one of the limits
// store's copies (always the same one, by its name), which the store keeps up to date. A busy isolate renews its
// copy in the background once it is REFRESH_AFTER_MS old, so no shopper waits on the store;
// only an isolate that was idle past LIMITS_TTL_MS waits for a fresh copy.

/** How long an isolate trusts its copy of the limits. */
export const LIMITS_TTL_MS = 2_000;
/** From this age on, a request renews the copy in the background while it is served. */
export const REFRESH_AFTER_MS = 1_000;
/** A refresh that has not finished after this long is presumed lost (its request was cancelled). */
const REFRESH_STUCK_MS = 5_000;

type Cached = { limits: Limits; at: number };
let cached: Cached | undefined;
let refreshStartedAt = 0;

/** The copy an isolate reads: a hash of its name. */
function replicaOf(name: string): number {
  let h = 0;
  for (let i = 0; i < name.length; i++) {
    h = (h * 31 + name.charCodeAt(i)) | 0;
  }
  return Math.abs(h) % LIMITS_REPLICAS;
}

async function refresh(env: Env, now: number): Promise<Limits> {
  refreshStartedAt = now;
  try {
    const copy = limitsReplica(env, replicaOf(isolateId())).replicaLimits();
    const limits = (await callWithin(copy, 'the limits copy')).limits;
    cached = { limits, at: Date.now() };
    return limits;
  } catch (error) {
    log.warn('limits.refresh_failed', { error });
    if (cached) {
      // Keep serving the last known limits; try again in half a second, not on every request.
      cached = { limits: cached.limits, at: Date.now() - LIMITS_TTL_MS + 500 };
      return cached.limits;
    }
    throw new AppError('BUSY', 'the sale is busy, please retry', { 'retry-after': '1' });
  } finally {
    refreshStartedAt = 0;
  }
}

/**
 * The limits as this isolate knows them. A copy past REFRESH_AFTER_MS is served while it is
 * renewed in the background; one past LIMITS_TTL_MS is served while a refresh is under way,
 * and otherwise this request refreshes it (awaiting only its own call: a request must not
 * wait on another request's I/O in workerd).
 */
export async function currentLimits(env: Env, waitUntil?: WaitUntil, now = Date.now()): Promise<Limits> {
  const refreshing = now - refreshStartedAt < REFRESH_STUCK_MS;
  if (cached && now - cached.at < LIMITS_TTL_MS) {
    if (waitUntil && !refreshing && now - cached.at >= REFRESH_AFTER_MS) {
      waitUntil(refresh(env, now).catch(() => undefined));
    }
    return cached.limits;
  }
  if (cached && refreshing) {
    return cached.limits;
  }
  return refresh(env, now);
}

/** Replaces this isolate's copy at once (after a change made through this isolate). */
export function rememberLimits(limits: Limits): void {
  cached = { limits, at: Date.now() };
}
