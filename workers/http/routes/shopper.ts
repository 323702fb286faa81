import { Hono } from 'hono';
import { z } from 'zod';
import type { GoodsRow } from '../../../db/goods';
import { goodsStock } from '../../../durable-objects/routing';
import { acquirePermit, enterInFlight } from '../../edge/admission';
import { issueChallenge, passChallenge } from '../../edge/captcha';
import { currentGoods, getGoods, goodsView } from '../../edge/goods-cache';
import { currentLimits } from '../../edge/limits';
import { reserve } from '../../edge/reserve-client';
import { issuePurchaseToken, verifyPurchase } from '../../edge/signed';
import { knownSoldOut, markInStock, markSoldOut, soldOutNow } from '../../edge/sold-out';
import { mirroredResult, readRemaining } from '../../edge/stock-reads';
import {
  type FailReason,
  GoodsId,
  IdempotencyKey,
  PurchaseBody,
  RequestId,
  type ReserveOutcome,
  type StockSnapshot,
  TokenBody,
} from '../../kernel/contract';
import { randomId, sha256B64 } from '../../kernel/crypto';
import { AppError, type ErrorCode } from '../../kernel/errors';
import { admissionRate } from '../../kernel/limits';
import { log } from '../../kernel/log';
import { type AppEnv, waitUntilOf } from '../context';
import { shopperAuth } from '../middleware/auth';
import { requireJson } from '../middleware/require-json';
import { edgeShield, saleGuard } from '../middleware/shield';
import { valid } from '../middleware/validate';

/** One-time purchase tokens live 60 s (seed: token and path valid 60 s). */
export const PURCHASE_TOKEN_TTL_MS = 60_000;

const GoodsParam = z.object({ goodsId: GoodsId });
const PathParam = z.object({ path: z.string().regex(/^[A-Za-z0-9_-]{32}$/, 'not a purchase path') });
const RequestParam = z.object({ requestId: RequestId });
const IdempotencyHeader = z.object({ 'idempotency-key': IdempotencyKey.optional() });

const REASON_CODE: Record<FailReason, ErrorCode> = {
  SOLD_OUT: 'SOLD_OUT',
  ALREADY_PURCHASED: 'ALREADY_PURCHASED',
  NOT_STARTED: 'NOT_STARTED',
  ENDED: 'ENDED',
  PAUSED: 'PAUSED',
  TOKEN_INVALID: 'TOKEN_INVALID',
  NOT_FOUND: 'NOT_FOUND',
  BUSY: 'BUSY',
  CANCELLED: 'CONFLICT',
  CLOSED_TIMEOUT: 'CONFLICT',
  ORDER_FAILED: 'CONFLICT',
};

/** Feeds the sold-out fast path from what a stock object just said about itself. */
function noteStock(goodsId: number, snapshot: Pick<StockSnapshot, 'remaining'> | undefined): void {
  if (snapshot?.remaining === 0) {
    markSoldOut(goodsId);
  } else if (snapshot && snapshot.remaining > 0) {
    markInStock(goodsId);
  }
}

/**
 * What the edge can answer for a purchase without the goods' object, from isolate-local copies:
 * sold out (trusted a few seconds), not started, ended, paused (the goods list, a few seconds
 * old). Only for requests without an Idempotency-Key: a keyed retry may be owed the answer the
 * object gave it earlier, so it always goes through.
 */
function refuseFromCache(goods: GoodsRow, now: number): void {
  if (now >= goods.endAt.getTime()) {
    throw new AppError('ENDED');
  }
  if (now < goods.startAt.getTime()) {
    throw new AppError('NOT_STARTED');
  }
  if (goods.status === 1) {
    throw new AppError('PAUSED');
  }
  if (knownSoldOut(goods.id, now)) {
    throw new AppError('SOLD_OUT');
  }
}

/** The request id of a purchase: derived from the Idempotency-Key when there is one. */
async function purchaseRequestId(goodsId: number, userId: string, key: string | undefined): Promise<string> {
  return `${goodsId}.${key ? await sha256B64(`${userId}|${goodsId}|${key}`, 22) : randomId()}`;
}

export const shopper = new Hono<AppEnv>()
  .use(edgeShield)

  .get('/goods', async (c) => {
    const now = Date.now();
    const rows = [...(await currentGoods(c.var.config, now)).values()].filter((r) => r.endAt.getTime() > now);
    const stocks = await readRemaining(
      c.env,
      c.var.config,
      rows.map((r) => r.id),
    );
    for (const [i, r] of rows.entries()) {
      noteStock(r.id, stocks[i]);
    }
    return c.json(rows.map((r, i) => goodsView(r, stocks[i]?.snapshot, stocks[i]?.remaining, now)));
  })

  .get('/goods/:goodsId', valid('param', GoodsParam), async (c) => {
    const { goodsId } = c.req.valid('param');
    const row = await getGoods(c.var.config, goodsId);
    const [stock] = await readRemaining(c.env, c.var.config, [goodsId]);
    noteStock(goodsId, stock);
    return c.json(goodsView(row, stock?.snapshot, stock?.remaining, Date.now()));
  })

  .post('/goods/:goodsId/challenge', shopperAuth, saleGuard('challenge'), valid('param', GoodsParam), async (c) => {
    const { goodsId } = c.req.valid('param');
    const goods = await getGoods(c.var.config, goodsId);
    const now = Date.now();
    if (now >= goods.endAt.getTime()) {
      throw new AppError('ENDED');
    }
    const limits = await currentLimits(c.env);
    return c.json(await issueChallenge(c.var.config, limits.powDifficulty, c.var.userId, goodsId, now));
  })

  .post(
    '/goods/:goodsId/token',
    shopperAuth,
    saleGuard('token'),
    valid('param', GoodsParam),
    requireJson,
    valid('json', TokenBody),
    async (c) => {
      const { goodsId } = c.req.valid('param');
      const body = c.req.valid('json');
      const { config, userId } = c.var;
      const goods = await getGoods(config, goodsId);
      const now = Date.now();
      if (now >= goods.endAt.getTime()) {
        throw new AppError('ENDED');
      }
      if (soldOutNow(goodsId, now)) {
        throw new AppError('SOLD_OUT');
      }
      const limits = await currentLimits(c.env);
      await passChallenge(c.env, config, limits.powDifficulty, body, { userId, goodsId, ip: c.var.clientIp }, now);
      const issued = await issuePurchaseToken(config.tokenSecret, userId, goodsId, PURCHASE_TOKEN_TTL_MS, now);
      return c.json({ token: issued.token, path: issued.path, expiresAt: new Date(issued.expiresAt).toISOString() });
    },
  )

  // Checks cheapest first: the body, the goods known, the isolate's sold-out/window/pause
  // copies (a sold-out answer needs no sign-in, so the flood after a sell-out costs neither a
  // signature check nor an object call), the shopper, limits and bans (saleGuard), token and
  // path, in-flight cap, admission; then the object.
  .post(
    '/do/:path',
    requireJson,
    valid('json', PurchaseBody),
    async function refuseEarly(c, next) {
      if (c.req.header('idempotency-key') === undefined) {
        refuseFromCache(await getGoods(c.var.config, c.req.valid('json').goodsId), Date.now());
      }
      await next();
    },
    shopperAuth,
    valid('param', PathParam),
    valid('header', IdempotencyHeader),
    saleGuard('purchase'),
    async (c) => {
      const { path } = c.req.valid('param');
      const { goodsId, token } = c.req.valid('json');
      const key = c.req.valid('header')['idempotency-key'];
      const { config, userId } = c.var;
      const goods = await getGoods(config, goodsId);
      const now = Date.now();
      const verified = await verifyPurchase(config.tokenSecret, token, path, userId, goodsId, now - (key ? PURCHASE_TOKEN_TTL_MS * 60 : 0));
      // With an Idempotency-Key an expired token may still replay its first answer (the object
      // decides); without one it is refused here.
      if (!verified || (!key && verified.expiresAt <= now)) {
        throw new AppError('TOKEN_INVALID');
      }
      const requestId = await purchaseRequestId(goodsId, userId, key);
      c.set('requestId', requestId);
      const limits = await currentLimits(c.env);
      const hint = (goods.locationHint ?? undefined) as DurableObjectLocationHint | undefined;
      const leave = enterInFlight(goodsId, limits.inFlightPerGoods);
      let outcome: ReserveOutcome;
      try {
        await acquirePermit(c.env, goodsId, admissionRate(limits, goodsId), hint);
        outcome = await reserve(
          c.env,
          goodsId,
          { requestId, userId, tokenId: verified.tokenId, tokenExpiresAt: verified.expiresAt, keyed: key !== undefined },
          hint,
          waitUntilOf(c),
        );
      } catch (error) {
        if (error instanceof AppError) {
          throw error;
        }
        // The object is overloaded, restarting or unreachable: answer at once rather than queue.
        // A retry with the same Idempotency-Key gets whatever it decided, if it decided anything.
        const overloaded = typeof error === 'object' && error !== null && 'overloaded' in error && error.overloaded === true;
        log.warn('purchase.reserve_failed', { requestId, goodsId, overloaded, error });
        throw new AppError('BUSY', undefined, { 'retry-after': '1' });
      } finally {
        leave();
      }
      if (!outcome.ok) {
        if (outcome.reason === 'SOLD_OUT') {
          markSoldOut(goodsId);
        }
        throw new AppError(REASON_CODE[outcome.reason]);
      }
      if (!outcome.replay) {
        markInStock(goodsId);
      }
      return c.json({ code: 0, message: 'queued', requestId }, 202);
    },
  )

  .get('/result/:requestId', shopperAuth, valid('param', RequestParam), async (c) => {
    const { requestId } = c.req.valid('param');
    const goodsId = Number(requestId.slice(0, requestId.indexOf('.')));
    await getGoods(c.var.config, goodsId);
    const view = (await mirroredResult(c.var.config, requestId)) ?? (await goodsStock(c.env, goodsId).result(requestId));
    // Someone else's request is reported as unknown, so ids cannot be probed.
    if (!view || view.userId !== c.var.userId) {
      throw new AppError('NOT_FOUND', 'no such request');
    }
    return c.json({
      requestId: view.requestId,
      status: view.status,
      ...(view.orderId ? { orderId: view.orderId } : {}),
      ...(view.reason ? { reason: view.reason } : {}),
    });
  });
