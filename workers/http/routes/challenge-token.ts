import { Hono } from 'hono';
import { issueChallenge, passChallenge, returnChallenge } from '../../edge/captcha';
import { requireEligible } from '../../edge/eligibility';
import { PURCHASE_TOKEN_TTL_MS, refuseIfEnded } from '../../edge/purchase';
import { issuePurchaseToken } from '../../edge/signed';
import { soldOutNow } from '../../edge/sold-out';
import { AppError } from '../../kernel/errors';
import { TokenBody } from '../../kernel/http-bodies';
import { type AppEnv, waitUntilOf } from '../context';
import { requireAdmission } from '../middleware/admission-pass';
import { goodsInPath, loadGoods } from '../middleware/goods';
import { requireJson } from '../middleware/require-json';
import { saleLimits } from '../middleware/sale-limits';
import { shopperAuth } from '../middleware/shopper-auth';
import { valid } from '../middleware/validate';
import { failedDependency } from '../on-error';

/** A captcha for a goods, and its answer exchanged for a one-time purchase token and the hidden path. */
export const challengeToken = new Hono<AppEnv>()
  .post('/goods/:goodsId/challenge', shopperAuth, saleLimits('challenge'), goodsInPath, loadGoods, async (c) => {
    const config = c.get('config'),
      goods = c.get('goods'),
      limits = c.get('limits'),
      userId = c.get('userId');
    const now = Date.now();
    refuseIfEnded(goods, now);
    return c.json(await issueChallenge(config, limits.powDifficulty, userId, goods.id, now));
  })

  .post(
    '/goods/:goodsId/token',
    shopperAuth,
    saleLimits('token'),
    goodsInPath,
    requireJson,
    valid('json', TokenBody),
    loadGoods,
    // While the waiting room holds a line: 403 NOT_ADMITTED without an admission pass.
    requireAdmission,
    async (c) => {
      const body = c.req.valid('json');
      const config = c.get('config'),
        goods = c.get('goods'),
        limits = c.get('limits'),
        userId = c.get('userId');
      const now = Date.now();
      refuseIfEnded(goods, now);
      if (soldOutNow(goods.id, now)) {
        throw new AppError('SOLD_OUT');
      }
      const spent = await passChallenge(
        c.env,
        config,
        limits.powDifficulty,
        body,
        { userId, goodsId: goods.id, ip: c.get('clientIp') },
        now,
      );
      // 403 NOT_ELIGIBLE / 409 LIMIT_REACHED before a token is spent on a shopper who cannot buy.
      // Postgres failing under that read (503) gives the challenge back before the answer: the
      // shopper's retry of the same answer passes.
      try {
        await requireEligible(config, goods, userId, waitUntilOf(c));
      } catch (error) {
        if (spent && failedDependency(error)) {
          await returnChallenge(c.env, spent);
        }
        throw error;
      }
      const issued = await issuePurchaseToken(config.tokenSecret, userId, goods.id, PURCHASE_TOKEN_TTL_MS, now, c.get('admitted') === true);
      return c.json({ token: issued.token, path: issued.path, expiresAt: new Date(issued.expiresAt).toISOString() });
    },
  );
