import type { Context } from 'hono';
import type { Config } from '../kernel/config';

/** Hono environment shared by every sub-app. */
export type AppEnv = {
  Bindings: Env;
  Variables: {
    /** Trace id of this HTTP request, echoed in error bodies and logs. */
    requestId: string;
    config: Config;
    userId: string;
    /** The client address from `cf-connecting-ip`, parsed once by edgeShield (shopper routes). */
    clientIp: string | undefined;
  };
};

/**
 * The request's `waitUntil`, or undefined without an execution context (a direct
 * `app.request()` call in tests).
 */
export function waitUntilOf(c: Context<AppEnv>): ((promise: Promise<unknown>) => void) | undefined {
  try {
    const ctx = c.executionCtx;
    return (promise) => ctx.waitUntil(promise);
  } catch {
    return undefined;
  }
}
