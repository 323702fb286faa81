import type { Context } from 'hono';
import type { GoodsRow } from '../../db/goods';
import type { PurchaseToken } from '../edge/signed';
import type { Config } from '../kernel/config';
import type { Limits } from '../kernel/limits';

/** Hono environment shared by every sub-app. Each variable names the middleware that sets it. */
export type AppEnv = {
  Bindings: Env;
  Variables: {
    /** This HTTP request's trace id (cf-ray, or random): the `requestId` of error bodies and log lines (requestContext). */
    traceId: string;
    config: Config;
    /** The client address from `cf-connecting-ip` (shopper routes: shopperFront). */
    clientIp: string | undefined;
    /** The runtime limits, read once per request (shopper routes: shopperFront). */
    limits: Limits;
    /** The signed-in shopper (shopperAuth). */
    userId: string;
    /** The goods a route is about, as named by the path or the body (goodsInPath, purchaseBody, ...). */
    goodsId: number;
    /** That goods' row, read once per request from the isolate's goods list (loadGoods). */
    goods: GoodsRow;
    /** The token route: the shopper showed a valid admission pass while the room held a line (requireAdmission). */
    admitted: boolean;
    /** The result route: the read asked to be held for the final answer (`?wait=`), so its time is the wait's, not a slow request's. */
    heldRead: boolean;
    // The purchase route's own steps (routes/purchase.ts), in the order they are set.
    /** The body's one-time token (purchaseBody). */
    purchaseToken: string;
    /** The units the body asks for, 1 when it names none (purchaseBody; checked against the goods by withinLimit). */
    quantity: number;
    /** The hidden path the token was issued with (purchasePath). */
    purchasePath: string;
    /** The client's Idempotency-Key, when it sent one (idempotencyKey). */
    idempotencyKey: string | undefined;
    /** The purchase's request id, which the 202 answers as `requestId` (purchaseRequest). */
    purchaseId: string;
    /** The verified token (verifyToken). */
    verified: PurchaseToken;
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
