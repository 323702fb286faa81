import { Hono } from 'hono';
import { z } from 'zod';
import { randomId, sha256B64 } from '../crypto';
import { AppError, type ErrorCode } from '../errors';
import { currentGoods, getGoods, goodsView } from '../goods';
import { log } from '../log';
import { reserve } from '../reserve-client';
import { edgeGuard, goodsStock } from '../routing';
import { type FailReason, GoodsId, IdempotencyKey, PurchaseBody, RequestId, type ReserveOutcome, TokenBody } from '../schemas';
import { answerHash, issuePurchaseToken, openChallenge, sealChallenge, verifyPurchase } from '../signed';
import { shopperAuth } from './auth';
import type { AppEnv } from './context';
import { valid } from './validate';

/** One-time purchase tokens live 60 s (seed: token and path valid 60 s). */
export const PURCHASE_TOKEN_TTL_MS = 60_000;
/** A built-in challenge can be answered for this long, once. */
export const CHALLENGE_TTL_MS = 5 * 60_000;

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

/** The request id of a purchase: derived from the Idempotency-Key when there is one. */
async function purchaseRequestId(goodsId: number, userId: string, key: string | undefined): Promise<string> {
  return `${goodsId}.${key ? await sha256B64(`${userId}|${goodsId}|${key}`, 22) : randomId()}`;
}

export const shopper = new Hono<AppEnv>()
  .get('/goods', async (c) => {
    const now = Date.now();
    const rows = [...(await currentGoods(c.var.config, now)).values()].filter((r) => r.endAt.getTime() > now);
    const snapshots = await Promise.all(
      rows.map((r) =>
        goodsStock(c.env, r.id)
          .snapshot()
          .catch(() => undefined),
      ),
    );
    return c.json(rows.map((r, i) => goodsView(r, snapshots[i], undefined, now)));
  })

  .get('/goods/:goodsId', valid('param', GoodsParam), async (c) => {
    const { goodsId } = c.req.valid('param');
    const row = await getGoods(c.var.config, goodsId);
    const snapshot = await goodsStock(c.env, goodsId)
      .snapshot()
      .catch(() => undefined);
    return c.json(goodsView(row, snapshot, undefined, Date.now()));
  })

  .post('/goods/:goodsId/challenge', shopperAuth, valid('param', GoodsParam), async (c) => {
    const { goodsId } = c.req.valid('param');
    await getGoods(c.var.config, goodsId);
    const expiresAt = Date.now() + CHALLENGE_TTL_MS;
    const turnstile = c.var.config.turnstile;
    if (turnstile) {
      return c.json({
        challengeId: 'turnstile',
        kind: 'turnstile',
        siteKey: turnstile.siteKey,
        expiresAt: new Date(expiresAt).toISOString(),
      });
    }
    const [a, b] = crypto.getRandomValues(new Uint8Array(2)).map((x) => 1 + (x % 9));
    const nonce = randomId();
    const challengeId = await sealChallenge(c.var.config.tokenSecret, {
      u: c.var.userId,
      g: goodsId,
      e: expiresAt,
      n: nonce,
      k: 'arithmetic',
      h: await answerHash(c.var.config.tokenSecret, nonce, String((a ?? 0) + (b ?? 0))),
    });
    return c.json({ challengeId, kind: 'arithmetic', prompt: `${a} + ${b} = ?`, expiresAt: new Date(expiresAt).toISOString() });
  })

  .post('/goods/:goodsId/token', shopperAuth, valid('param', GoodsParam), valid('json', TokenBody), async (c) => {
    const { goodsId } = c.req.valid('param');
    const body = c.req.valid('json');
    const { config, userId } = c.var;
    await getGoods(config, goodsId);
    if (!('challengeId' in body)) {
      throw new AppError('CAPTCHA_FAILED', 'Turnstile is not configured; answer the built-in challenge');
    }
    const challenge = await openChallenge(config.tokenSecret, body.challengeId);
    const now = Date.now();
    if (!challenge || challenge.u !== userId || challenge.g !== goodsId || challenge.e <= now) {
      throw new AppError('CAPTCHA_FAILED', 'the challenge is unknown, expired or not yours');
    }
    if ((await answerHash(config.tokenSecret, challenge.n, String(body.answer))) !== challenge.h) {
      // A wrong answer spends the challenge too, so it cannot be brute-forced.
      await edgeGuard(c.env, challenge.n).useOnce(`challenge:${challenge.n}`, challenge.e);
      throw new AppError('CAPTCHA_FAILED', 'wrong answer');
    }
    if (!(await edgeGuard(c.env, challenge.n).useOnce(`challenge:${challenge.n}`, challenge.e))) {
      throw new AppError('CAPTCHA_FAILED', 'the challenge was already used');
    }
    const issued = await issuePurchaseToken(config.tokenSecret, userId, goodsId, PURCHASE_TOKEN_TTL_MS, now);
    return c.json({ token: issued.token, path: issued.path, expiresAt: new Date(issued.expiresAt).toISOString() });
  })

  .post('/do/:path', shopperAuth, valid('param', PathParam), valid('header', IdempotencyHeader), valid('json', PurchaseBody), async (c) => {
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
    if (now >= goods.endAt.getTime() && !key) {
      throw new AppError('ENDED');
    }
    const requestId = await purchaseRequestId(goodsId, userId, key);
    c.set('requestId', requestId);
    let outcome: ReserveOutcome;
    try {
      outcome = await reserve(
        c.env,
        goodsId,
        { requestId, userId, tokenId: verified.tokenId, tokenExpiresAt: verified.expiresAt, keyed: key !== undefined },
        (goods.locationHint ?? undefined) as DurableObjectLocationHint | undefined,
      );
    } catch (error) {
      // The object is overloaded, restarting or unreachable. A retry with the same
      // Idempotency-Key gets whatever it decided, if it decided anything.
      log.warn('purchase.reserve_failed', { requestId, goodsId, error });
      throw new AppError('BUSY');
    }
    if (!outcome.ok) {
      throw new AppError(REASON_CODE[outcome.reason]);
    }
    return c.json({ code: 0, message: 'queued', requestId }, 202);
  })

  .get('/result/:requestId', shopperAuth, valid('param', RequestParam), async (c) => {
    const { requestId } = c.req.valid('param');
    const goodsId = Number(requestId.slice(0, requestId.indexOf('.')));
    await getGoods(c.var.config, goodsId);
    const view = await goodsStock(c.env, goodsId).result(requestId);
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
