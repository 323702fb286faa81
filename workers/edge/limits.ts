import { limitsStore } from '../../durable-objects/routing';
import { AppError } from '../kernel/errors';
import type { Limits } from '../kernel/limits';
import { log } from '../kernel/log';

// Each isolate keeps a copy of the runtime limits for LIMITS_TTL_MS, so a change made with
// PUT /admin/limits reaches the whole fleet within a few seconds without a redeploy.

/** How long an isolate trusts its copy of the limits. */
export const LIMITS_TTL_MS = 2_000;
/** A refresh that has not finished after this long is presumed lost (its request was cancelled). */
const REFRESH_STUCK_MS = 5_000;

type Cached = { limits: Limits; at: number };
let cached: Cached | undefined;
let refreshStartedAt = 0;

/**
 * The limits as this isolate knows them. A stale copy is served while one request refreshes it
 * (awaiting only its own call: a request must not wait on another request's I/O in workerd).
 */
export async function currentLimits(env: Env, now = Date.now()): Promise<Limits> {
  if (cached && now - cached.at < LIMITS_TTL_MS) {
    return cached.limits;
  }
  if (cached && now - refreshStartedAt < REFRESH_STUCK_MS) {
    return cached.limits;
  }
  refreshStartedAt = now;
  try {
    const { limits } = await limitsStore(env).getLimits();
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

/** Replaces this isolate's copy at once (after a change made through this isolate). */
export function rememberLimits(limits: Limits): void {
  cached = { limits, at: Date.now() };
}
